"""`PARAMETERS`: every ROS parameter of the node, once, with its default, range or choices, description and
whether it applies live (docs/node.md has the same table; `config/lingbot_map.yaml` is generated from it)."""

from __future__ import annotations

from ..engine.config import (
    BACKENDS,
    DEFAULT_MAX_WINDOW,
    DEFAULT_SLIDING_WINDOW,
    PATCH_SIZE,
    ROPE_TABLE_FRAMES,
)
from ..engine.frames import TF_AUTO, TF_MODES
from ..engine.loop.config import LoopClosureConfig
from ..engine.scale import SCALE_SOURCES
from .param_spec import ParamSpec

#: Defaults of the `loop_closure.*` rows (one owner: the engine's config).
LOOP = LoopClosureConfig()

PARAMETERS: tuple[ParamSpec, ...] = (
    ParamSpec("autostart", True, "Configure and activate on start-up, so a plain `ros2 run` maps at once."),
    ParamSpec(
        "model.checkpoint", "", "Checkpoint (.pt / .safetensors). Empty: synthetic weights of the preset."
    ),
    ParamSpec("model.preset", "lingbot-map", "Architecture preset.", choices=("lingbot-map", "tiny")),
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
    ParamSpec(
        "model.image_width",
        518,
        f"Network input width in pixels (multiple of {PATCH_SIZE}; 518 as released).",
        int_range=(28, 1036),
    ),
    ParamSpec(
        "model.cuda_graphs",
        True,
        "On CUDA, replay streaming steps as CUDA graphs around the attention (same outputs, faster).",
    ),
    ParamSpec(
        "model.compile_blocks",
        True,
        "With model.cuda_graphs, torch.compile the blocks inside the graphs (~24% faster on the H200). "
        "Compiled during configure by the warm-up (about a minute the first time, seconds with the compile "
        "cache); false: no compiler at all.",
    ),
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
    ParamSpec("attention.backend", "auto", "Global-attention backend.", choices=BACKENDS),
    ParamSpec(
        "kv_cache.sliding_window",
        DEFAULT_SLIDING_WINDOW,
        "Non-anchor frames kept in the KV cache.",
        live=True,
        int_range=(1, ROPE_TABLE_FRAMES),
    ),
    ParamSpec(
        "kv_cache.max_window",
        DEFAULT_MAX_WINDOW,
        "Cache pool capacity: upper bound of kv_cache.sliding_window.",
        int_range=(1, ROPE_TABLE_FRAMES),
    ),
    ParamSpec("kv_cache.scale_frames", 8, "Anchor frames (phase 1), never evicted.", int_range=(1, 64)),
    ParamSpec(
        "keyframe.interval", 1, "Every N-th streaming frame is stored in the cache.", int_range=(1, 1000)
    ),
    ParamSpec("map_frame", "map", "Fixed frame of TF, odometry, path, grid and map cloud (REP-105)."),
    ParamSpec("odom_frame", "odom", "Odometry frame of the robot (REP-105); parent of base_frame in TF."),
    ParamSpec("base_frame", "base_link", "Robot body frame (REP-105); odometry child in the robot modes."),
    ParamSpec("camera_frame", "", "Camera optical frame; empty: the input image header's frame_id."),
    ParamSpec(
        "tf.mode",
        TF_AUTO,
        "The single TF edge published: map_to_odom (odom -> base and base -> camera from TF), map_to_base "
        "(base -> camera from TF), map_to_camera (bare camera), auto (the first whose chain is in TF, chosen "
        "when a stream starts).",
        choices=TF_MODES,
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
        "tf.max_future_s",
        5.0,
        "An incoming /tf sample stamped more than this many seconds after the node's clock is rejected, "
        "not stored (/diagnostics tf.rejected.<edge>): one far-future sample would hide every newer one.",
        live=True,
        float_range=(0.0, 1e9),
    ),
    ParamSpec(
        "scale.source",
        "none",
        "Metric scale: odometry (odom -> base via TF), depth (depth_image topic), fixed (scale.factor), "
        "none (model units).",
        choices=SCALE_SOURCES,
    ),
    ParamSpec("scale.factor", 1.0, "Metres per model unit with scale.source fixed.", float_range=(1e-6, 1e6)),
    ParamSpec(
        "scale.min_baseline",
        0.1,
        "Metres the camera must move (odometry) between the two keyframes of a scale sample.",
        float_range=(0.0, 100.0),
    ),
    ParamSpec(
        "scale.min_samples",
        10,
        "Samples before the scale counts as converged (map points are held until then).",
        int_range=(1, 1000),
    ),
    ParamSpec("scale.window", 50, "Samples of the robust (median) estimate.", int_range=(1, 10000)),
    ParamSpec(
        "scale.max_change",
        3.0,
        "Once the scale has converged, a sample more than this factor above or below it is rejected and "
        "counted (/diagnostics scale_rejected): one odometry jump cannot rescale the map.",
        float_range=(1.01, 1000.0),
    ),
    ParamSpec("grid.resolution", 0.05, "Cell size of ~/grid in metres.", float_range=(0.005, 10.0)),
    ParamSpec(
        "grid.min_height",
        0.1,
        "Points above this height (m, from the base frame's ground) are obstacles; below: floor (free).",
        float_range=(-10.0, 10.0),
    ),
    ParamSpec(
        "grid.max_height", 1.5, "Points above this height (m) are ignored.", float_range=(-10.0, 100.0)
    ),
    ParamSpec("grid.rate", 0.5, "Rate of ~/grid in Hz (when it changed).", float_range=(0.01, 30.0)),
    ParamSpec(
        "covariance.position_std",
        0.05,
        "Odometry pose standard deviation per axis in metres (the model predicts none).",
        float_range=(1e-6, 1e3),
    ),
    ParamSpec(
        "covariance.orientation_std",
        0.02,
        "Odometry orientation standard deviation per axis in radians.",
        float_range=(1e-6, 10.0),
    ),
    ParamSpec(
        "covariance.unscaled_factor",
        100.0,
        "Variances are multiplied by this while the metric scale has not converged.",
        float_range=(1.0, 1e9),
    ),
    ParamSpec(
        "twist.min_dt",
        0.005,
        "Seconds; frames closer than this (or with a stamp going backwards) give no twist (covariance 1e6).",
        float_range=(0.0, 10.0),
    ),
    ParamSpec(
        "map.voxel_size",
        0.02,
        "Voxel edge of the map in metres (model units with scale.source none).",
        float_range=(1e-4, 100.0),
    ),
    ParamSpec(
        "map.conf_threshold",
        1.5,
        "Keep pixels with depth confidence above this (confidence >= 1).",
        live=True,
        float_range=(0.0, 1e6),
    ),
    ParamSpec(
        "map.max_points",
        500000,
        "Point budget of the map cloud, shared by all cameras (each gets an equal part); memory grows with "
        "the points actually mapped.",
        int_range=(1000, 50_000_000),
    ),
    ParamSpec("map.stride", 2, "Pixel stride when unprojecting a frame.", live=True, int_range=(1, 64)),
    ParamSpec("map_publish_rate", 1.0, "Rate of ~/map_cloud in Hz.", float_range=(0.01, 30.0)),
    ParamSpec(
        "path.max_length",
        1000,
        "Poses kept in ~/path (oldest dropped; ~3-9 ms per 1000 poses to publish, at path.publish_rate).",
        live=True,
        int_range=(1, 100_000),
    ),
    ParamSpec(
        "path.publish_rate",
        2.0,
        "Rate of ~/path in Hz (when a frame was posed since; never on the pose outputs' thread).",
        float_range=(0.01, 100.0),
    ),
    ParamSpec(
        "trajectory.max_poses",
        1_000_000,
        "Poses of the trajectory kept for ~/save_map since the last reset (64 B each: 64 MB at 1,000,000, "
        "~9 h at 30 Hz); beyond it the oldest are dropped and counted (/diagnostics trajectory_dropped).",
        int_range=(1, 50_000_000),
    ),
    ParamSpec("publish.depth", True, "Publish ~/depth (32FC1 at the input resolution).", live=True),
    ParamSpec("publish.frame_cloud", True, "Publish ~/frame_cloud (this frame's points).", live=True),
    ParamSpec(
        "depth.every_n",
        1,
        "Run the depth head (~2.7 ms of a ~31 ms step on an H200) on every n-th streaming frame only, and on "
        "every frame while ~/depth has a subscriber (with publish.depth); frames without it still get "
        "TF, odometry, camera_pose and camera_info, but no ~/depth, ~/frame_cloud or map update. 1: every "
        "frame (docs/performance.md, issue 22).",
        int_range=(1, 1000),
    ),
    ParamSpec(
        "inference.overlap",
        True,
        "One camera: a one-deep pipeline on the inference thread (StreamingSession.push_overlapped): a "
        "frame's host work (pre-processing, decoding, publishing hand-off) runs while the previous frame's "
        "step is on the GPU; when no next frame is waiting the frame in flight is collected at once, so a "
        "camera slower than the model waits one step, not two. CUDA only (on the CPU a step is "
        "synchronous: nothing to overlap). false: one synchronous push per frame.",
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
    ParamSpec(
        "batch.max_wait_ms",
        5.0,
        "Several cameras: once one camera has a frame, wait at most this long for the others' frames before "
        "stepping them together (one batched model step); a slow camera never stalls a fast one by more.",
        float_range=(0.0, 1000.0),
    ),
    ParamSpec(
        "batch.max_batch",
        8,
        "Several cameras: most streaming frames in one batched model step.",
        int_range=(1, 64),
    ),
    ParamSpec(
        "cameras",
        [""],
        "Camera names, e.g. [front, rear]: camera <name> is subscribed on <name>/image (or "
        "<name>/image/compressed) and <name>/camera_info and publishes under ~/<name>/ (docs/node.md, "
        "\"Several cameras\"). [''] (default): one unnamed camera on image and camera_info, outputs "
        "under ~/.",
        startup=True,
    ),
    ParamSpec(
        "loop_closure.enabled",
        True,
        "Loop closure (docs/loop_closure.md): keyframes, place recognition, verification and a Sim(3) pose "
        "graph on a thread of its own; a correction jumps map -> odom (robot modes) or map -> camera.",
    ),
    ParamSpec(
        "loop_closure.keyframe_translation",
        LOOP.keyframe_translation,
        "A new loop keyframe once the camera moved this fraction of the last one's median depth.",
        float_range=(1e-3, 10.0),
    ),
    ParamSpec(
        "loop_closure.keyframe_rotation_deg",
        LOOP.keyframe_rotation_deg,
        "... or turned this many degrees.",
        float_range=(0.1, 180.0),
    ),
    ParamSpec(
        "loop_closure.exclude_recent",
        LOOP.exclude_recent,
        "Newest keyframes left out of the place search (the query's own neighbourhood in time).",
        int_range=(1, 10000),
    ),
    ParamSpec(
        "loop_closure.top_k", LOOP.top_k, "Candidates verified per keyframe (best first).", int_range=(1, 50)
    ),
    ParamSpec(
        "loop_closure.min_similarity",
        LOOP.min_similarity,
        "Cosine floor of a place candidate's descriptor.",
        float_range=(-1.0, 1.0),
    ),
    ParamSpec(
        "loop_closure.max_keyframes",
        LOOP.max_keyframes,
        "Memory budget: past it the oldest loop_closure.merge_size keyframes merge into one submap.",
        int_range=(3, 1000000),
    ),
    ParamSpec(
        "loop_closure.merge_size", LOOP.merge_size, "Keyframes merged into one submap.", int_range=(2, 1000)
    ),
    ParamSpec(
        "loop_closure.max_time_ms",
        LOOP.graph.max_time_ms,
        "Time bound of one pose-graph optimisation (on the closer's thread).",
        float_range=(1.0, 60000.0),
    ),
)
