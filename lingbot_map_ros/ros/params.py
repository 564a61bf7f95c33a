"""The node's ROS parameters: declaration (descriptors with ranges), validation, live vs reload.

Every parameter is listed once in `PARAMETERS` with its default, range or choices, description and whether it
applies live. Live parameters change the running node at once (e.g. `kv_cache.sliding_window` resizes the
cache window through `StreamingSession.set_sliding_window`). The others are read at configure time; setting
one while the node is configured is rejected with the reason (it needs a reload: deactivate, cleanup,
set, configure).
"""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass, make_dataclass
from pathlib import Path

from rcl_interfaces.msg import FloatingPointRange, IntegerRange, ParameterDescriptor, SetParametersResult
from rclpy.node import Node
from rclpy.parameter import Parameter

from ..cache.backends import BACKENDS
from ..model.config import PATCH_SIZE

ParamValue = bool | int | float | str | list[str]
#: A camera name: one ROS name token (it becomes a topic namespace, `<name>/image`, and `~/<name>/...`).
CAMERA_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*")


@dataclass(frozen=True)
class ParamSpec:
    """One parameter: ROS `name`, `default` (fixes the type), constraints, and whether it applies live."""

    name: str
    default: ParamValue
    description: str
    live: bool = False
    int_range: tuple[int, int] | None = None
    float_range: tuple[float, float] | None = None
    choices: tuple[str, ...] | None = None
    startup: bool = False  # read when the node starts (its topics and services): never changed at run time

    def descriptor(self) -> ParameterDescriptor:
        """The rcl descriptor (ranges are enforced by rclpy itself; choices by `validate`)."""
        text = self.description + (
            " (live)" if self.live else " (read at configure; needs a reload to change)"
        )
        if self.startup:
            text = self.description + " (read at start-up; restart the node to change)"
        if self.choices:
            text += f" One of: {', '.join(self.choices)}."
        desc = ParameterDescriptor(description=text, read_only=False)
        if self.int_range is not None:
            desc.integer_range = [
                IntegerRange(from_value=self.int_range[0], to_value=self.int_range[1], step=1)
            ]
        if self.float_range is not None:
            desc.floating_point_range = [
                FloatingPointRange(from_value=self.float_range[0], to_value=self.float_range[1], step=0.0)
            ]
        return desc

    def validate(self, value: object) -> str | None:
        """Reason the value is invalid, or None when it is acceptable."""
        if isinstance(self.default, list):
            ok = isinstance(value, list | tuple) and all(isinstance(v, str) for v in value)
            return None if ok else f"{self.name} must be a string array, got {type(value).__name__}"
        if type(value) is not type(self.default) and not (
            isinstance(self.default, float) and type(value) is int
        ):
            return f"{self.name} must be a {type(self.default).__name__}, got {type(value).__name__}"
        if self.choices is not None and value not in self.choices:
            return f"{self.name} must be one of {list(self.choices)}, got '{value}'"
        bounds = self.int_range or self.float_range
        if bounds is not None and not bounds[0] <= value <= bounds[1]:
            return f"{self.name} must be in [{bounds[0]}, {bounds[1]}], got {value}"
        return None


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
        64,
        "Non-anchor frames kept in the KV cache.",
        live=True,
        int_range=(1, 1024),
    ),
    ParamSpec(
        "kv_cache.max_window",
        128,
        "Cache pool capacity: upper bound of kv_cache.sliding_window.",
        int_range=(1, 1024),
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
        "auto",
        "The single TF edge published: map_to_odom (odom -> base and base -> camera from TF), map_to_base "
        "(base -> camera from TF), map_to_camera (bare camera), auto (the first whose chain is in TF, chosen "
        "when a stream starts).",
        choices=("auto", "map_to_odom", "map_to_base", "map_to_camera"),
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
        "map -> odom is stamped this many seconds after the image (also when republished).",
        float_range=(0.0, 10.0),
    ),
    ParamSpec(
        "tf.publish_rate", 20.0, "Rate in Hz of republishing the last map -> odom.", float_range=(0.1, 1000.0)
    ),
    ParamSpec(
        "scale.source",
        "none",
        "Metric scale: odometry (odom -> base via TF), depth (depth_image topic), fixed (scale.factor), "
        "none (model units).",
        choices=("none", "fixed", "odometry", "depth"),
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
    ParamSpec("map.max_points", 500000, "Point budget of the map cloud.", int_range=(1000, 50_000_000)),
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
        "queue_size", 2, "Frames waiting for inference; a full queue drops its oldest.", int_range=(1, 100)
    ),
    ParamSpec(
        "output_dir",
        "~/.ros/lingbot_map",
        "Directory of ~/save_map (PLY map + TUM trajectory); must be absolute after expanding '~' "
        "(empty, relative or unexpandable values are rejected).",
        live=True,
    ),
    ParamSpec(
        "session.dir",
        "~/.ros/lingbot_map/sessions",
        "Directory of saved sessions (~/save_session writes below it; session.load_path and "
        "~/load_session read only below it); absolute after expanding '~'.",
        live=True,
    ),
    ParamSpec(
        "session.load_path",
        "",
        "Saved session (a folder name below session.dir) to continue: loaded when the node activates after "
        "configure, and by ~/load_session. Empty: start a new map.",
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
)

SPECS: dict[str, ParamSpec] = {spec.name: spec for spec in PARAMETERS}


def field_name(param_name: str) -> str:
    """`kv_cache.sliding_window` -> `kv_cache_sliding_window`."""
    return param_name.replace(".", "_")


def _field_type(default: ParamValue) -> type:
    """The `NodeParams` field type of a parameter: its default's type; string arrays are kept as tuples."""
    return tuple[str, ...] if isinstance(default, list) else type(default)


#: Typed snapshot of all parameters, derived from `PARAMETERS` (the one list of them): one frozen dataclass
#: field per parameter, named by `field_name` (`kv_cache.sliding_window` -> `kv_cache_sliding_window`) and
#: typed by its default (string arrays as tuples).
NodeParams = make_dataclass(
    "NodeParams",
    [(field_name(spec.name), _field_type(spec.default)) for spec in PARAMETERS],
    frozen=True,
    namespace={"__module__": __name__},
)


def declare_parameters(node: Node) -> None:
    """Declare every parameter of `PARAMETERS` on `node` with its descriptor."""
    for spec in PARAMETERS:
        node.declare_parameter(spec.name, spec.default, spec.descriptor())


def read_parameters(node: Node) -> NodeParams:
    """Read and validate all parameters.

    Raises:
        ValueError: naming every invalid parameter (e.g. a bad `-p` on the command line).
    """
    values = {spec.name: node.get_parameter(spec.name).value for spec in PARAMETERS}
    problems = [reason for name, value in values.items() if (reason := SPECS[name].validate(value))]
    problems += cross_check(values)
    if problems:
        raise ValueError("invalid parameters: " + "; ".join(problems))
    return NodeParams(**{field_name(name): _coerce(SPECS[name], value) for name, value in values.items()})


def cross_check(values: dict[str, object]) -> list[str]:
    """Every violated constraint between parameters (`values` holds at least the two window parameters)."""
    problems = []
    window, max_window = values["kv_cache.sliding_window"], values["kv_cache.max_window"]
    if window > max_window:
        problems.append(f"kv_cache.sliding_window ({window}) must be <= kv_cache.max_window ({max_window})")
    low, high = values.get("grid.min_height", 0.0), values.get("grid.max_height", 1.0)
    if isinstance(low, float | int) and isinstance(high, float | int) and not high > low:
        problems.append(f"grid.max_height ({high}) must be > grid.min_height ({low})")
    if values.get("scale.window", 50) < values.get("scale.min_samples", 1):
        problems.append("scale.window must be >= scale.min_samples")
    for name in ("output_dir", "session.dir"):
        text = values.get(name)
        if isinstance(text, str):
            try:
                resolve_directory(text, name)
            except ValueError as exc:
                problems.append(str(exc))
    size = values.get("model.warmup_image_size", "")
    if isinstance(size, str) and size and parse_image_size(size) is None:
        problems.append(f"model.warmup_image_size must be WxH (e.g. 640x480) or empty, got {size!r}")
    width = values.get("model.image_width", PATCH_SIZE)
    if isinstance(width, int) and width % PATCH_SIZE:
        problems.append(f"model.image_width must be a multiple of {PATCH_SIZE} (patch size), got {width}")
    cameras = tuple(values.get("cameras", ("",)))
    problems += camera_names_problems(cameras)
    if len(cameras) > 1 and values.get("scale.source") == "depth":
        problems.append("scale.source depth takes one depth topic: it needs a single camera (cameras)")
    if len(cameras) > 1 and values.get("camera_frame"):
        problems.append("camera_frame overrides one camera's frame: leave it empty with several cameras")
    return problems


def camera_names_problems(names: tuple[str, ...]) -> list[str]:
    """What is wrong with a `cameras` list (empty when nothing): a non-empty list of unique ROS name tokens
    (letters, digits, '_', starting with a letter), or `['']` alone (the one unnamed camera)."""
    if names == ("",):
        return []
    if not names:
        return ["cameras must name at least one camera (or be [''] for one unnamed camera)"]
    problems = [
        f"cameras: '{name}' is not a ROS name token (a letter, then letters, digits or '_')"
        for name in names
        if not CAMERA_NAME.fullmatch(name)
    ]
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        problems.append(f"cameras: {repeated} named more than once")
    return problems


def resolve_directory(text: str, name: str = "output_dir") -> Path:
    """The directory parameter `name` (`output_dir`, `session.dir`) as an absolute path ('~' expanded).

    Raises:
        ValueError: empty, not expandable (no home directory, unknown user) or relative after expansion
            (files would land in the process's working directory).
    """
    if not text.strip():
        raise ValueError(f"{name} is empty: expected an absolute directory (or one starting with '~')")
    try:
        path = Path(text).expanduser()
    except (RuntimeError, KeyError, OSError) as exc:  # Path.expanduser: "Could not determine home directory."
        raise ValueError(f"{name} '{text}' cannot be expanded: {exc}") from exc
    if not path.is_absolute():
        raise ValueError(
            f"{name} '{text}' is relative: expected an absolute directory (or one starting with '~')"
        )
    return path


def parse_image_size(text: str) -> tuple[int, int] | None:
    """`"640x480"` -> (H, W) = (480, 640); None when `text` is not `WxH` with both in [1, 8192]."""
    width, sep, height = text.strip().lower().partition("x")
    if not sep or not width.isdigit() or not height.isdigit():
        return None
    w, h = int(width), int(height)
    return (h, w) if 1 <= w <= 8192 and 1 <= h <= 8192 else None


def check_update(params: list[Parameter], current: NodeParams, configured: bool) -> SetParametersResult:
    """Accept or reject a parameter update with the reason (the node's on-set-parameters callback).

    Reload-only parameters are accepted while the node is unconfigured (configure reads them) and rejected
    once it is configured, unless set to their current value (so `ros2 param load` of a full `ros2 param dump`
    succeeds). Live parameters are validated against the current values of the others.
    """
    values = {spec.name: getattr(current, field_name(spec.name)) for spec in PARAMETERS}
    for param in params:
        spec = SPECS.get(param.name)
        if spec is None:
            continue  # e.g. use_sim_time, handled by rclpy
        reason = spec.validate(param.value)
        unchanged = reason is None and _coerce(spec, param.value) == _coerce(spec, values[param.name])
        if reason is None and spec.startup and not unchanged:
            reason = f"{param.name} is read when the node starts (its topics and services): restart it"
        if reason is None and configured and not spec.live and not unchanged:
            reason = (
                f"{param.name} needs a reload (the model or the pipeline is built from it): "
                "deactivate, cleanup, set it, then configure and activate again"
            )
        if reason is not None:
            return SetParametersResult(successful=False, reason=reason)
        values[param.name] = _coerce(spec, param.value)
    problems = cross_check(values)
    if problems:
        return SetParametersResult(successful=False, reason="; ".join(problems))
    return SetParametersResult(successful=True, reason="")


def apply_update(current: NodeParams, params: list[Parameter]) -> NodeParams:
    """The snapshot with accepted `params` applied."""
    changes = {field_name(p.name): _coerce(SPECS[p.name], p.value) for p in params if p.name in SPECS}
    return NodeParams(**{**current.__dict__, **changes})


def _coerce(spec: ParamSpec, value: object) -> ParamValue | tuple[str, ...]:
    if isinstance(spec.default, list):
        return tuple(value)
    return float(value) if isinstance(spec.default, float) else value


def params_yaml() -> str:
    """config/lingbot_map.yaml: every parameter with its default and a comment (range, choices, live/reload).

    Regenerate with `python -m lingbot_map_ros.ros.params > config/lingbot_map.yaml`; a test keeps them equal.
    """
    lines = [
        "# Parameters of the lingbot_map node (lingbot_map_ros): every parameter with its default.",
        "# [live]: applies at once (ros2 param set). [reload]: read at configure; while the node is",
        "# configured a change is rejected with the reason (deactivate, cleanup, set, configure, activate).",
        "# Generated by `python -m lingbot_map_ros.ros.params`; the table with ranges is in docs/node.md.",
        "/**:",
        "  ros__parameters:",
    ]
    group = None
    for spec in PARAMETERS:
        head, _, leaf = spec.name.rpartition(".")
        if head and head != group:
            lines.append(f"    {head}:")
        group = head or None
        indent = "      " if head else "    "
        lines += [f"{indent}# {line}" for line in textwrap.wrap(_comment(spec), 104 - len(indent))]
        lines.append(f"{indent}{leaf}: {_yaml_value(spec.default)}")
    return "\n".join(lines) + "\n"


def _comment(spec: ParamSpec) -> str:
    text = spec.description
    if spec.choices:
        text += f" One of: {', '.join(spec.choices)}."
    bounds = spec.int_range or spec.float_range
    if bounds:
        text += f" Range [{bounds[0]}, {bounds[1]}]."
    return text + (" [live]" if spec.live else " [reload]")


def _yaml_value(value: ParamValue) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "[" + ", ".join(f'"{v}"' for v in value) + "]"
    return f'"{value}"' if isinstance(value, str) else repr(value)


if __name__ == "__main__":
    print(params_yaml(), end="")
