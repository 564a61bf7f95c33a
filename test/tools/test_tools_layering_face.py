"""The engine's face (issue 28, docs/architecture.md "The engine's face"): ros/ reaches engine/ only through
engine/face.py, tools/ only through engine/face.py and engine/offline.py, at module level, inside a function
or under `if TYPE_CHECKING:`; every name a face exports has a user there; tools/ reaches model/ (below the
engine) only in its model-level tools. So ros/ constructs no engine object other than through the face."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "lingbot_map_ros"
FACE = "lingbot_map_ros.engine.face"
OFFLINE = "lingbot_map_ros.engine.offline"
FACES = {"ros": (FACE,), "tools": (FACE, OFFLINE)}
#: tools that work on the model itself, below the engine: checkpoint conversion, the numerical parity run and
#: the oracles that stand in for the model's step output (`StepOutput`).
MODEL_LEVEL_TOOLS = {"convert.py", "parity.py", "loop_oracle.py", "reloc_oracle.py"}


def from_imports(path: Path, package_root: Path = PACKAGE) -> list[tuple[int, str, list[str]]]:
    """(line, absolute module, imported names) of every import statement in `path`, at any depth (functions,
    `if TYPE_CHECKING:`); `import a.b` gives (line, "a.b", [])."""
    package = list(path.relative_to(package_root.parent).with_suffix("").parts[:-1])
    found: list[tuple[int, str, list[str]]] = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name, []) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join(base + ([node.module] if node.module else []))
            found.append((node.lineno, module, [alias.name for alias in node.names]))
    return found


def face_violations(path: Path, faces: tuple[str, ...], package_root: Path = PACKAGE) -> list[str]:
    """Imports of engine/ in `path` that are not `from <a face> import ...` (`from ..engine import x`
    counts as engine/__init__, not as a face)."""
    label = path.relative_to(package_root)
    return [
        f"{label}:{line} imports {module}" + (f" ({', '.join(names)})" if names else "")
        for line, module, names in from_imports(path, package_root)
        if (module == "lingbot_map_ros.engine" or module.startswith("lingbot_map_ros.engine."))
        and module not in faces
    ]


def exported(module: str) -> list[str]:
    """The `__all__` of a face, read from its source."""
    path = PACKAGE.parent / (module.replace(".", "/") + ".py")
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "__all__" for t in node.targets):
            return [ast.literal_eval(element) for element in node.value.elts]
    raise AssertionError(f"{path} has no __all__")


@pytest.mark.parametrize("layer", sorted(FACES))
def test_ros_and_tools_reach_the_engine_through_its_face(layer: str) -> None:
    files = sorted((PACKAGE / layer).rglob("*.py"))
    assert len(files) > 20, f"no sources under {PACKAGE / layer}"
    offenders = [v for path in files for v in face_violations(path, FACES[layer])]
    where = f"{layer}/ may import engine/ only through {' or '.join(FACES[layer])}"
    assert not offenders, where + ":\n" + "\n".join(offenders)


def test_the_face_rule_sees_module_deferred_and_type_checking_imports(tmp_path: Path) -> None:
    root = tmp_path / "lingbot_map_ros"
    source = root / "ros" / "outputs" / "bad.py"
    source.parent.mkdir(parents=True)
    source.write_text(
        "from typing import TYPE_CHECKING\nfrom ...engine.face import CameraState\n"
        "from ...engine.camera_state import loop_closer\nfrom ...engine import persistence\n"
        "import lingbot_map_ros.engine.tracker\n"
        "if TYPE_CHECKING:\n    from ...engine.loop import LoopCloser\n"
        "def f():\n    from lingbot_map_ros.engine.offline import Sim3\n"
    )
    assert face_violations(source, FACES["ros"], root) == [
        "ros/outputs/bad.py:3 imports lingbot_map_ros.engine.camera_state (loop_closer)",
        "ros/outputs/bad.py:4 imports lingbot_map_ros.engine (persistence)",
        "ros/outputs/bad.py:5 imports lingbot_map_ros.engine.tracker",
        "ros/outputs/bad.py:7 imports lingbot_map_ros.engine.loop (LoopCloser)",
        "ros/outputs/bad.py:9 imports lingbot_map_ros.engine.offline (Sim3)",
    ]
    assert face_violations(source, FACES["tools"], root)[-1].startswith("ros/outputs/bad.py:7")


def test_every_face_name_has_a_user_and_one_face() -> None:
    """A name no ros/ or tools/ module imports leaves the face; offline.py's names are tools/ only and no
    name is exported twice."""
    used: dict[str, set[str]] = {FACE: set(), OFFLINE: set()}
    for layer in FACES:
        for path in (PACKAGE / layer).rglob("*.py"):
            for _, module, names in from_imports(path):
                if module in used:
                    used[module] |= set(names)
    face, offline = exported(FACE), exported(OFFLINE)
    assert len(face) == len(set(face)) and not set(face) & set(offline), (face, offline)
    assert sorted(set(face) - used[FACE]) == [], "engine/face.py exports names nobody uses"
    assert sorted(set(offline) - used[OFFLINE]) == [], "engine/offline.py exports names nobody uses"


def test_tools_reach_the_model_only_in_model_level_tools() -> None:
    offenders = [
        f"tools/{path.name}:{line} imports {module}"
        for path in sorted((PACKAGE / "tools").rglob("*.py"))
        if path.name not in MODEL_LEVEL_TOOLS
        for line, module, _ in from_imports(path)
        if module.startswith(("lingbot_map_ros.model", "lingbot_map_ros.cache"))
    ]
    assert not offenders, "tools/ reaches model/ or cache/ past the engine's face:\n" + "\n".join(offenders)
