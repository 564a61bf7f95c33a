"""QoS of the generic (any message type) endpoints the tools open: replay's publishers, record's
subscriptions."""

from __future__ import annotations

from rclpy.qos import (
    DurabilityPolicy,
    HistoryPolicy,
    QoSProfile,
    ReliabilityPolicy,
    qos_profile_sensor_data,
)

QOS_CHOICES = ("reliable", "sensor")


def publisher_qos(kind: str, depth: int = 10) -> QoSProfile:
    """`reliable` (volatile, keep last `depth`) or `sensor` (ROS sensor-data: best effort, keep last 5)."""
    if kind == "sensor":
        return qos_profile_sensor_data
    if kind == "reliable":
        return QoSProfile(
            history=HistoryPolicy.KEEP_LAST,
            depth=depth,
            reliability=ReliabilityPolicy.RELIABLE,
            durability=DurabilityPolicy.VOLATILE,
        )
    raise ValueError(f"QoS must be one of {QOS_CHOICES}, got {kind!r}")


def matching_subscription_qos(offered: list[QoSProfile], depth: int = 100) -> QoSProfile:
    """The strongest QoS a subscriber can request and still match every offered publisher QoS
    (what `ros2 bag record` does): reliable only if all offer it, transient local only if all offer it."""
    reliable = bool(offered) and all(q.reliability == ReliabilityPolicy.RELIABLE for q in offered)
    latched = bool(offered) and all(q.durability == DurabilityPolicy.TRANSIENT_LOCAL for q in offered)
    return QoSProfile(
        history=HistoryPolicy.KEEP_LAST,
        depth=depth,
        reliability=ReliabilityPolicy.RELIABLE if reliable else ReliabilityPolicy.BEST_EFFORT,
        durability=DurabilityPolicy.TRANSIENT_LOCAL if latched else DurabilityPolicy.VOLATILE,
    )
