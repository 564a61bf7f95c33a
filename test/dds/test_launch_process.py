"""`ros2 launch lingbot_map_ros lingbot_map.launch.py` as a user types it (issue 19, item 7), with the real
launch tooling: skipped unless `ros2` is on PATH and the ament index has this checkout's launch file (a colcon
workspace built from it and sourced; docs/node.md "Launch"). CI has neither.

* A node that cannot configure makes `ros2 launch` exit non-zero, with the reason in its output (was 0).
* Ctrl-C (SIGINT to the process group, as a terminal sends it; stdin not a tty, so launch runs non-interactive
  and sends the node a second SIGINT) gives one clean shutdown of the node and `ros2 launch` exits 0. The node
  used to take the second-signal fast exit.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
from ros_helpers import REPO

pytestmark = pytest.mark.dds

LAUNCH_FILE = REPO / "launch" / "lingbot_map.launch.py"
TINY_ARGS = ["model_preset:=tiny", "device:=cpu", "image_width:=56"]


def _installed_launch_file() -> Path | None:
    """The launch file of the lingbot_map_ros package in the ament index, None when `ros2` or it is absent."""
    if shutil.which("ros2") is None:
        return None
    found = subprocess.run(["ros2", "pkg", "prefix", "lingbot_map_ros"], capture_output=True, text=True)
    if found.returncode != 0:
        return None
    return Path(found.stdout.strip()) / "share" / "lingbot_map_ros" / "launch" / LAUNCH_FILE.name


INSTALLED = _installed_launch_file()
requires_launch = pytest.mark.skipif(
    INSTALLED is None or not INSTALLED.is_file() or INSTALLED.read_bytes() != LAUNCH_FILE.read_bytes(),
    reason="needs `ros2` on PATH and this checkout's lingbot_map_ros built into a sourced colcon workspace",
)


def _launch(args: list[str], log: Path) -> subprocess.Popen:
    """`ros2 launch lingbot_map_ros lingbot_map.launch.py ARGS` in its own process group, stdin not a tty."""
    return subprocess.Popen(
        ["ros2", "launch", "lingbot_map_ros", LAUNCH_FILE.name, *args],
        stdin=subprocess.DEVNULL,
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


@requires_launch
def test_launch_exits_non_zero_with_the_reason_when_the_node_cannot_configure(tmp_path: Path) -> None:
    log = tmp_path / "launch.log"
    launch = _launch(["model_preset:=tiny", "device:=cpu", "image_width:=57"], log)
    code = launch.wait(timeout=180)
    out = log.read_text()
    assert code != 0, out[-3000:]
    assert "lingbot_map exited with code 2 (invalid parameters)" in out, out[-3000:]
    assert "multiple of 14" in out.split("Caught exception in launch")[-1], out[-3000:]  # the reason itself


@requires_launch
def test_ctrl_c_under_launch_is_one_clean_shutdown_and_launch_exits_0(tmp_path: Path) -> None:
    log = tmp_path / "launch.log"
    launch = _launch(TINY_ARGS, log)
    try:
        deadline = time.monotonic() + 180
        while "active: listening" not in log.read_text():
            assert launch.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.2)
        os.killpg(launch.pid, signal.SIGINT)  # Ctrl-C in a terminal: the whole foreground process group
        code = launch.wait(timeout=60)
    finally:
        if launch.poll() is None:
            os.killpg(launch.pid, signal.SIGKILL)
            launch.wait()
    out = log.read_text()
    assert code == 0, out[-3000:]
    assert "SIGINT: clean shutdown complete (exit code 0)" in out, out[-3000:]
    assert "process has finished cleanly" in out, out[-3000:]
    assert "exiting now" not in out and "[ERROR]" not in out, out[-3000:]
    if "sending signal 'SIGINT' to process[lingbot_map_node" in out:  # launch's own SIGINT came too
        assert "the same request" in out, out[-3000:]
