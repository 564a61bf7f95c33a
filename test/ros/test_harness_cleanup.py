"""Issue 20: no node outlives a test, and a signal during the node's start-up ends it cleanly.

* `NodeProcess.stop` on a process that ignores SIGINT kills its whole process group (SIGKILL), grandchildren
  included (before: only the child was killed, and `ros_helpers` started nodes in the test runner's group).
* SIGINT while the node imports torch and rclpy (before its own handlers exist): exit 0 and one line, no
  `KeyboardInterrupt` traceback (before: exit -2 with a traceback from inside the imports).
"""

from __future__ import annotations

import os
import signal
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest
from ros_helpers import PYTHON, REPO

from lingbot_map_ros.tools.live.node_process import NodeProcess


def test_a_node_that_ignores_sigint_is_killed_with_its_process_group(tmp_path: Path) -> None:
    script = tmp_path / "stubborn.py"
    script.write_text(
        textwrap.dedent(
            """
            import signal, subprocess, sys, time
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
            print(child.pid, flush=True)
            time.sleep(600)
            """
        )
    )
    proc = NodeProcess([sys.executable, str(script)], tmp_path / "stubborn.log", new_session=True)
    deadline = time.monotonic() + 30
    while not proc.output().strip() and time.monotonic() < deadline:
        time.sleep(0.05)
    grandchild = int(proc.output().split()[0])
    assert proc.stop(timeout_s=1.0) == -signal.SIGKILL and proc.killed
    deadline = time.monotonic() + 10
    while psutil.pid_exists(grandchild) and psutil.Process(grandchild).status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline, "the grandchild outlived the kill of the group"
        time.sleep(0.05)


@pytest.mark.parametrize("delay_s", [0.5, 1.5])
def test_sigint_during_start_up_exits_cleanly(delay_s: float, tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    params = {"model.preset": "tiny", "model.device": "cpu", "autostart": False}
    proc = NodeProcess.start(tmp_path / "node.log", params, python=PYTHON, env=env, new_session=True)
    time.sleep(delay_s)
    code = proc.stop(timeout_s=60.0)  # SIGINT, then SIGKILL of the group if it hangs
    text = proc.output()
    assert code == 0 and not proc.killed, text
    assert "Traceback" not in text and "KeyboardInterrupt" not in text, text
