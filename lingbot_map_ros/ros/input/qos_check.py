"""A QoS mismatch on an input topic, said so a user can fix it (issue 29): rclpy's own warning named only
`image` and neither profile. `incompatible_qos_warning` gives a subscription's event callbacks whose
requested-incompatible-QoS event logs ONE WARN per topic and policy naming the resolved topic, the node's
QoS, each publisher's offered QoS and the parameter (and launch argument) that fixes it."""

from __future__ import annotations

from rclpy.event_handler import QoSRequestedIncompatibleQoSInfo, SubscriptionEventCallbacks
from rclpy.node import Node
from rclpy.qos import QoSPolicyKind, QoSProfile


def describe(qos: QoSProfile) -> str:
    """`reliability/durability` of a profile, as ROS names them (`best_effort/volatile`)."""
    return f"{qos.reliability.name.lower()}/{qos.durability.name.lower()}"


def incompatible_qos_warning(node: Node, topic: str, qos: QoSProfile) -> SubscriptionEventCallbacks:
    """Event callbacks for the subscription of `topic` (relative or absolute) with `qos` (module doc)."""
    resolved = node.resolve_topic_name(topic)
    warned: set[int] = set()

    def on_incompatible(event: QoSRequestedIncompatibleQoSInfo) -> None:
        policy = QoSPolicyKind(event.last_policy_kind)
        if policy.value in warned:
            return
        warned.add(policy.value)
        offered = ", ".join(
            describe(info.qos_profile) for info in node.get_publishers_info_by_topic(resolved)
        )
        text = (
            f"QoS mismatch on {resolved} ({policy.name.lower()}): this node subscribes {describe(qos)}, the "
            f"publisher(s) offer {offered or 'an incompatible profile'}; no message arrives"
        )
        if policy == QoSPolicyKind.RELIABILITY:
            text += (
                "; set the parameter qos.reliability to best_effort (launch: qos_reliability:=best_effort)"
            )
        node.get_logger().warning(text)

    return SubscriptionEventCallbacks(incompatible_qos=on_incompatible)
