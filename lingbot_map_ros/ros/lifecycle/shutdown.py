"""Signals and the spin loop of the node process: a signal shuts down cleanly, once; a late one exits at once.

rclpy's own signal handlers are not installed (`SignalHandlerOptions.NO`): with them a second SIGINT during
the shutdown cleanup either raised `KeyboardInterrupt` inside it (exit -2 with a traceback) or, 2 ms after the
first, aborted the process (`terminate called without an active exception`, exit -6) (issue 16). Instead
`SignalLatch` handles SIGINT and SIGTERM in Python: the first sets an event and starts the clean shutdown.
A second signal within `SAME_REQUEST_S` of the first is the same request (under `ros2 launch`, one Ctrl-C
reaches the node twice: from the terminal, and again from launch when it runs non-interactive) and is ignored
with one line; a later one, or a clean shutdown still running `SHUTDOWN_GRACE_S` after the first signal,
writes one line and ends the process with `os._exit(0)` (issue 19). The executor spins in a background
thread so that the main thread, which runs Python signal handlers, is never blocked in rcl's wait and reacts
within `POLL_S`.

Shutdown order: the executor stops dispatching the node's callbacks (a timer would publish /diagnostics of a
half-released node), the node releases its threads (inference, publish, map) while every publisher is still
valid, then the context shuts down (ending the spin, destroying the entities). The other order let the map
thread publish on a destroyed publisher (`map_worker failed (InvalidHandle)`, ~1 stop in 15 while frames
flowed).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from types import FrameType

import rclpy
from rclpy.exceptions import ParameterException
from rclpy.executors import Executor, ExternalShutdownException, MultiThreadedExecutor
from rclpy.lifecycle import LifecycleNode
from rclpy.signals import SignalHandlerOptions

#: How often the main thread looks at the signal latch and the spin thread.
POLL_S = 0.05
#: Exit code of a process that ends on a late second signal, or at the grace period, during shutdown.
SECOND_SIGNAL_EXIT_CODE = 0
#: A signal this soon (s) after the first is the same shutdown request: ignored, the clean shutdown goes on.
SAME_REQUEST_S = 2.0
#: A clean shutdown still running this long (s) after the first signal is abandoned: the process exits now.
#: Below `ros2 launch`'s default `sigterm_timeout` (5 s), after which launch escalates to SIGTERM.
SHUTDOWN_GRACE_S = 4.0


class SignalLatch:
    """SIGINT / SIGTERM handler: the first signal sets `event`; another within `same_request_s` is ignored; a
    later one, or `finished` not called within `grace_s` of the first (once `arm_grace` was called), exits the
    process at once with `SECOND_SIGNAL_EXIT_CODE`.

    Args:
        name: prefix of the lines written.
        same_request_s: window after the first signal in which another signal is the same request.
        grace_s: time after the first signal that the clean shutdown may take.
    """

    def __init__(
        self,
        name: str = "lingbot_map",
        same_request_s: float = SAME_REQUEST_S,
        grace_s: float = SHUTDOWN_GRACE_S,
    ) -> None:
        self.event = threading.Event()
        self.signum: int | None = None
        self._name = name
        self._same_request_s = same_request_s
        self._grace_s = grace_s
        self._first_at = 0.0
        self._done = threading.Event()

    def install(self) -> None:
        """Handle SIGINT and SIGTERM (call from the main thread, before `rclpy.init`)."""
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, self._handle)

    def arm_grace(self) -> None:
        """Exit at once if `finished` is not called within the grace period of the first signal (a daemon
        timer; call once the clean shutdown starts)."""
        remaining = self._first_at + self._grace_s - time.monotonic()
        timer = threading.Timer(max(0.0, remaining), self._grace_expired)
        timer.daemon = True
        timer.start()

    def finished(self) -> None:
        """The clean shutdown is done: the grace timer and late signals no longer end the process."""
        self._done.set()

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        if not self.event.is_set():
            self._first_at = time.monotonic()
            self.signum = signum
            self.event.set()
            return
        if self._done.is_set():
            return
        after = time.monotonic() - self._first_at
        if after < self._same_request_s:
            self._write(
                f"{name} again {after:.2f} s after the first signal: the same request, shutting down cleanly"
            )
            return
        self._write(f"second signal ({name}) {after:.1f} s into the shutdown: exiting now")
        os._exit(SECOND_SIGNAL_EXIT_CODE)

    def _grace_expired(self) -> None:
        if not self._done.is_set():
            self._write(f"the clean shutdown did not finish within {self._grace_s:g} s: exiting now")
            os._exit(SECOND_SIGNAL_EXIT_CODE)

    def _write(self, line: str) -> None:
        os.write(2, f"[{self._name}] {line}\n".encode())


class SpinThread:
    """`executor.spin()` on a daemon thread; `error` holds what ended it other than a context shutdown.

    Args:
        executor: the executor with the node added.
    """

    def __init__(self, executor: Executor) -> None:
        self.error: BaseException | None = None
        self._executor = executor
        self._thread = threading.Thread(target=self._spin, name="lingbot_map_spin", daemon=True)

    def start(self) -> SpinThread:
        self._thread.start()
        return self

    def alive(self) -> bool:
        return self._thread.is_alive()

    def join(self, timeout: float) -> bool:
        """Wait for the spin to end; False when it is still running after `timeout` s."""
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def _spin(self) -> None:
        try:
            self._executor.spin()
        except ExternalShutdownException:
            pass
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread, which decides the exit code
            self.error = exc


def wait_for_stop(latch: SignalLatch, spin: SpinThread) -> None:
    """Block the main thread until a signal arrives or the spin ends by itself (an error)."""
    while spin.alive() and not latch.event.wait(POLL_S):
        pass


def run_node(
    factory: Callable[[], LifecycleNode],
    step_wait_s: float,
    args: list[str] | None = None,
    exit_process: bool = True,
) -> int:
    """Create the node, autostart it if its `autostart` parameter says so, spin until a signal, shut down.

    Exit code 0 on SIGINT/SIGTERM (also when a late second signal or the grace period cuts the shutdown
    short), 1 when autostart fails or the executor stops by itself, 2 when the node cannot be constructed (bad
    parameters). With `exit_process` the process ends with `os._exit(code)` once the node released what it
    holds (the interpreter's teardown of torch alone takes 1-2 s on a busy CPU); without it the grace period
    is not armed (a caller in-process is not ended).

    Args:
        factory: builds the node (raises ValueError / ParameterException on bad parameters).
        step_wait_s: how long the spin thread may take to return after the context shut down.
    """
    latch = SignalLatch()
    latch.install()
    rclpy.init(args=args, signal_handler_options=SignalHandlerOptions.NO)
    try:
        node = factory()
    except (ValueError, ParameterException) as exc:
        print(f"[lingbot_map] {exc}", file=sys.stderr)
        rclpy.try_shutdown()
        return 2
    executor = MultiThreadedExecutor(num_threads=8)  # each service has its own callback group (issue 20)
    executor.add_node(node)
    code = 0
    spin: SpinThread | None = None
    try:
        if node.params.autostart and not node.autostart():
            node.get_logger().fatal("autostart failed (see the error above); exiting")
            code = 1
        elif not latch.event.is_set():
            spin = SpinThread(executor).start()
            wait_for_stop(latch, spin)
            if spin.error is not None:
                node.get_logger().fatal(f"the executor stopped: {type(spin.error).__name__}: {spin.error}")
                code = 1
    finally:
        if latch.event.is_set() and exit_process:
            latch.arm_grace()
        executor.remove_node(node)  # no new callback (a timer's /diagnostics of a half-released node)
        node.on_shutdown(None)  # the node's threads end while every publisher is valid (module doc)
        rclpy.try_shutdown()  # ends the spin and destroys the node's entities
        if spin is not None and not spin.join(step_wait_s):
            node.get_logger().warning("shutdown: the executor is still in a callback; not waiting for it")
        executor.shutdown(timeout_sec=step_wait_s, wait_for_threads=False)
        node.destroy_node()
        latch.finished()
        if latch.signum is not None:
            name = signal.Signals(latch.signum).name
            os.write(2, f"[lingbot_map] {name}: clean shutdown complete (exit code {code})\n".encode())
    if exit_process:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code
