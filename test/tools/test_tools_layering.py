"""The layering rule of docs/architecture.md, checked on the source: `lingbot_map_ros/ros/` is the only
package that imports rclpy (or a ROS message / service package, tf2_ros, cv_bridge), at module level or
inside a function; `ros` never imports `tools`; `cache`, `model`, `engine` import neither
`ros` nor `tools` (and only upwards: cache <- model <- engine); `ros` reaches model/ and cache/ only through
engine/ (engine/config.py, engine/builder.py re-export what it needs)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "lingbot_map_ros"
ROS_ONLY_ROOTS = ("rclpy", "tf2_ros", "cv_bridge", "rosidl_runtime_py")
ROS_ONLY_SUFFIXES = ("_msgs", "_srvs", "_interfaces")
OUTSIDE_ROS = ("cache", "model", "engine", "tools")
FORBIDDEN_LAYERS = {
    "ros": ("tools", "model", "cache"),
    "cache": ("model", "engine", "ros", "tools"),
    "model": ("engine", "ros", "tools"),
    "engine": ("ros", "tools"),
}


def imported_modules(path: Path, package_root: Path = PACKAGE) -> list[tuple[int, str]]:
    """(line, absolute module name) of every import statement in `path`, at any nesting depth; relative
    imports resolved against the file's package; `from a import b` gives both `a` and `a.b` (b may be a
    submodule)."""
    package = list(path.relative_to(package_root.parent).with_suffix("").parts[:-1])
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join(base + ([node.module] if node.module else []))
            found.append((node.lineno, module))
            found += [(node.lineno, f"{module}.{alias.name}") for alias in node.names]
    return found


def is_ros_only(module: str) -> bool:
    """rclpy and the packages that need it (message/service packages, tf2_ros, cv_bridge)."""
    root = module.split(".")[0]
    return root in ROS_ONLY_ROOTS or root.endswith(ROS_ONLY_SUFFIXES)


def test_the_checker_sees_lazy_imports(tmp_path: Path) -> None:
    source = tmp_path / "lingbot_map_ros" / "engine" / "lazy.py"
    source.parent.mkdir(parents=True)
    source.write_text(
        "import os\nfrom lingbot_map_ros import tools\nfrom ..ros import node\n\ndef f():\n"
        "    from rclpy.node import Node\n    import std_srvs.srv\n"
    )
    modules = imported_modules(source, tmp_path / "lingbot_map_ros")
    assert [m for _, m in modules if is_ros_only(m)] == ["rclpy.node", "rclpy.node.Node", "std_srvs.srv"]
    assert (2, "lingbot_map_ros.tools") in modules and (3, "lingbot_map_ros.ros.node") in modules
    assert not is_ros_only("os") and not is_ros_only("rosbags.rosbag2")


@pytest.mark.parametrize("layer", OUTSIDE_ROS)
def test_only_ros_imports_rclpy(layer: str) -> None:
    files = sorted((PACKAGE / layer).rglob("*.py"))
    assert files, f"no sources under {PACKAGE / layer}"
    offenders = [
        f"{path.relative_to(PACKAGE)}:{line} imports {module}"
        for path in files
        for line, module in imported_modules(path)
        if is_ros_only(module)
    ]
    where = "rclpy / ROS packages may only be imported under lingbot_map_ros/ros/"
    assert not offenders, where + ":\n" + "\n".join(offenders)


@pytest.mark.parametrize("layer", sorted(FORBIDDEN_LAYERS))
def test_dependencies_point_one_way(layer: str) -> None:
    forbidden = tuple(f"lingbot_map_ros.{name}" for name in FORBIDDEN_LAYERS[layer])
    offenders = [
        f"{path.relative_to(PACKAGE)}:{line} imports {module}"
        for path in sorted((PACKAGE / layer).rglob("*.py"))
        for line, module in imported_modules(path)
        if module in forbidden or module.startswith(tuple(f"{f}." for f in forbidden))
    ]
    assert not offenders, f"{layer} must not import {forbidden}:\n" + "\n".join(offenders)


def test_the_node_imports_no_dds_tool_helper() -> None:
    """ros/dds_tools/ serves the CLI tools (replay, record, demo); the node's modules import none of it."""
    tool_side = "lingbot_map_ros.ros.dds_tools"
    assert (PACKAGE / "ros" / "dds_tools" / "client.py").is_file()
    offenders = [
        f"{path.relative_to(PACKAGE)}:{line} imports {module}"
        for path in sorted((PACKAGE / "ros").rglob("*.py"))
        if "dds_tools" not in path.parts
        for line, module in imported_modules(path)
        if module == tool_side or module.startswith(tool_side + ".")
    ]
    assert not offenders, "the node imports the tools' DDS helpers:\n" + "\n".join(offenders)


def test_run_imports_no_ros_message_package() -> None:
    """`lingbot-map-ros run` needs no DDS: importing it loads neither rclpy nor a message package nor ros/."""
    import subprocess
    import sys

    code = (
        "import sys, lingbot_map_ros.tools.run.bag; "
        "print('\\n'.join(m for m in sys.modules if m.startswith(('rclpy', 'lingbot_map_ros.ros')) "
        "or m.split('.')[0].endswith(('_msgs', '_srvs', '_interfaces'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "", f"run imports ROS modules:\n{out}"


def test_results_path_reads_one_way() -> None:
    """ros/ converts and publishes what engine/mapping/mapper.py computes: no decoding, unprojection or frame
    rotation
    in ros/, one rotation/quaternion implementation (engine/geometry.py)."""
    for path in sorted((PACKAGE / "ros").rglob("*.py")):
        modules = {m for _, m in imported_modules(path)}
        assert "lingbot_map_ros.engine.stream.decode" not in modules, path
        text = path.read_text()
        assert "result.points(" not in text and "world_to_map" not in text and "OPTICAL_TO" not in text, path
    definitions = [
        f"{path.relative_to(PACKAGE)}: {node.name}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.FunctionDef) and "quat" in node.name.lower()
    ]
    assert all(d.startswith("engine/geometry.py") for d in definitions), definitions


# ------------------------------------------------------------------------------------ one builder, no private
BENCHMARKS = PACKAGE.parent / "benchmarks"
#: Calls that make a runnable model or a session, and where they may stand: the builder and the model layer.
CONSTRUCTORS = {"StreamingSession", "LingBotMap", "build_model"}
#: (engine/stream/multi_stream.py: a multi-camera session makes its cameras' sessions over its one model and
#: pool.)
BUILDER_HOMES = {
    "engine/builder.py",
    "engine/stream/multi_stream.py",
    "model/checkpoint.py",
    "model/lingbot_map.py",
}
#: Model-level tools that step a bare model (no session): the numerical parity run on a reference state dict.
MODEL_LEVEL_TOOLS = {"tools/parity.py"}


def _calls(path: Path) -> list[tuple[int, str]]:
    """(line, name) of every call of a plain name or an attribute (`f(...)`, `m.f(...)`) in `path`."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Name | ast.Attribute):
                found.append((node.lineno, func.id if isinstance(func, ast.Name) else func.attr))
    return found


def _label(path: Path) -> str:
    return str(path.relative_to(PACKAGE)) if path.is_relative_to(PACKAGE) else f"benchmarks/{path.name}"


def test_one_builder_call_site_per_tool_and_no_other_constructor() -> None:
    """Model + session are made by `engine.builder.build_engine` only, called once per tool module."""
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")) + sorted(BENCHMARKS.glob("*.py")):
        label = _label(path)
        calls = _calls(path)
        builds = [line for line, name in calls if name == "build_engine"]
        if len(builds) > 1:
            offenders.append(f"{label}: build_engine called at lines {builds} (one call site per tool)")
        if label in BUILDER_HOMES or label in MODEL_LEVEL_TOOLS:
            continue
        offenders += [
            f"{label}:{line} calls {name}(...) (use engine.builder.build_engine)"
            for line, name in calls
            if name in CONSTRUCTORS
        ]
    assert not offenders, "\n".join(offenders)


def test_the_builder_rule_sees_a_second_call_and_a_direct_session(tmp_path: Path) -> None:
    source = tmp_path / "tool.py"
    source.write_text("a = build_engine(s)\nb = engine.build_engine(t)\nc = session.StreamingSession(m)\n")
    assert [c for c in _calls(source) if c[1] in {"build_engine", *CONSTRUCTORS}] == [
        (1, "build_engine"),
        (2, "build_engine"),
        (3, "StreamingSession"),
    ]


def _private_uses(path: Path) -> list[str]:
    """`obj._name` on anything but `self`/`cls` (and torch's own ops), and `from m import _name`."""
    uses = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
            root = node.value
            while isinstance(root, ast.Attribute):
                root = root.value
            if not (isinstance(root, ast.Name) and root.id in ("self", "cls", "torch")):
                uses.append(f"{path.name}:{node.lineno} .{node.attr}")
        elif isinstance(node, ast.ImportFrom):
            uses += [
                f"{path.name}:{node.lineno} imports {a.name}"
                for a in node.names
                if a.name.startswith("_") and not a.name.startswith("__")
            ]
    return uses


def test_no_benchmark_touches_a_private_member() -> None:
    """Benchmarks measure through public seams (`StreamState.stage_hook`, `MappingOutputs.map.recent_ms`)."""
    files = sorted(BENCHMARKS.glob("*.py"))
    assert files, f"no benchmarks under {BENCHMARKS}"
    offenders = [use for path in files for use in _private_uses(path)]
    assert not offenders, "benchmarks read private members:\n" + "\n".join(offenders)


def test_the_private_member_rule_sees_reads_writes_and_imports(tmp_path: Path) -> None:
    source = tmp_path / "bench.py"
    source.write_text(
        "from m import _hidden\nx = outputs._path\nstate.kv_cache._pool = 1\nself._ok = 2\n"
        "torch.ops.aten._sdpa(q)\ny = obj.__dict__\n"
    )
    assert _private_uses(source) == ["bench.py:1 imports _hidden", "bench.py:2 ._path", "bench.py:3 ._pool"]


# ------------------------------------------------------------------------------------ one correction rule
#: A camera's engine objects: made by `engine.camera_state` (`CameraState`, `loop_closer`) only.
CAMERA_ENGINE = {
    "CameraTracker",
    "MapSide",
    "LoopCloser",
    "LoopClosureWorker",
    "ModelDescriptor",
    "PairVerifier",
}
#: Sim(3) arithmetic of loop closure: engine/ only (the correction rule is engine/correction.py).
SIM3_ARITHMETIC = {
    "lingbot_map_ros.engine.loop.similarity.compose",
    "lingbot_map_ros.engine.loop.similarity.inverse",
    "lingbot_map_ros.engine.loop.similarity.between",
    "lingbot_map_ros.engine.correction.Corrections",
    "lingbot_map_ros.engine.correction.plan_correction",
}


@pytest.mark.parametrize("layer", ["ros", "tools"])
def test_one_correction_rule_and_one_camera_engine(layer: str) -> None:
    """ros/ and tools/ make no camera engine object of their own (they ask `engine.camera_state`) and do no
    loop-closure Sim(3) arithmetic (`CameraState.apply_correction` is the one rule); ros/ has no Sim(3) at
    all."""
    offenders = []
    for path in sorted((PACKAGE / layer).rglob("*.py")):
        label = _label(path)
        modules = {m for _, m in imported_modules(path)}
        offenders += [f"{label} imports {m}" for m in sorted(modules & SIM3_ARITHMETIC)]
        if layer == "ros":
            offenders += [f"{label} imports {m}" for m in sorted(modules) if m.endswith(".Sim3")]
        offenders += [
            f"{label}:{line} makes a {name} (use engine.camera_state)"
            for line, name in _calls(path)
            if name in CAMERA_ENGINE
        ]
    assert not offenders, "\n".join(offenders)
