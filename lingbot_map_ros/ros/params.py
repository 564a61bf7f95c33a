"""The node's ROS parameters: declaration (descriptors with ranges), validation, live vs reload.

Every parameter is listed once in `PARAMETERS` (`param_table.py`; its rows are `ParamSpec`s, `param_spec.py`)
with its default, range or choices, description and whether it applies live; a row of an engine setting is
derived from the owning dataclass field (`engine.settings`), and `owner_values` builds that dataclass's
fields back from the parameters. `NodeParams` (node_params.py) is generated from the table
(`python -m lingbot_map_ros.ros.params --node-params`; a test keeps it equal).
Live parameters change the running node at once (e.g. `kv_cache.sliding_window` resizes the cache window
through `StreamingSession.set_sliding_window`). The others are read at configure time; setting one while the
node is configured is rejected with the reason (it needs a reload: deactivate, cleanup, set, configure). Other
modules import all of it from here, `PARAMETERS` included (the one import path of the parameters).
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from rcl_interfaces.msg import SetParametersResult
from rclpy.node import Node
from rclpy.parameter import Parameter

from ..engine.config import PATCH_SIZE, check_image_width
from ..engine.loop.config import LoopClosureConfig
from ..engine.loop.pose_graph import GraphConfig
from .node_params import NodeParams
from .param_spec import ParamSpec, ParamValue
from .param_table import PARAMETERS
from .streams import frame_id_problem, reserved_frames

#: A camera name: one ROS name token (it becomes a topic namespace, `<name>/image`, and `~/<name>/...`).
CAMERA_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*")
#: Most cameras one node maps (`cameras`): 64 cameras took 2.1 GB at activate (issue 20).
MAX_CAMERAS = 16
#: `session.load_path`: one folder name below `session.dir` (no separator, no `.`/`..`, not hidden).
SESSION_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]{0,254}")

SPECS: dict[str, ParamSpec] = {spec.name: spec for spec in PARAMETERS}


def field_name(param_name: str) -> str:
    """`kv_cache.sliding_window` -> `kv_cache_sliding_window`."""
    return param_name.replace(".", "_")


def _field_type(default: ParamValue) -> str:
    """The `NodeParams` field type of a parameter: its default's type; string arrays are kept as tuples."""
    return "tuple[str, ...]" if isinstance(default, list) else type(default).__name__


def node_params_source() -> str:
    """node_params.py: the typed `NodeParams` dataclass, one field per row of `PARAMETERS`."""
    lines = [
        '"""`NodeParams`: the typed snapshot of every node parameter, one frozen field per row of',
        "`PARAMETERS` (ros/param_table.py), named by `params.field_name` (`kv_cache.sliding_window` ->",
        "`kv_cache_sliding_window`) and typed by the row's default (string arrays as tuples).",
        "",
        "Generated: `python -m lingbot_map_ros.ros.params --node-params > lingbot_map_ros/ros/node_params.py`;",
        'test/ros/test_ros_params_derived.py fails when it drifts from the table. Do not edit by hand."""',
        "",
        "from __future__ import annotations",
        "",
        "from dataclasses import dataclass",
        "",
        "",
        "@dataclass(frozen=True)",
        "class NodeParams:",
        '    """Every node parameter (ros/param_table.py has the defaults, ranges and descriptions)."""',
        "",
    ]
    lines += [f"    {field_name(spec.name)}: {_field_type(spec.default)}" for spec in PARAMETERS]
    return "\n".join(lines) + "\n"


def owner_values(owner: type, value: Callable[[str], object]) -> dict[str, object]:
    """{field: value} of the fields of the dataclass `owner` that parameters set: one per `ParamSpec.of` row
    derived from `owner`, read with `value(parameter name)` and coerced to the row's type."""
    return {
        spec.source.name: _coerce(spec, value(spec.name))
        for spec in PARAMETERS
        if spec.source is not None and spec.source.owner is owner
    }


def param_reader(params: NodeParams) -> Callable[[str], object]:
    """`value(parameter name)` over a `NodeParams` snapshot (for `owner_values`)."""
    return lambda name: getattr(params, field_name(name))


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
    load = values.get("session.load_path", "")
    if isinstance(load, str) and load.strip() and not SESSION_NAME.fullmatch(load.strip()):
        problems.append(
            "session.load_path must be one folder name below session.dir (no '/', no '..'), "
            f"got {load[:80]!r}"
        )
    size = values.get("model.warmup_image_size", "")
    if isinstance(size, str) and size and parse_image_size(size) is None:
        problems.append(f"model.warmup_image_size must be WxH (e.g. 640x480) or empty, got {size!r}")
    width = values.get("model.image_width", PATCH_SIZE)
    try:
        check_image_width(width, "model.image_width")
    except ValueError as exc:
        problems.append(str(exc))
    cameras = tuple(values.get("cameras", ("",)))
    problems += camera_names_problems(cameras)
    if len(cameras) > 1 and values.get("scale.source") == "depth":
        problems.append("scale.source depth takes one depth topic: it needs a single camera (cameras)")
    if len(cameras) > 1 and values.get("camera_frame"):
        problems.append("camera_frame overrides one camera's frame: leave it empty with several cameras")
    frame = values.get("camera_frame")
    if isinstance(frame, str) and frame:
        frames = [str(values.get(name, "")) for name in ("map_frame", "odom_frame", "base_frame")]
        problem = frame_id_problem(frame, reserved_frames(*frames, cameras))
        if problem:
            problems.append(f"camera_frame: {problem}")
    try:
        loop_closure_config(lambda name: values.get(name, SPECS[name].default))
    except ValueError as exc:  # e.g. loop_closure.max_keyframes < loop_closure.exclude_recent + 2
        problems.append(str(exc))
    return problems


def loop_closure_config(value: Callable[[str], object]) -> LoopClosureConfig:
    """The engine's `LoopClosureConfig` from the `loop_closure.*` parameters (`value(name)`; the rest keep
    the engine's defaults). Raises ValueError (the engine's own validation)."""
    base = LoopClosureConfig()
    graph = replace(base.graph, **owner_values(GraphConfig, value))
    return replace(base, graph=graph, **owner_values(LoopClosureConfig, value))


def camera_names_problems(names: tuple[str, ...]) -> list[str]:
    """What is wrong with a `cameras` list (empty when nothing): a non-empty list of unique ROS name tokens
    (letters, digits, '_', starting with a letter), or `['']` alone (the one unnamed camera)."""
    if names == ("",):
        return []
    if not names:
        return ["cameras must name at least one camera (or be [''] for one unnamed camera)"]
    if len(names) > MAX_CAMERAS:
        return [
            f"cameras: {len(names)} named, at most {MAX_CAMERAS} per node (each holds a model stream, a "
            "map and its queues: run another node for more)"
        ]
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
    import sys

    print(node_params_source() if "--node-params" in sys.argv[1:] else params_yaml(), end="")
