"""The mapping node as a child process (what the demo starts): parameters, remaps, log file, clean stop.

The child inherits the caller's environment plus the DDS variables given (the ROS wheels' bootstrap needs
the inherited variables). It is stopped with SIGINT from Python, which rclpy turns into a clean shutdown.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

from lingbot_map_ros.ros.client import ClientNode

NODE_MODULE = "lingbot_map_ros.ros.node"


class NodeProcessError(RuntimeError):
    """The node exited early or did not become ready; the message ends with the tail of its log."""


class NodeProcess:
    """`python -m lingbot_map_ros.ros.node --ros-args -p NAME:=VALUE ... -r FROM:=TO ...`."""

    def __init__(self, params: dict[str, object], remaps: dict[str, str], env: dict[str, str],
                 log_path: Path) -> None:
        args = [sys.executable, "-m", NODE_MODULE, "--ros-args"]
        for name, value in params.items():
            args += ["-p", f"{name}:={json.dumps(value)}"]
        for source, target in remaps.items():
            args += ["-r", f"{source}:={target}"]
        self.args = args
        self.log_path = log_path
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(args, stdout=self._log, stderr=subprocess.STDOUT, env=env)

    def alive(self) -> bool:
        """The process is still running."""
        return self.proc.poll() is None

    def log_tail(self, lines: int = 25) -> str:
        """The last `lines` lines the node wrote."""
        self._log.flush()
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def wait_for_service(self, client: ClientNode, name: str, timeout_s: float) -> None:
        """Block until the Trigger service `name` is available; NodeProcessError if the node dies first."""
        if client.wait_for_service(name, timeout_s, give_up=lambda: not self.alive()):
            return
        if not self.alive():
            raise NodeProcessError(f"the node exited with code {self.proc.returncode} while starting; its "
                                   f"log ({self.log_path}) ends with:\n{self.log_tail()}")
        raise NodeProcessError(f"service {name} not available after {timeout_s:g} s; the node's "
                               f"log ({self.log_path}) ends with:\n{self.log_tail()}")

    def stop(self, timeout_s: float = 20.0) -> int:
        """SIGINT and wait; kill if it hangs. Returns the exit code."""
        try:
            if self.alive():
                self.proc.send_signal(signal.SIGINT)
                try:
                    self.proc.wait(timeout_s)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait()
            return self.proc.returncode
        finally:
            self._log.close()
