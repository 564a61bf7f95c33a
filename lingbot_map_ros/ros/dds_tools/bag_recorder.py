"""`RawTopicSubscriber`: the DDS side of `lingbot-map-ros record` (tools/live/record.py writes the bag).

Generic raw subscriptions to a set of topics, opened as the topics appear on the graph (type taken from the
graph) with the QoS that matches every offered publisher (as `ros2 bag record` does). Each message is handed
on as its serialised bytes with its receive time on the node's clock.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection

from rclpy.node import Node
from rclpy.subscription import Subscription

from lingbot_map_ros.ros.dds_tools.message_types import message_class
from lingbot_map_ros.ros.dds_tools.qos import matching_subscription_qos

# (topic, message type such as "nav_msgs/msg/Odometry", serialised CDR bytes, receive time in ns)
RawMessageCallback = Callable[[str, str, bytes, int], None]


class RawTopicSubscriber:
    """Subscribes on `node` (spun by the caller) to each of `topics` (fully qualified) once a publisher
    offers it, looking every `discovery_period_s`; calls `on_message` from the executor's threads.
    `close()` stops discovering and destroys the subscriptions."""

    def __init__(
        self,
        node: Node,
        topics: Collection[str],
        on_message: RawMessageCallback,
        discovery_period_s: float = 0.1,
    ) -> None:
        self._node = node
        self._topics = frozenset(topics)
        self._on_message = on_message
        self._lock = threading.Lock()
        self._closed = False
        self._subscriptions: dict[str, Subscription] = {}
        self._timer = node.create_timer(discovery_period_s, self.discover)
        self.discover()

    def discover(self) -> None:
        """Subscribe to the wanted topics that publishers now offer (the timer calls this)."""
        with self._lock:
            if self._closed:  # a timer callback may still be in flight after close()
                return
            for name, types in self._node.get_topic_names_and_types():
                if name not in self._topics or name in self._subscriptions or not types:
                    continue
                offered = [info.qos_profile for info in self._node.get_publishers_info_by_topic(name)]
                if not offered:
                    continue
                msgtype = types[0]
                self._subscriptions[name] = self._node.create_subscription(
                    message_class(msgtype),
                    name,
                    lambda data, topic=name, kind=msgtype: self._received(topic, kind, data),
                    matching_subscription_qos(offered),
                    raw=True,
                )

    def _received(self, topic: str, msgtype: str, data: bytes) -> None:
        self._on_message(topic, msgtype, data, self._node.get_clock().now().nanoseconds)

    def close(self) -> None:
        """Stop discovering and unsubscribe. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._node.destroy_timer(self._timer)
            for sub in self._subscriptions.values():
                self._node.destroy_subscription(sub)
