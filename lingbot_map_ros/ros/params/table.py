"""`PARAMETERS`: every ROS parameter of the node, once, with its default, range or choices, description and
whether it applies live (docs/node.md has the same table; `config/lingbot_map.yaml` is generated from it).

A parameter of an engine setting is a `ParamSpec.of(name, Owner, field)` row: its default, range, choices and
description belong to the owning dataclass field (`engine.settings.setting`); the row adds only the ROS name
and whether it applies live. The other rows are node-only parameters (frames, rates, topics, directories) and
are owned here.
"""

from __future__ import annotations

from ...engine.face import (
    PRESET_NAMES,
    BatchConfig,
    CovarianceConfig,
    GraphConfig,
    GridConfig,
    LoopClosureConfig,
    MapperConfig,
    ScaleConfig,
    SessionConfig,
    TfMode,
    VoxelMapConfig,
)
from .spec import ParamSpec

PARAMETERS: tuple[ParamSpec, ...] = (
    ParamSpec("autostart", True, "Configure and activate on start-up, so a plain `ros2 run` maps at once."),
    ParamSpec(
        "model.checkpoint", "", "Checkpoint (.pt / .safetensors). Empty: synthetic weights of the preset."
    ),
    ParamSpec("model.preset", PRESET_NAMES[0], "Architecture preset.", choices=PRESET_NAMES),
    ParamSpec("model.device", "auto", "Torch device: auto (cuda if available), cpu, cuda, cuda:N."),
    ParamSpec(
        "model.dtype",
        "auto",
        "Aggregator compute dtype (auto: bf16 on cuda, fp32 on cpu).",
        choices=("auto", "float32", "bfloat16", "float16"),
    ),
    ParamSpec(
        "model.synthetic_seed",
        0,
        "Seed of the synthetic weights used when model.checkpoint is empty (the same seed gives the same "
        "weights in every process, as `lingbot-map-ros run --seed`).",
        int_range=(0, 2**31 - 1),
    ),
    ParamSpec.of("model.image_width", SessionConfig, "image_width"),
    ParamSpec.of("model.cuda_graphs", SessionConfig, "cuda_graphs"),
    ParamSpec.of("model.compile_blocks", SessionConfig, "compile_blocks"),
    ParamSpec(
        "model.compile_cache_dir",
        "",
        "Persistent torch.compile cache (TORCHINDUCTOR_CACHE_DIR). Empty: "
        "$XDG_CACHE_HOME/lingbot_map_ros/torch_compile (~/.cache/... without XDG_CACHE_HOME), unless "
        "TORCHINDUCTOR_CACHE_DIR is set.",
    ),
    ParamSpec(
        "model.warmup_image_size",
        "518x378",
        "Camera image size WxH for the warm-up during configure on CUDA (captures the CUDA graphs and "
        "compiles at the network resolution this size maps to, so no frame waits); other sizes at run time "
        "capture/compile on their first frame. Empty: no warm-up.",
    ),
    ParamSpec.of("attention.backend", SessionConfig, "backend"),
    ParamSpec.of("kv_cache.sliding_window", SessionConfig, "sliding_window", live=True),
    ParamSpec.of("kv_cache.max_window", SessionConfig, "max_window"),
    ParamSpec.of("kv_cache.scale_frames", SessionConfig, "scale_frames"),
    ParamSpec.of("kv_cache.reanchor_steps", SessionConfig, "reanchor_steps"),
    ParamSpec.of("keyframe.interval", SessionConfig, "keyframe_interval"),
    ParamSpec("map_frame", "map", "Fixed frame of TF, odometry, path, grid and map cloud (REP-105)."),
    ParamSpec("odom_frame", "odom", "Odometry frame of the robot (REP-105); parent of base_frame in TF."),
    ParamSpec("base_frame", "base_link", "Robot body frame (REP-105); odometry child in the robot modes."),
    ParamSpec("camera_frame", "", "Camera optical frame; empty: the input image header's frame_id."),
    ParamSpec(
        "tf.mode",
        TfMode.AUTO.value,
        "The single TF edge published: map_to_odom (odom -> base and base -> camera from TF), map_to_base "
        "(base -> camera from TF), map_to_camera (bare camera), auto (the first whose chain is in TF, chosen "
        "when a stream starts).",
        choices=tuple(mode.value for mode in TfMode),
    ),
    ParamSpec(
        "tf.timeout",
        0.2,
        "Seconds to wait for a transform at the image stamp; then the frame is dropped (tf_unavailable).",
        float_range=(0.0, 10.0),
    ),
    ParamSpec(
        "tf.transform_tolerance",
        0.1,
        "map -> odom is stamped this many seconds after the image, and republished stamped now + this.",
        float_range=(0.0, 10.0),
    ),
    ParamSpec(
        "tf.publish_rate",
        20.0,
        "Rate in Hz of republishing the latest map -> odom (stamped now + tf.transform_tolerance).",
        float_range=(0.1, 1000.0),
    ),
    ParamSpec(
        "tf.cache_time",
        60.0,
        "Seconds of TF history the node keeps (tf2 Buffer cache_time; tf2's default is 10 s). It must cover "
        "the oldest frame the node still poses: a frame waits up to queue_size x the model's step time; one "
        "whose stamp is older than the newest TF by more than this is dropped at once (frame_too_old), not "
        "as a missing transform. Fixed for the node's life.",
        float_range=(1.0, 3600.0),
    ),
    ParamSpec(
        "tf.max_future_s",
        5.0,
        "An incoming /tf sample stamped more than this many seconds after the node's clock is rejected, "
        "not stored (/diagnostics tf.rejected.<edge>): one far-future sample would hide every newer one.",
        live=True,
        float_range=(0.0, 1e9),
    ),
    ParamSpec.of("scale.source", ScaleConfig, "source"),
    ParamSpec.of("scale.factor", ScaleConfig, "factor"),
    ParamSpec.of("scale.min_baseline", ScaleConfig, "min_baseline"),
    ParamSpec.of("scale.min_samples", ScaleConfig, "min_samples"),
    ParamSpec.of("scale.window", ScaleConfig, "window"),
    ParamSpec.of("scale.max_change", ScaleConfig, "max_change"),
    ParamSpec.of("grid.resolution", GridConfig, "resolution"),
    ParamSpec.of("grid.min_height", GridConfig, "min_height"),
    ParamSpec.of("grid.max_height", GridConfig, "max_height"),
    ParamSpec("grid.rate", 0.5, "Rate of ~/grid in Hz (when it changed).", float_range=(0.01, 30.0)),
    ParamSpec.of("covariance.position_std", CovarianceConfig, "position_std"),
    ParamSpec.of("covariance.orientation_std", CovarianceConfig, "orientation_std"),
    ParamSpec.of("covariance.unscaled_factor", CovarianceConfig, "unscaled_factor"),
    ParamSpec.of("twist.min_dt", CovarianceConfig, "twist_min_dt"),
    ParamSpec.of("map.voxel_size", VoxelMapConfig, "voxel_size"),
    ParamSpec.of("map.conf_threshold", VoxelMapConfig, "conf_threshold", live=True),
    ParamSpec.of("map.max_points", VoxelMapConfig, "max_points"),
    ParamSpec.of("map.stride", VoxelMapConfig, "pixel_stride", live=True),
    ParamSpec("map_publish_rate", 1.0, "Rate of ~/map_cloud in Hz.", float_range=(0.01, 30.0)),
    ParamSpec.of("path.max_length", MapperConfig, "path_max_length", live=True),
    ParamSpec(
        "path.publish_rate",
        2.0,
        "Rate of ~/path in Hz (when a frame was posed since; never on the pose outputs' thread).",
        float_range=(0.01, 100.0),
    ),
    ParamSpec.of("trajectory.max_poses", MapperConfig, "trajectory_max_poses"),
    ParamSpec("publish.depth", True, "Publish ~/depth (32FC1 at the input resolution).", live=True),
    ParamSpec("publish.frame_cloud", True, "Publish ~/frame_cloud (this frame's points).", live=True),
    ParamSpec.of("depth.every_n", SessionConfig, "depth_every_n"),
    ParamSpec(
        "inference.overlap",
        True,
        "One camera: a one-deep pipeline on the inference thread (StreamingSession.push_overlapped): a "
        "frame's host work (pre-processing, decoding, publishing hand-off) runs while the previous frame's "
        "step is on the GPU; when no next frame is waiting the frame in flight is collected at once, so a "
        "camera slower than the model waits one step, not two. Several cameras: the same one-deep pipeline "
        "of rounds (MultiStreamSession.run_round with overlap: round n+1's frames are taken in and its "
        "batched step queued before round n's results are decoded). CUDA only (on the CPU a step is "
        "synchronous: nothing to overlap). false: one synchronous push per frame, one synchronous round.",
        live=True,
    ),
    ParamSpec(
        "inference.gil_switch_interval_ms",
        0.2,
        "On CUDA: Python's GIL switch interval (sys.setswitchinterval; Python's default 5 ms). The inference "
        "thread gives the GIL back ~60 times a step and waits up to this long each time behind the node's "
        "other threads (docs/performance.md).",
        float_range=(0.01, 5.0),
    ),
    ParamSpec(
        "queue_size", 2, "Frames waiting for inference; a full queue drops its oldest.", int_range=(1, 100)
    ),
    ParamSpec(
        "output_dir",
        "~/.ros/lingbot_map",
        "Directory of ~/save_map (PLY map + TUM trajectory); must be absolute after expanding '~' "
        "(empty, relative or unexpandable values are rejected). Fixed while configured: a live change over "
        "DDS could make the node write anywhere.",
    ),
    ParamSpec(
        "session.dir",
        "~/.ros/lingbot_map/sessions",
        "Directory of saved sessions (~/save_session writes below it; session.load_path and "
        "~/load_session read only below it); absolute after expanding '~'. Fixed while configured (stale "
        "temporaries of interrupted saves are removed below it at configure).",
    ),
    ParamSpec(
        "session.load_path",
        "",
        "Saved session (a folder name below session.dir) to continue: loaded when the node activates after "
        "configure, and by ~/load_session: one folder name (letters, digits, '_', '-', '.'; no '/', not "
        "starting with '.'). Empty: start a new map.",
        live=True,
    ),
    ParamSpec(
        "session.save_with_map",
        False,
        "~/save_map also saves a session (as ~/save_session does).",
        live=True,
    ),
    ParamSpec(
        "mapping.enabled",
        True,
        "false = localisation mode: poses, TF and odometry go on, the map and the grid are not extended.",
        live=True,
    ),
    ParamSpec(
        "tracking.health",
        True,
        "Judge each frame's tracking (tracking | degraded | lost | relocalised, ~/tracking_state): while "
        "degraded or lost the odometry covariance is inflated and the frame does not map; with loop "
        "closure a lost camera relocalises against the keyframe map (docs/robot.md 'Tracking state'). "
        "Read at configure.",
    ),
    ParamSpec(
        "max_input_pixels",
        16_777_216,
        "Largest input image (width x height, from the Image or PNG/JPEG header) accepted; larger ones are "
        "rejected before decoding (rejected_oversized_image). 16,777,216 = 4096 x 4096.",
        live=True,
        int_range=(196, 268_435_456),
    ),
    ParamSpec(
        "max_aspect_ratio",
        8.0,
        "Largest long side / short side of an input image; flatter ones are rejected before decoding "
        "(rejected_unsupported_aspect_ratio), which bounds the resized intermediate to 518 x 8 rows.",
        live=True,
        float_range=(1.0, 1000.0),
    ),
    ParamSpec(
        "stream.change_confirm_frames",
        3,
        "Consecutive frames of a new size or frame_id needed to restart the stream (a new map); fewer "
        "are rejected (rejected_unconfirmed_stream_change). 1: restart at the first one.",
        live=True,
        int_range=(1, 100),
    ),
    ParamSpec(
        "image_transport",
        "raw",
        "raw: subscribe `image`; compressed: `image/compressed`.",
        choices=("raw", "compressed"),
    ),
    ParamSpec(
        "qos.reliability",
        "best_effort",
        "Image subscription reliability (best_effort = sensor data).",
        choices=("best_effort", "reliable"),
    ),
    ParamSpec("qos.depth", 5, "Image subscription history depth.", int_range=(1, 1000)),
    ParamSpec("diagnostics_rate", 1.0, "Rate of /diagnostics in Hz.", float_range=(0.1, 100.0)),
    ParamSpec.of("batch.max_wait_ms", BatchConfig, "max_wait_ms"),
    ParamSpec.of("batch.max_batch", BatchConfig, "max_batch"),
    ParamSpec(
        "cameras",
        [""],
        "Camera names, e.g. [front, rear]: camera <name> is subscribed on <name>/image (or "
        "<name>/image/compressed) and <name>/camera_info and publishes under ~/<name>/ (docs/node.md, "
        "\"Several cameras\"). [''] (default): one unnamed camera on image and camera_info, outputs "
        "under ~/.",
        startup=True,
    ),
    ParamSpec.of("loop_closure.enabled", LoopClosureConfig, "enabled"),
    ParamSpec.of("loop_closure.keyframe_translation", LoopClosureConfig, "keyframe_translation"),
    ParamSpec.of("loop_closure.keyframe_rotation_deg", LoopClosureConfig, "keyframe_rotation_deg"),
    ParamSpec.of("loop_closure.exclude_recent", LoopClosureConfig, "exclude_recent"),
    ParamSpec.of("loop_closure.top_k", LoopClosureConfig, "top_k"),
    ParamSpec.of("loop_closure.min_similarity", LoopClosureConfig, "min_similarity"),
    ParamSpec.of("loop_closure.max_keyframes", LoopClosureConfig, "max_keyframes"),
    ParamSpec.of("loop_closure.merge_size", LoopClosureConfig, "merge_size"),
    ParamSpec.of("loop_closure.max_time_ms", GraphConfig, "max_time_ms"),
    ParamSpec.of("loop_closure.max_correction_m", LoopClosureConfig, "max_correction_m"),
)
