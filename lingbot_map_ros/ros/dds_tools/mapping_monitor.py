"""`MappingMonitor`: watching the mapping node from outside (the demo): posed frames counted on its
odometry, its latest /diagnostics values, and whether every frame sent to it has been handled."""

from __future__ import annotations

import threading
import time

from diagnostic_msgs.msg import DiagnosticArray
from nav_msgs.msg import Odometry
from rclpy.node import Node
from rclpy.qos import QoSProfile, ReliabilityPolicy

from lingbot_map_ros.ros.diagnostics.stats import diagnostic_values


class MappingMonitor:
    """Counts the node's odometry messages on `odometry_topic` (one per posed frame) and keeps its latest
    diagnostics (key -> value strings), through subscriptions on `node` (spun by the caller)."""

    def __init__(self, node: Node, odometry_topic: str) -> None:
        self._node = node
        self._lock = threading.Lock()
        self.posed = 0
        self.last_pose_time = time.monotonic()
        self.diagnostics: dict[str, str] = {}
        qos = QoSProfile(depth=100, reliability=ReliabilityPolicy.BEST_EFFORT)
        self._subs = [
            node.create_subscription(Odometry, odometry_topic, self._on_odometry, qos),
            node.create_subscription(DiagnosticArray, "/diagnostics", self._on_diagnostics, qos),
        ]

    def _on_odometry(self, _msg: Odometry) -> None:
        with self._lock:
            self.posed += 1
            self.last_pose_time = time.monotonic()

    def _on_diagnostics(self, msg: DiagnosticArray) -> None:
        values = diagnostic_values(msg)
        if values:
            with self._lock:
                self.diagnostics = values

    def counter(self, key: str) -> int:
        """An integer diagnostics value (0 while unknown)."""
        with self._lock:
            return int(float(self.diagnostics.get(key, "0")))

    def arrived(self) -> int:
        """Frames that reached the node: accepted into its queue or rejected."""
        return self.counter("frames_received") + self.counter("rejected_total")

    def idle(self) -> bool:
        """Every frame the node accepted has left its queue (processed or dropped)."""
        handled = self.counter("frames_processed") + self.counter("frames_dropped")
        return handled >= self.counter("frames_received") and self.counter("queue_length") == 0

    def done(self, sent: int) -> bool:
        """Every sent frame reached the node and left its queue (processed, dropped or rejected)."""
        return self.arrived() >= sent and self.idle()

    def close(self) -> None:
        """Stop listening."""
        for sub in self._subs:
            self._node.destroy_subscription(sub)
