"""Helpers of the issue-16 reliability tests (test_reliability_attacks*.py, _streams.py, _input*.py):
start a tiny-preset node as a subprocess, read its /diagnostics (memory: process_memory.py `PeakRss`)."""

from __future__ import annotations

import time
from collections.abc import Callable

from diagnostic_msgs.msg import DiagnosticArray
from rclpy.qos import QoSProfile, ReliabilityPolicy
from ros_helpers import Collector, RosClient

RELIABLE = QoSProfile(depth=200, reliability=ReliabilityPolicy.RELIABLE)
BEST_EFFORT = QoSProfile(depth=5, reliability=ReliabilityPolicy.BEST_EFFORT)
#: Anchor frames of the input suites (test_reliability_input*.py).
S0 = 2
#: What the input suites change of the base parameters: 2 anchors, deep reader history, /diagnostics at 20 Hz,
#: no depth or frame cloud.
INPUT_PARAMS = {
    "kv_cache.scale_frames": S0,
    "qos.depth": 500,
    "diagnostics_rate": 20.0,
    "publish.frame_cloud": False,
    "publish.depth": False,
}
#: What the attack suites change of the base parameters (`TINY_NODE_PARAMS`): 2 anchors, a short queue, no
#: depth or frame cloud, /diagnostics at 10 Hz.
ATTACK_PARAMS = {
    "kv_cache.scale_frames": 2,
    "queue_size": 4,
    "diagnostics_rate": 10.0,
    "publish.frame_cloud": False,
    "publish.depth": False,
}


def collect(client: RosClient, msg_type: type, topic: str, qos: QoSProfile = RELIABLE) -> Collector:
    """Subscribe and wait until a publisher is matched, so no early message is lost."""
    collector = Collector()
    collector.subscription = client.node.create_subscription(msg_type, topic, collector, qos)
    deadline = time.monotonic() + 30
    while collector.subscription.get_publisher_count() < 1:
        assert time.monotonic() < deadline, f"no publisher on {topic} within 30 s"
        time.sleep(0.02)
    return collector


def status_of(msg: DiagnosticArray, name: str) -> tuple[int, str, dict[str, str]] | None:
    """(level, message, values) of the status `<fully qualified name>: mapping` of the node `name` (any
    namespace) in `msg`, None when absent."""
    for status in msg.status:
        if status.name.endswith(f"/{name}: mapping"):
            return (
                int.from_bytes(status.level, "little")
                if isinstance(status.level, bytes)
                else int(status.level),
                status.message,
                {kv.key: kv.value for kv in status.values},
            )
    return None


def latest(
    diag: Collector, name: str, predicate: Callable[[int, str, dict[str, str]], bool], timeout: float = 30.0
) -> tuple[int, str, dict[str, str]]:
    """The newest status of node `name` on /diagnostics that satisfies `predicate(level, message, values)`."""

    def matching(msgs: list[DiagnosticArray]) -> list[tuple[int, str, dict[str, str]]]:
        found = [status_of(m, name) for m in msgs]
        return [s for s in found if s is not None and predicate(*s)]

    return matching(diag.wait_for(lambda msgs: bool(matching(msgs)), timeout))[-1]


def latest_values(
    diag: Collector, name: str, predicate: Callable[[dict[str, str]], bool], timeout: float = 30.0
) -> dict[str, str]:
    """The values of the newest non-empty status of node `name` on /diagnostics with `predicate(values)`."""
    return latest(diag, name, lambda _level, _message, values: bool(values) and predicate(values), timeout)[2]


def count(values: dict[str, str], key: str) -> int:
    return int(values.get(key, "0"))


def warm_up(pub: object, odom: Collector, make: Callable[[int], object], timeout: float = 60.0) -> int:
    """Publish valid frames `make(0), make(1), ...` every 0.2 s until odometry arrives; returns how many were
    sent. The node's odometry writer may match the test's reader a moment after the reader saw the writer
    (DDS discovery is not symmetric), so the first outputs can be lost: tests count from here."""
    deadline = time.monotonic() + timeout
    sent = 0
    while len(odom) == 0:
        assert time.monotonic() < deadline, f"no odometry after {sent} frames in {timeout} s"
        pub.publish(make(sent))
        sent += 1
        end = time.monotonic() + 0.2
        while len(odom) == 0 and time.monotonic() < end:
            time.sleep(0.01)
    time.sleep(0.3)  # the rest of the warm-up's outputs
    return sent
