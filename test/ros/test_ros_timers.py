"""The node's timers (ros/lifecycle/timers.py): a SetParameters call of every parameter publishes /diagnostics
once, after the call, on a configured in-process node without DDS traffic (issue 30: rclpy runs the post-set
callback once per parameter, and the node published /diagnostics in each: a call of 58 took 3.2 s); the `map
-> odom` republish thread (`MapOdomThread`, issue 29) runs the republish on its own schedule, off the
executor, and ends on `stop` or once the context is shutting down."""

from __future__ import annotations

import threading
import time

import pytest
from rclpy.executors import SingleThreadedExecutor
from ros_helpers import in_process_node

from lingbot_map_ros.ros.lifecycle.timers import MapOdomThread
from lingbot_map_ros.ros.node import LingBotMapNode
from lingbot_map_ros.ros.params.table import PARAMETERS


def wait_until(predicate: object, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.01)


def test_a_call_of_every_parameter_publishes_diagnostics_once_after_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    published: list[float] = []
    original = LingBotMapNode.publish_diagnostics

    def counted(node: LingBotMapNode) -> None:
        published.append(time.monotonic())
        original(node)

    monkeypatch.setattr(LingBotMapNode, "publish_diagnostics", counted)
    with in_process_node({"diagnostics_rate": 0.1}) as node:  # the periodic one: every 10 s
        before = len(published)
        results = node.set_parameters([node.get_parameter(spec.name) for spec in PARAMETERS])
        assert len(results) == len(PARAMETERS) and all(r.successful for r in results), results
        assert len(published) == before  # not once per parameter, inside the call
        executor = SingleThreadedExecutor(context=node.context)
        executor.add_node(node)
        try:
            deadline = time.monotonic() + 10.0
            while len(published) == before and time.monotonic() < deadline:
                executor.spin_once(timeout_sec=0.05)
            assert len(published) == before + 1, "no /diagnostics after the parameter change"
            end = time.monotonic() + 0.5  # the one-shot timer stays off afterwards
            while time.monotonic() < end:
                executor.spin_once(timeout_sec=0.05)
            assert len(published) == before + 1, published
        finally:
            executor.remove_node(node)
            executor.shutdown()


def test_republishes_on_its_own_thread_until_stopped() -> None:
    runs: list[str] = []
    thread = MapOdomThread(lambda: runs.append(threading.current_thread().name), lambda: True, period_s=0.01)
    wait_until(lambda: len(runs) >= 5)
    thread.stop()
    assert not thread._thread.is_alive()  # stopped: no run after stop returned
    assert set(runs) == {"lingbot_map_odom_tf"}  # never the caller's (the executor's) thread


def test_ends_once_the_context_is_shutting_down() -> None:
    ok = threading.Event()
    ok.set()
    runs: list[int] = []
    thread = MapOdomThread(lambda: runs.append(1), ok.is_set, period_s=0.01)
    wait_until(lambda: len(runs) >= 2)
    ok.clear()
    wait_until(lambda: not thread._thread.is_alive())
