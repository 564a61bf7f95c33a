"""`rosdep install --from-paths src` works on Humble, Jazzy and Kilted: every dependency key of package.xml
is a rosdep key there (a released ROS package, or a rule of rosdep's base / python / ruby YAML with an Ubuntu
rule for the distro's Ubuntu release). The key lists are vendored from ros/rosdistro in
test/data/rosdep_keys_<distro>.txt (scripts/rosdep_keys.py regenerates them; their header names the commit).

Issue 19: `rclpy_lifecycle` and `ament_python` are no rosdep keys and stopped `rosdep install` with "Cannot
locate rosdep definition".
"""

from __future__ import annotations

import importlib.util
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "test" / "data"
DISTROS = ("humble", "jazzy", "kilted")
#: The dependency tags of package format 3 that rosdep resolves.
DEPEND_TAGS = (
    "depend",
    "build_depend",
    "build_export_depend",
    "buildtool_depend",
    "buildtool_export_depend",
    "exec_depend",
    "test_depend",
    "doc_depend",
)


def package_keys(path: Path = REPO / "package.xml") -> list[str]:
    """The dependency keys of a package.xml, in file order."""
    root = ET.parse(path).getroot()
    return [element.text.strip() for tag in DEPEND_TAGS for element in root.findall(tag)]


def distro_keys(distro: str) -> set[str]:
    """The vendored key list of `distro` (header lines start with '#')."""
    lines = (DATA / f"rosdep_keys_{distro}.txt").read_text().splitlines()
    assert lines[0].startswith("# rosdep keys of ROS 2") and "commit" in lines[0], lines[0]
    return {line for line in lines if line and not line.startswith("#")}


@pytest.mark.parametrize("distro", DISTROS)
def test_every_package_xml_key_resolves(distro: str) -> None:
    keys = distro_keys(distro)
    assert len(keys) > 3000  # the whole database, not a hand-picked subset
    missing = [key for key in package_keys() if key not in keys]
    assert not missing, f"not rosdep keys with an Ubuntu rule in {distro}: {missing}"


def test_the_check_catches_what_broke_rosdep_install(tmp_path: Path) -> None:
    """The keys of the package.xml before issue 19 fail the check; what replaced them passes."""
    broken = tmp_path / "package.xml"
    broken.write_text(
        '<package format="3"><name>x</name><buildtool_depend>ament_python</buildtool_depend>'
        "<exec_depend>rclpy</exec_depend><exec_depend>rclpy_lifecycle</exec_depend>"
        "<exec_depend>python3-numpy</exec_depend></package>"
    )
    for distro in DISTROS:
        keys = distro_keys(distro)
        assert [k for k in package_keys(broken) if k not in keys] == ["ament_python", "rclpy_lifecycle"]
        assert {"rclpy", "lifecycle_msgs", "python3-numpy", "python3-opencv", "python3-torch"} <= keys


def test_the_key_lists_come_from_the_generator() -> None:
    """The generator's rules on a tiny rosdistro-like input: released packages only; a YAML key counts only
    with an Ubuntu rule for the release (a null entry or another OS's rule does not)."""
    spec = importlib.util.spec_from_file_location("rosdep_keys", REPO / "scripts" / "rosdep_keys.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    distribution = {
        "repositories": {
            "geometry2": {"release": {"version": "1.0.0-1", "packages": ["tf2", "tf2_ros"]}},
            "rclpy": {"release": {"version": "2.0.0-1"}},
            "unreleased": {"release": {"packages": ["ghost"]}},
            "source_only": {"source": {"url": "x"}},
        }
    }
    assert module.released_packages(distribution) == {"tf2", "tf2_ros", "rclpy"}
    assert module.has_ubuntu_rule({"ubuntu": ["python3-numpy"]}, "noble")
    assert module.has_ubuntu_rule({"ubuntu": {"*": ["python3-torch"]}}, "jammy")
    assert module.has_ubuntu_rule({"ubuntu": {"pip": {"packages": ["rosbags"]}}}, "noble")
    assert not module.has_ubuntu_rule({"ubuntu": {"jammy": ["x"], "noble": None}}, "noble")
    assert not module.has_ubuntu_rule({"ubuntu": {"focal": ["x"]}}, "noble")
    assert not module.has_ubuntu_rule({"fedora": ["x"], "debian": ["x"]}, "noble")
