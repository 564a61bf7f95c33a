"""The node's timers (ros/timers.py) on a configured in-process node, without DDS traffic: a SetParameters
call of every parameter publishes /diagnostics once, after the call (issue 30: rclpy runs the post-set
callback once per parameter, and the node published /diagnostics in each: a call of 58 took 3.2 s)."""

from __future__ import annotations

import time

import pytest
from rclpy.executors import SingleThreadedExecutor
from ros_helpers import in_process_node

from lingbot_map_ros.ros.node import LingBotMapNode
from lingbot_map_ros.ros.param_table import PARAMETERS


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
