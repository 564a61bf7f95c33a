"""The mapping node as a child process (the demo's, the DDS tests'): command line, log file, readiness, stop.

`NodeProcess.start` runs `python -m lingbot_map_ros.ros.node --ros-args ...` (or another module or script)
with `-r __node:=`, `-r __ns:=`, `--params-file`, `-p NAME:=VALUE` and `-r FROM:=TO`; stdout and stderr go
to one log file. The child inherits the given environment (default: this process's; the ROS wheels' bootstrap
needs the inherited variables). It is stopped with SIGINT, which rclpy turns into a clean shutdown; one that
hangs is killed (SIGKILL), with `new_session` its whole process group (the tests: no node outlives them).
test/ros_helpers.py adds only the test defaults (the venv's python, fault injection, a hang fails the test).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

from lingbot_map_ros.ros.dds_tools.client import ClientNode

NODE_MODULE = "lingbot_map_ros.ros.node"


class NodeProcessError(RuntimeError):
    """The node exited early or did not become ready; the message ends with the tail of its log."""


class NodeProcess:
    """One node process; `args` is its full command line."""

    def __init__(
        self, args: list[str], log_path: Path, env: Mapping[str, str] | None = None, new_session: bool = False
    ) -> None:
        self.args = args
        self.log_path = log_path
        self.killed = False  # stop() had to kill it (it ignored SIGINT)
        self.new_session = new_session  # its own process group (and session): `kill` ends the group
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            args,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=None if env is None else dict(env),
            start_new_session=new_session,
        )

    @classmethod
    def start(
        cls,
        log_path: Path,
        params: Mapping[str, object] | None = None,
        remaps: Mapping[str, str] | None = None,
        *,
        name: str | None = None,
        namespace: str | None = None,
        params_file: Path | None = None,
        module: str = NODE_MODULE,
        script: Path | None = None,
        python: str | Path = sys.executable,
        env: Mapping[str, str] | None = None,
        new_session: bool = False,
    ) -> NodeProcess:
        """`python -m module` (or `python script`) `--ros-args` with the name, namespace, parameters file,
        parameters (JSON values) and remaps given; `new_session`: in its own process group."""
        args = [str(python), *([str(script)] if script is not None else ["-m", module]), "--ros-args"]
        if name:
            args += ["-r", f"__node:={name}"]
        if namespace:
            args += ["-r", f"__ns:={namespace}"]
        if params_file is not None:
            args += ["--params-file", str(params_file)]
        for key, value in (params or {}).items():
            args += ["-p", f"{key}:={json.dumps(value)}"]
        for source, target in (remaps or {}).items():
            args += ["-r", f"{source}:={target}"]
        return cls(args, log_path, env, new_session)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        """The process is still running."""
        return self.proc.poll() is None

    def output(self) -> str:
        """Everything the node wrote so far."""
        if not self._log.closed:
            self._log.flush()
        return self.log_path.read_text(errors="replace")

    def log_tail(self, lines: int = 25) -> str:
        """The last `lines` lines the node wrote."""
        return "\n".join(self.output().splitlines()[-lines:])

    def wait_for_service(self, client: ClientNode, name: str, timeout_s: float) -> None:
        """Block until the Trigger service `name` is available; NodeProcessError if the node dies first."""
        self.wait_ready(client, [name], timeout_s)

    def wait_ready(self, client: ClientNode, services: Iterable[str], timeout_s: float = 60.0) -> None:
        """Block until every Trigger service of `services` is available (`timeout_s` for each);
        NodeProcessError naming the first missing one, or the exit code, with the tail of the log."""
        for name in services:
            if client.wait_for_service(name, timeout_s, give_up=lambda: not self.alive()):
                continue
            if not self.alive():
                raise NodeProcessError(
                    f"the node exited with code {self.proc.returncode} while starting; "
                    f"its log ({self.log_path}) ends with:\n{self.log_tail()}"
                )
            raise NodeProcessError(
                f"service {name} not available after {timeout_s:g} s; the node's "
                f"log ({self.log_path}) ends with:\n{self.log_tail()}"
            )

    def stop(self, timeout_s: float = 20.0) -> int:
        """SIGINT and wait; kill if it hangs (`killed`). Returns the exit code."""
        try:
            if self.alive():
                self.proc.send_signal(signal.SIGINT)
                try:
                    self.proc.wait(timeout_s)
                except subprocess.TimeoutExpired:
                    self.killed = True
                    self.kill()
            return self.proc.returncode
        finally:
            self._log.close()

    def kill(self) -> None:
        """SIGKILL the node (its process group with `new_session`: children too) and reap it."""
        try:
            if self.new_session:
                os.killpg(self.proc.pid, signal.SIGKILL)
            else:
                self.proc.kill()
        except ProcessLookupError:
            pass
        self.proc.wait()
