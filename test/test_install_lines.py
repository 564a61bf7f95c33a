"""Every Python module the package imports is installed by the ROS install path (issue 29): a rosdep key in
package.xml or a name on the `pip install` lines of README.md and docs/robot.md.

The third-party top-level imports of lingbot_map_ros/ and launch/ (ast, any depth: lazy imports count) are
mapped to where they come from (`SOURCES`); a module missing from the map, a rosdep key missing from
package.xml or a pip name missing from an install line fails. Issue 29: gtsam and evo were in neither, so a
ROS user's `ros2 launch` exited 1 with `No module named 'gtsam'`.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

from test_package_rosdep_keys import package_keys

REPO = Path(__file__).resolve().parents[1]
INSTALL_DOCS = (REPO / "README.md", REPO / "docs" / "robot.md")
#: import name -> ("rosdep", key in package.xml) or ("pip", name on the install lines).
SOURCES: dict[str, tuple[str, str]] = {
    **{
        name: ("rosdep", name)
        for name in (
            "rclpy",
            "rcl_interfaces",
            "builtin_interfaces",
            "std_msgs",
            "std_srvs",
            "sensor_msgs",
            "geometry_msgs",
            "nav_msgs",
            "tf2_ros",
            "tf2_msgs",
            "cv_bridge",
            "diagnostic_msgs",
            "lifecycle_msgs",
            "visualization_msgs",
            "launch",
            "launch_ros",
            "ament_index_python",
        )
    },
    "numpy": ("rosdep", "python3-numpy"),
    "cv2": ("rosdep", "python3-opencv"),
    "yaml": ("rosdep", "python3-yaml"),
    "PIL": ("rosdep", "python3-pil"),
    "tqdm": ("rosdep", "python3-tqdm"),
    "matplotlib": ("rosdep", "python3-matplotlib"),
    "scipy": ("rosdep", "python3-scipy"),
    "torch": ("pip", "torch"),
    "safetensors": ("pip", "safetensors"),
    "rosbags": ("pip", "rosbags"),
    "gtsam": ("pip", "gtsam"),
    "evo": ("pip", "evo"),
    "flashinfer": ("pip", "flashinfer-python"),
    "ray": ("pip", "ray"),
}


def third_party_imports(*roots: Path) -> dict[str, str]:
    """Top-level module -> one file importing it (relative to its root), over every .py under `roots` (stdlib
    and the package itself excluded; relative imports skipped)."""
    found: dict[str, str] = {}
    for root in roots:
        for path in sorted(root.rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                else:
                    continue
                for name in names:
                    top = name.split(".")[0]
                    if (
                        top not in sys.stdlib_module_names
                        and top != "lingbot_map_ros"
                        and top != "__future__"
                    ):
                        found.setdefault(top, str(path.relative_to(root)))
    return found


def pip_names(markdown: str) -> set[str]:
    """The distribution names on the `pip install ...` lines of a markdown text (versions, extras, quotes and
    comments stripped)."""
    names: set[str] = set()
    for line in markdown.splitlines():
        if not line.startswith("pip install "):
            continue
        for word in line.split("#", 1)[0].split()[2:]:
            names.add(re.split(r"[\[<>=!~;]", word.strip("\"'"), maxsplit=1)[0].lower())
    return names


def test_every_imported_module_has_an_install_source() -> None:
    imports = third_party_imports(REPO / "lingbot_map_ros", REPO / "launch")
    assert {"rclpy", "numpy", "torch", "gtsam"} <= set(imports)  # the scan sees lazy imports too
    unmapped = {module: path for module, path in imports.items() if module not in SOURCES}
    assert not unmapped, f"imported but not in SOURCES (add it, with its rosdep key or pip name): {unmapped}"
    keys = set(package_keys())
    missing_keys = sorted(
        key for module, (kind, key) in SOURCES.items() if kind == "rosdep" and key not in keys
    )
    assert not missing_keys, f"rosdep keys missing from package.xml: {missing_keys}"
    for doc in INSTALL_DOCS:
        listed = pip_names(doc.read_text())
        missing = sorted(name for kind, name in SOURCES.values() if kind == "pip" and name not in listed)
        assert not missing, f"pip names missing from the install lines of {doc.relative_to(REPO)}: {missing}"


def test_the_check_sees_what_issue_29_missed(tmp_path: Path) -> None:
    """A lazy import of a module in no install line is found; the pip parser drops versions and comments."""
    (tmp_path / "mod.py").write_text("def f():\n    import gtsam\n    from evo.core import metrics\n")
    assert set(third_party_imports(tmp_path)) == {"gtsam", "evo"}
    text = 'pip install torch "ray>=2.60" gtsam==4.3.0  # evo is not here\n  pip install indented\n'
    assert pip_names(text) == {"torch", "ray", "gtsam"}
