"""Signals before the node's own handlers exist: importing torch and rclpy takes ~2 s (more on a loaded
machine), and a SIGINT then raised `KeyboardInterrupt` inside the imports (exit -2 with a traceback, issue
20); one inherited as ignored (a shell's background job) was never seen at all.

`exit_quietly_on_signals` is the first thing `python -m lingbot_map_ros.ros.node` and the `lingbot_map_node`
entry point (ros/node_entry.py) run, before those imports: SIGINT or SIGTERM until `shutdown.SignalLatch`
takes over ends the process at once with exit code 0, as a signal during the node's life does, writing one
line. This module imports nothing heavy and nothing of the package.
"""

from __future__ import annotations

import os
import signal
from types import FrameType


def _exit_now(signum: int, frame: FrameType | None) -> None:
    os.write(2, f"[lingbot_map] {signal.Signals(signum).name} during start-up: exiting\n".encode())
    os._exit(0)


def exit_quietly_on_signals() -> None:
    """Handle SIGINT and SIGTERM by exiting with 0 (main thread; replaced by `SignalLatch.install`)."""
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, _exit_now)
