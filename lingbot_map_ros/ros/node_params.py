"""`NodeParams`: the typed snapshot of every node parameter, one frozen field per row of
`PARAMETERS` (ros/param_table.py), named by `params.field_name` (`kv_cache.sliding_window` ->
`kv_cache_sliding_window`) and typed by the row's default (string arrays as tuples).

Generated: `python -m lingbot_map_ros.ros.params --node-params > lingbot_map_ros/ros/node_params.py`;
test/ros/test_ros_params_derived.py fails when it drifts from the table. Do not edit by hand."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class NodeParams:
    """Every node parameter (ros/param_table.py has the defaults, ranges and descriptions)."""

    autostart: bool
    model_checkpoint: str
    model_preset: str
    model_device: str
    model_dtype: str
    model_synthetic_seed: int
    model_image_width: int
    model_cuda_graphs: bool
    model_compile_blocks: bool
    model_compile_cache_dir: str
    model_warmup_image_size: str
    attention_backend: str
    kv_cache_sliding_window: int
    kv_cache_max_window: int
    kv_cache_scale_frames: int
    keyframe_interval: int
    map_frame: str
    odom_frame: str
    base_frame: str
    camera_frame: str
    tf_mode: str
    tf_timeout: float
    tf_transform_tolerance: float
    tf_publish_rate: float
    tf_max_future_s: float
    scale_source: str
    scale_factor: float
    scale_min_baseline: float
    scale_min_samples: int
    scale_window: int
    scale_max_change: float
    grid_resolution: float
    grid_min_height: float
    grid_max_height: float
    grid_rate: float
    covariance_position_std: float
    covariance_orientation_std: float
    covariance_unscaled_factor: float
    twist_min_dt: float
    map_voxel_size: float
    map_conf_threshold: float
    map_max_points: int
    map_stride: int
    map_publish_rate: float
    path_max_length: int
    path_publish_rate: float
    trajectory_max_poses: int
    publish_depth: bool
    publish_frame_cloud: bool
    depth_every_n: int
    inference_overlap: bool
    inference_gil_switch_interval_ms: float
    queue_size: int
    output_dir: str
    session_dir: str
    session_load_path: str
    session_save_with_map: bool
    mapping_enabled: bool
    max_input_pixels: int
    max_aspect_ratio: float
    stream_change_confirm_frames: int
    image_transport: str
    qos_reliability: str
    qos_depth: int
    diagnostics_rate: float
    batch_max_wait_ms: float
    batch_max_batch: int
    cameras: tuple[str, ...]
    loop_closure_enabled: bool
    loop_closure_keyframe_translation: float
    loop_closure_keyframe_rotation_deg: float
    loop_closure_exclude_recent: int
    loop_closure_top_k: int
    loop_closure_min_similarity: float
    loop_closure_max_keyframes: int
    loop_closure_merge_size: int
    loop_closure_max_time_ms: float
