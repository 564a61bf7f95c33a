"""Build the tf2_msgs interface package (TFMessage only) into a venv prefix.

Used by scripts/setup_env.sh when ``import tf2_msgs`` fails, i.e. on machines without a ROS install.
The generated type is wire-compatible with the real tf2_msgs/msg/TFMessage (same RIHS01 type hash).

usage: python scripts/build_tf2_msgs.py VENV
"""

from __future__ import annotations

import glob
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

PACKAGE_XML = """<?xml version="1.0"?>
<package format="3">
  <name>tf2_msgs</name>
  <version>0.0.0</version>
  <description>TFMessage only, built by lingbot_map_ros for machines without ROS.</description>
  <maintainer email="none@example.com">lingbot_map_ros</maintainer>
  <license>BSD</license>
  <buildtool_depend>ament_cmake</buildtool_depend>
  <buildtool_depend>rosidl_default_generators</buildtool_depend>
  <depend>geometry_msgs</depend>
  <exec_depend>rosidl_default_runtime</exec_depend>
  <member_of_group>rosidl_interface_packages</member_of_group>
  <export><build_type>ament_cmake</build_type></export>
</package>
"""

CMAKELISTS = """cmake_minimum_required(VERSION 3.8)
project(tf2_msgs)
find_package(ament_cmake REQUIRED)
find_package(rosidl_default_generators REQUIRED)
find_package(geometry_msgs REQUIRED)
rosidl_generate_interfaces(${PROJECT_NAME} "msg/TFMessage.msg" DEPENDENCIES geometry_msgs)
ament_package()
"""

TFMESSAGE = "geometry_msgs/TransformStamped[] transforms\n"


def _fix_wheel_cmake_paths(venv: Path) -> None:
    """The ROS wheels hard-code their build machine's Python and numpy include dirs; point them here."""
    import numpy

    py_inc = sysconfig.get_paths()["include"]
    np_inc = numpy.get_include()
    for path in glob.glob(str(venv / "share" / "**" / "*.cmake"), recursive=True):
        text = Path(path).read_text(errors="replace")
        new = text.replace("/opt/python/cp311-cp311/include/python3.11", py_inc)
        new = new.replace("/opt/python/cp311-cp311/lib/python3.11/site-packages/numpy/_core/include", np_inc)
        if new != text:
            Path(path).write_text(new)


def main(venv: str) -> None:
    prefix = Path(venv).resolve()
    _fix_wheel_cmake_paths(prefix)
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "tf2_msgs"
        (src / "msg").mkdir(parents=True)
        (src / "package.xml").write_text(PACKAGE_XML)
        (src / "CMakeLists.txt").write_text(CMAKELISTS)
        (src / "msg" / "TFMessage.msg").write_text(TFMESSAGE)
        build = Path(tmp) / "build"
        python = prefix / "bin" / "python"
        subprocess.run(
            [
                "cmake",
                "-G",
                "Ninja",
                "-S",
                str(src),
                "-B",
                str(build),
                f"-DCMAKE_PREFIX_PATH={prefix}",
                f"-DCMAKE_INSTALL_PREFIX={prefix}",
                f"-DPython3_EXECUTABLE={python}",
                "-DBUILD_TESTING=OFF",
            ],
            check=True,
        )
        subprocess.run(["cmake", "--build", str(build)], check=True)
        subprocess.run(["cmake", "--install", str(build)], check=True)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
