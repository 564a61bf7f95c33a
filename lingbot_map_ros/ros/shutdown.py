"""Signals and the spin loop of the node process: one signal shuts down cleanly, a second exits at once.

rclpy's own signal handlers are not installed (`SignalHandlerOptions.NO`): with them a second SIGINT during
the shutdown cleanup either raised `KeyboardInterrupt` inside it (exit -2 with a traceback) or, 2 ms after the
first, aborted the process (`terminate called without an active exception`, exit -6) (issue 16). Instead
`SignalLatch` handles SIGINT and SIGTERM in Python: the first sets an event, a second one (while the first is
being handled) writes one line and ends the process with `os._exit(0)`. The executor spins in a background
thread so that the main thread, which runs Python signal handlers, is never blocked in rcl's wait and reacts
within `POLL_S`.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable
from types import FrameType

import rclpy
from rclpy.exceptions import ParameterException
from rclpy.executors import Executor, ExternalShutdownException, MultiThreadedExecutor
from rclpy.lifecycle import LifecycleNode
from rclpy.signals import SignalHandlerOptions

#: How often the main thread looks at the signal latch and the spin thread.
POLL_S = 0.05
#: Exit code of a process that ends on a second signal during shutdown.
SECOND_SIGNAL_EXIT_CODE = 0


class SignalLatch:
    """SIGINT / SIGTERM handler: the first signal sets `event`; the second exits the process at once.

    Args:
        name: prefix of the line written on the second signal.
    """

    def __init__(self, name: str = "lingbot_map") -> None:
        self.event = threading.Event()
        self.signum: int | None = None
        self._name = name

    def install(self) -> None:
        """Handle SIGINT and SIGTERM (call from the main thread, before `rclpy.init`)."""
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, self._handle)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.event.is_set():
            name = signal.Signals(signum).name
            os.write(2, f"[{self._name}] second signal ({name}) during shutdown: exiting now\n".encode())
            os._exit(SECOND_SIGNAL_EXIT_CODE)
        self.signum = signum
        self.event.set()


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

    Exit code 0 on SIGINT/SIGTERM (a second signal during the shutdown: 0 at once), 1 when autostart fails
    or the executor stops by itself, 2 when the node cannot be constructed (bad parameters). With
    `exit_process` the process ends with `os._exit(code)` once the node released what it holds (the
    interpreter's teardown of torch alone takes 1-2 s on a busy CPU).

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
        rclpy.try_shutdown()  # ends the spin; the node then sees `context.ok()` False and publishes no more
        if spin is not None and not spin.join(step_wait_s):
            node.get_logger().warning("shutdown: the executor is still in a callback; not waiting for it")
        node.on_shutdown(None)
        executor.shutdown(timeout_sec=step_wait_s, wait_for_threads=False)
        node.destroy_node()
    if exit_process:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code
