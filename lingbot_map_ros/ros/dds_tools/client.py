"""`ClientNode`: the rclpy node of a tool process (replay, record, the demo): initialisation, executor,
waiting for and calling the mapping node's `std_srvs/Trigger` services, shutdown.

Where rclpy runs: `private_context=False` initialises the default context, which installs rclpy's SIGINT /
SIGTERM handlers (the `replay` and `record` processes: Ctrl-C shuts DDS down cleanly);
`private_context=True` initialises a Context of its own and leaves signal handling alone (the demo, which
may run inside a process that uses rclpy already, e.g. a test).

Who spins: `spin_threads=0` gives a SingleThreadedExecutor the caller spins in the foreground with
`spin_until` (record), or never (replay: publishing needs no spinning); `spin_threads=N` spins an executor
(N = 1: single-threaded, the tests' `RosClient`; N > 1: a MultiThreadedExecutor with N threads) in a daemon
thread, so subscriptions and service responses are served while the caller blocks (the demo).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import rclpy
from rclpy.context import Context
from rclpy.executors import ExternalShutdownException, MultiThreadedExecutor, SingleThreadedExecutor
from std_srvs.srv import Trigger


class ClientNode:
    """One rclpy node named `name` with its executor; `close()` (or `with`) shuts everything down."""

    def __init__(self, name: str, *, private_context: bool = False, spin_threads: int = 0) -> None:
        if spin_threads < 0:
            raise ValueError(f"spin_threads must be >= 0, got {spin_threads}")
        self.context: Context | None = Context() if private_context else None
        rclpy.init(context=self.context)
        try:
            self.node = rclpy.create_node(name, context=self.context)
            self.executor = (
                MultiThreadedExecutor(num_threads=spin_threads, context=self.context)
                if spin_threads > 1
                else SingleThreadedExecutor(context=self.context)
            )
            self.executor.add_node(self.node)
        except BaseException:
            rclpy.try_shutdown(context=self.context)
            raise
        self._closed = False
        if spin_threads:
            threading.Thread(target=self.executor.spin, name=f"{name}_spin", daemon=True).start()

    def __enter__(self) -> ClientNode:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def spin_until(
        self, should_stop: Callable[[], bool], on_tick: Callable[[], None], period_s: float = 0.1
    ) -> None:
        """Spin in this thread (at most `period_s` per round, then `on_tick()`) until `should_stop()` or
        rclpy shut down (SIGINT with the default context's handlers). KeyboardInterrupt propagates."""
        try:
            while not should_stop():
                self.executor.spin_once(timeout_sec=period_s)
                on_tick()
        except ExternalShutdownException:
            return

    def wait_for_service(
        self, name: str, timeout_s: float, give_up: Callable[[], bool], poll_s: float = 0.2
    ) -> bool:
        """Block until the Trigger service `name` is available (True), or `timeout_s` passed or `give_up()`
        returned True (False); `give_up` is asked every `poll_s`."""
        client = self.node.create_client(Trigger, name)
        deadline = time.monotonic() + timeout_s
        try:
            while not client.wait_for_service(timeout_sec=poll_s):
                if give_up() or time.monotonic() > deadline:
                    return False
            return True
        finally:
            self.node.destroy_client(client)

    def call_trigger(self, service: str, timeout_s: float) -> Trigger.Response:
        """Call the Trigger service `service` and return its response (needs `spin_threads > 0`).

        RuntimeError if the service is not available or does not answer within `timeout_s`."""
        client = self.node.create_client(Trigger, service)
        try:
            if not client.wait_for_service(timeout_sec=timeout_s):
                raise RuntimeError(f"service {service} is not available")
            future = client.call_async(Trigger.Request())
            deadline = time.monotonic() + timeout_s
            while not future.done():
                if time.monotonic() > deadline:
                    raise RuntimeError(f"service {service} did not answer within {timeout_s:g} s")
                time.sleep(0.02)
            return future.result()
        finally:
            self.node.destroy_client(client)

    def running(self) -> bool:
        """Whether this client's rclpy context is still up (False once SIGINT or `close` shut it down)."""
        return not self._closed and rclpy.ok(context=self.context)

    def close(self) -> None:
        """Stop the executor, destroy the node, shut rclpy's context down. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self.executor.shutdown()
        self.node.destroy_node()
        rclpy.try_shutdown(context=self.context)
