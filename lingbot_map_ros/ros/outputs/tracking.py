"""Tracking state out, pose hints in (docs/robot.md "Tracking state"; the engine: engine/health.py,
engine/loop/relocalise.py through `CameraState`). Thin: the engine judges every frame on its pose path; this
publishes what it says and hands `/initialpose` to it.

* `~/tracking_state` per camera (`~/<camera>/tracking_state` for named cameras): `diagnostic_msgs/
  DiagnosticStatus`, transient-local (latched, depth 1): level OK (tracking, relocalised), WARN (degraded),
  ERROR (lost), the state as `message`, key/values state, reasons, inflation, maps, hints. Published when the
  state changes (checked every `POLL_S`) and every `REPEAT_S` s; the same status goes to /diagnostics.
* `/initialpose` (`geometry_msgs/PoseWithCovarianceStamped`, the odometry body's pose in the camera's map
  frame, e.g. RViz's "2D Pose Estimate"): each camera with relocalisation narrows its search to
  max(3 sigma_xy, `MIN_RADIUS_M`) around it and, after `PLACE_AFTER` searched frames without a verified match,
  is placed there (`CameraState.hint`). A hint in another frame is refused (logged).

Only cameras with `tracking.health` true publish a state.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from geometry_msgs.msg import PoseWithCovarianceStamped
from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy
from std_msgs.msg import Header

from ...engine.face import HealthReport, TrackingState, quat_xyzw_to_matrix
from ..lifecycle.entities import guard_callback
from .mapping import MappingOutputs

#: How often the state is checked for a change (s) and re-sent anyway (s).
POLL_S = 0.1
REPEAT_S = 1.0
#: `/initialpose`: the smallest search radius (m) and the searched frames before the hint is taken as it is.
MIN_RADIUS_M = 1.0
PLACE_AFTER = 10

LATCHED = QoSProfile(
    depth=1,
    history=HistoryPolicy.KEEP_LAST,
    reliability=ReliabilityPolicy.RELIABLE,
    durability=DurabilityPolicy.TRANSIENT_LOCAL,
)

LEVELS = {
    TrackingState.TRACKING: DiagnosticStatus.OK,
    TrackingState.RELOCALISED: DiagnosticStatus.OK,
    TrackingState.DEGRADED: DiagnosticStatus.WARN,
    TrackingState.LOST: DiagnosticStatus.ERROR,
}


def tracking_status(name: str, report: HealthReport, hints: int) -> DiagnosticStatus:
    """`~/tracking_state` of one camera named `name` (module doc)."""
    values = {
        "state": report.state.value,
        "reasons": ", ".join(report.reasons),
        "inflation": f"{report.inflation:g}",
        "maps": str(report.maps).lower(),
        "hints": str(hints),
    }
    return DiagnosticStatus(
        level=LEVELS[report.state],
        name=name,
        message=report.state.value,
        hardware_id="",
        values=[KeyValue(key=k, value=v) for k, v in values.items()],
    )


def pose_matrix(msg: PoseWithCovarianceStamped) -> np.ndarray:
    """[4, 4] float64 of the message's pose."""
    pose = msg.pose.pose
    matrix = np.eye(4)
    q = pose.orientation
    matrix[:3, :3] = quat_xyzw_to_matrix(np.array([q.x, q.y, q.z, q.w], np.float64))
    matrix[:3, 3] = (pose.position.x, pose.position.y, pose.position.z)
    return matrix


class TrackingOutputs:
    """The node's tracking-state publishers and its `/initialpose` subscription (module doc).

    Args:
        node: the node's facade (kept publishers and subscriptions, entities.py).
        group: the callback group of its timer and subscription.
        cameras: (name, outputs) of every camera with outputs now.
        on_error: `(where, exception)` of a callback that failed.
    """

    def __init__(
        self,
        node: Any,
        group: Any,
        cameras: Callable[[], list[tuple[str, MappingOutputs]]],
        on_error: Callable[[str, Exception], None],
    ) -> None:
        self._node = node
        self._cameras = cameras
        self._pubs: dict[str, Any] = {}
        self._sent: dict[str, tuple[TrackingState, float]] = {}  # camera -> (state, monotonic time sent)
        self.hints = 0
        self._diagnostics = node.create_publisher(DiagnosticArray, "/diagnostics", 10)
        node.create_subscription(
            PoseWithCovarianceStamped,
            "/initialpose",
            guard_callback("initialpose", self.initial_pose, on_error),
            10,
            callback_group=group,
        )
        self._timer = node.create_timer(
            POLL_S, guard_callback("tracking_state", self.publish, on_error), callback_group=group
        )

    def publish(self) -> None:
        """Send each camera's state when it changed, or `REPEAT_S` after it was last sent."""
        now = time.monotonic()
        statuses = []
        for name, outputs in self._cameras():
            report = outputs.state.tracking_report()
            if report is None:
                continue
            sent = self._sent.get(name)
            if sent is not None and sent[0] is report.state and now - sent[1] < REPEAT_S:
                continue
            status = tracking_status(name or self._node.get_name(), report, self.hints)
            self._publisher(name).publish(status)
            self._sent[name] = (report.state, now)
            statuses.append(status)
        if statuses:
            stamp = self._node.get_clock().now().to_msg()
            self._diagnostics.publish(DiagnosticArray(header=Header(stamp=stamp), status=statuses))

    def initial_pose(self, msg: PoseWithCovarianceStamped) -> None:
        """`/initialpose`: a hint to each camera that relocalises, in its map frame (module doc)."""
        body = pose_matrix(msg)
        cov = np.asarray(msg.pose.covariance, np.float64).reshape(6, 6)
        radius = max(3.0 * float(np.sqrt(max(cov[0, 0], cov[1, 1], 0.0))), MIN_RADIUS_M)
        taken = []
        for name, outputs in self._cameras():
            frame = msg.header.frame_id.lstrip("/")
            if frame and frame != outputs.map_frame:
                self._node.get_logger().warning(
                    f"/initialpose in '{frame}' refused for camera '{name}': its map frame is "
                    f"'{outputs.map_frame}'"
                )
                continue
            if outputs.state.hint(body, radius, PLACE_AFTER):
                taken.append(name or self._node.get_name())
        if taken:
            self.hints += 1
            self._sent.clear()  # the hint count goes out at once
            self._node.get_logger().info(f"/initialpose: search within {radius:.2f} m ({', '.join(taken)})")

    def _publisher(self, name: str) -> Any:
        if name not in self._pubs:
            topic = f"~/{name}/tracking_state" if name else "~/tracking_state"
            self._pubs[name] = self._node.create_publisher(DiagnosticStatus, topic, LATCHED)
        return self._pubs[name]
