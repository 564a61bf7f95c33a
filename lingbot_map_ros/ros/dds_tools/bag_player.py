"""`BagPlayer`: the DDS side of `lingbot-map-ros replay` (tools/live/replay.py reads the bag).

Publishers of serialised messages (CDR bytes as a bag stores them, published unchanged, so header stamps are
untouched) on a node someone else may spin, paced by the messages' recorded log times, and the final wait
until every reliable subscriber acknowledged everything, so nothing queued is lost when the process exits.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping

from rclpy.duration import Duration
from rclpy.node import Node
from rclpy.publisher import Publisher

from lingbot_map_ros.ros.dds_tools.message_types import message_class
from lingbot_map_ros.ros.dds_tools.qos import publisher_qos


class BagPlayer:
    """One publisher per topic of `topics` (published name -> type such as `sensor_msgs/msg/Image`) with
    the QoS `qos` (`reliable` with history `depth`, or `sensor`; see `ros.dds_tools.qos.publisher_qos`).

    `published` counts the messages sent per topic, `publish_times_ns` holds when each went out (system
    time, ns, in order). `close()` destroys the publishers."""

    def __init__(self, node: Node, topics: Mapping[str, str], qos: str = "reliable", depth: int = 10) -> None:
        self._node = node
        self._publishers: dict[str, Publisher] = {}
        try:
            profile = publisher_qos(qos, depth)
            for name, msgtype in topics.items():
                self._publishers[name] = node.create_publisher(message_class(msgtype), name, profile)
        except BaseException:
            self.close()
            raise
        self.published = dict.fromkeys(self._publishers, 0)
        self.publish_times_ns: dict[str, list[int]] = {name: [] for name in self._publishers}

    def wait_for_subscribers(self, topics: Iterable[str] | None, timeout_s: float) -> None:
        """Block until every publisher of `topics` (None: all) has a subscriber or `timeout_s` passed
        (0: no wait); on timeout, log which topics have none and return (playing anyway)."""
        awaited = {name: pub for name, pub in self._publishers.items() if topics is None or name in topics}
        deadline = time.monotonic() + timeout_s
        while timeout_s > 0 and time.monotonic() < deadline:
            if all(p.get_subscription_count() > 0 for p in awaited.values()):
                return
            time.sleep(0.05)
        if timeout_s > 0:
            lonely = [n for n, p in awaited.items() if p.get_subscription_count() == 0]
            self._node.get_logger().warning(
                f"no subscriber after {timeout_s:g} s on {lonely}; playing anyway"
            )

    def play(
        self,
        messages: Iterable[tuple[str, int, bytes | memoryview]],
        start_ns: int,
        rate: float,
        on_publish: Callable[[], None],
    ) -> None:
        """One pass: publish each `(topic, log_time_ns, raw)` at `(log_time_ns - start_ns) / rate` seconds
        after the call (sleeping until then; late messages go out at once), then call `on_publish()`."""
        pass_start = time.monotonic()
        for name, log_time, raw in messages:
            delay = pass_start + (log_time - start_ns) / 1e9 / rate - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            self._publishers[name].publish(bytes(raw))
            self.publish_times_ns[name].append(time.time_ns())
            self.published[name] += 1
            on_publish()

    def wait_for_all_acked(self, timeout_s: float) -> bool:
        """True once every reliable subscriber of every topic acknowledged everything (`timeout_s` each)."""
        return all(p.wait_for_all_acked(Duration(seconds=timeout_s)) for p in self._publishers.values())

    def close(self) -> None:
        """Destroy the publishers."""
        for pub in self._publishers.values():
            self._node.destroy_publisher(pub)
        self._publishers.clear()
