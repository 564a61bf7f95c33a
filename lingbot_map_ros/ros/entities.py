"""Entities that live as long as the node: created once, reused on every activate, never destroyed while the
executor spins.

Destroying a subscription, timer, service or publisher (its QoS-event handler is a waitable) from one thread
while the executor's thread is building its wait set is a known rclpy race: `add_to_wait_set` raises
`InvalidHandle: cannot use Destroyable because destruction was requested` and ends `spin()` (issue 16: 3 of 4
runs of deactivate/activate under a 50 Hz stream). So the node keeps its entities: `KeptEntities` hands out
the same publisher or subscription for the same (type, topic, QoS) every time it is asked, `NodeFacade` makes
that transparent to code written for a `Node` (`MappingOutputs`, `TfBroadcaster`, `FrameIntake.subscribe`:
their `destroy_*` calls become no-ops), and the node gates the callbacks with its lifecycle state instead.
Topics therefore never vanish from the ROS graph on deactivate, as with lifecycle publishers. Everything is
destroyed with the node when its context shuts down, after spinning has stopped (ros/shutdown.py).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from rclpy.node import Node
from rclpy.qos import QoSProfile


def _qos_key(qos: QoSProfile | int) -> tuple:
    """A hashable identity of a QoS profile (or a plain depth)."""
    if isinstance(qos, int):
        return ("depth", qos)
    durations = (qos.deadline, qos.lifespan, qos.liveliness_lease_duration)
    return (
        qos.history,
        qos.depth,
        qos.reliability,
        qos.durability,
        qos.liveliness,
        *(getattr(d, "nanoseconds", d) for d in durations),
    )


class KeptEntities:
    """Publishers and subscriptions of `node`, created on first request and kept until the node is destroyed.

    Args:
        node: the node that owns them.
    """

    def __init__(self, node: Node) -> None:
        self._node = node
        self._lock = threading.Lock()
        self._publishers: dict[tuple, Any] = {}
        self._subscriptions: dict[tuple, Any] = {}

    def publisher(self, msg_type: type, topic: str, qos: QoSProfile | int, **kwargs: Any) -> Any:
        """The node's publisher of `msg_type` on `topic` with `qos` (created once)."""
        key = (msg_type, topic, _qos_key(qos))
        with self._lock:
            if key not in self._publishers:
                self._publishers[key] = self._node.create_publisher(msg_type, topic, qos, **kwargs)
            return self._publishers[key]

    def subscription(
        self,
        msg_type: type,
        topic: str,
        callback: Callable[[Any], None],
        qos: QoSProfile | int,
        **kwargs: Any,
    ) -> Any:
        """The node's subscription of `msg_type` on `topic` with `qos` (created once, with the first
        `callback`; callers pass a callback that lives as long as the node and gates itself)."""
        key = (msg_type, topic, _qos_key(qos))
        with self._lock:
            if key not in self._subscriptions:
                self._subscriptions[key] = self._node.create_subscription(
                    msg_type, topic, callback, qos, **kwargs
                )
            return self._subscriptions[key]

    @property
    def counts(self) -> tuple[int, int]:
        """(publishers, subscriptions) created so far (tests: repeated activations create none)."""
        with self._lock:
            return len(self._publishers), len(self._subscriptions)


class NodeFacade:
    """A stand-in for `node` whose `create_publisher`/`create_subscription` return kept entities and whose
    `destroy_publisher`/`destroy_subscription` do nothing; every other attribute is the node's."""

    def __init__(self, node: Node, kept: KeptEntities) -> None:
        self._node = node
        self._kept = kept

    def create_publisher(self, msg_type: type, topic: str, qos: QoSProfile | int, **kwargs: Any) -> Any:
        return self._kept.publisher(msg_type, topic, qos, **kwargs)

    def create_subscription(
        self,
        msg_type: type,
        topic: str,
        callback: Callable[[Any], None],
        qos: QoSProfile | int,
        **kwargs: Any,
    ) -> Any:
        return self._kept.subscription(msg_type, topic, callback, qos, **kwargs)

    def destroy_publisher(self, publisher: Any) -> bool:
        return True  # kept until the node is destroyed at shutdown

    def destroy_subscription(self, subscription: Any) -> bool:
        return True

    def __getattr__(self, name: str) -> Any:
        return getattr(self._node, name)
