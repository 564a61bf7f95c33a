"""Watching the node work: /diagnostics values and posed-frame count, a progress bar until it is done."""

from __future__ import annotations

import sys
import threading
import time

from diagnostic_msgs.msg import DiagnosticArray
from nav_msgs.msg import Odometry
from rclpy.node import Node
from rclpy.qos import QoSProfile, ReliabilityPolicy
from tqdm import tqdm

from lingbot_map_ros.ros.diagnostics import diagnostic_values
from lingbot_map_ros.tools.node_process import NodeProcess, NodeProcessError


class MappingProgress:
    """Counts the node's odometry messages (one per posed frame) and keeps its latest diagnostics."""

    def __init__(self, node: Node, odometry_topic: str) -> None:
        self._node = node
        self._lock = threading.Lock()
        self.posed = 0
        self.last_pose_time = time.monotonic()
        self.diagnostics: dict[str, str] = {}
        qos = QoSProfile(depth=100, reliability=ReliabilityPolicy.BEST_EFFORT)
        self._subs = [node.create_subscription(Odometry, odometry_topic, self._on_odometry, qos),
                      node.create_subscription(DiagnosticArray, "/diagnostics", self._on_diagnostics, qos)]

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

    def done(self, sent: int) -> bool:
        """Every sent frame reached the node and left its queue (processed, dropped or rejected)."""
        received = self.counter("frames_received")
        handled = self.counter("frames_processed") + self.counter("frames_dropped")
        return (received + self.counter("rejected_total") >= sent and handled >= received
                and self.counter("queue_length") == 0)

    def wait_until_done(self, sent: int, node: NodeProcess, deadline: float, settle_s: float = 1.0) -> None:
        """Block (with a progress bar of posed frames) until `done(sent)` and no pose for `settle_s`."""
        with tqdm(total=sent, desc="mapping", unit="frame", file=sys.stderr) as bar:
            while True:
                bar.update(self.posed - bar.n)
                if self.done(sent) and time.monotonic() - self.last_pose_time >= settle_s:
                    return
                if not node.alive():
                    raise NodeProcessError(f"the node exited with code {node.proc.returncode} while mapping; "
                                           f"its log ends with:\n{node.log_tail()}")
                if time.monotonic() > deadline:
                    raise TimeoutError(f"the node had not handled all {sent} frames before the timeout "
                                       f"(diagnostics: {self.diagnostics})")
                time.sleep(0.1)

    def close(self) -> None:
        """Stop listening."""
        for sub in self._subs:
            self._node.destroy_subscription(sub)
