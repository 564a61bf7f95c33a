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
destroyed with the node when its context shuts down, after spinning has stopped (ros/lifecycle/shutdown.py).

`guard_callback` is the one guard of a callback: an exception that escapes a callback would end the
executor's spin and with it the node (issue 19: a zero quaternion on /tf did). It is counted and logged
(`failed_<where>_<ExceptionType>`, once then at most every 10 s) and the callback returns its fallback (a
service: `service_failure`, its response with `success: false` and the reason). `CallbackGuard` applies it to
every subscription, timer and service callback created on the node (rclpy's own parameter and lifecycle
services included); the node's own callbacks apply it where they give a failure its own name or answer (the
services, the timers, the parameter callbacks). The node's callbacks keep their own handling (rejections,
failures by cause); the guard is the net below them.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import threading
from collections.abc import Callable
from typing import Any

from rcl_interfaces.msg import SetParametersResult
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
        self.create_publisher = kept.publisher  # the node's signatures: (msg_type, topic, qos, **kwargs)
        self.create_subscription = kept.subscription  # (msg_type, topic, callback, qos, **kwargs)

    def destroy_publisher(self, publisher: Any) -> bool:
        return True  # kept until the node is destroyed at shutdown

    def destroy_subscription(self, subscription: Any) -> bool:
        return True

    def __getattr__(self, name: str) -> Any:
        return getattr(self._node, name)


def guard_callback(
    where: str,
    callback: Callable[..., Any],
    on_error: Callable[[str, Exception], None],
    fallback: Callable[..., Any] | None = None,
) -> Callable[..., Any]:
    """`callback` that never raises an `Exception`: `on_error(where, exc)`, then `fallback(exc, *args)`."""

    def failed(exc: Exception, args: tuple) -> Any:
        with contextlib.suppress(Exception):  # reporting must not raise either (the logger at shutdown)
            on_error(where, exc)
        return fallback(exc, *args) if fallback is not None else None

    if inspect.iscoroutinefunction(callback):

        @functools.wraps(callback)
        async def guarded_async(*args: Any) -> Any:
            try:
                return await callback(*args)
            except Exception as exc:  # noqa: BLE001 - the guard's purpose
                return failed(exc, args)

        return guarded_async

    @functools.wraps(callback)
    def guarded(*args: Any) -> Any:
        try:
            return callback(*args)
        except Exception as exc:  # noqa: BLE001 - the guard's purpose
            return failed(exc, args)

    return guarded


def service_failure(what: str | None = None) -> Callable[..., Any]:
    """The `guard_callback` fallback of a service: its response with `success: false` and the reason as
    message, `"<what> failed: <Type>: <exc>"` (without `what`: `"<Type>: <exc>"`)."""
    prefix = f"{what} failed: " if what else ""

    def answer(exc: Exception, request: Any = None, response: Any = None, *rest: Any) -> Any:
        if hasattr(response, "success"):
            response.success = False
        if hasattr(response, "message"):
            response.message = f"{prefix}{type(exc).__name__}: {exc}"
        return response

    return answer


def parameters_refused(exc: Exception, params: list[Any]) -> SetParametersResult:
    """The `guard_callback` fallback of the node's set-parameters check: the update rejected with the
    reason."""
    return SetParametersResult(successful=False, reason=f"{type(exc).__name__}: {exc}")


def _name(text: str) -> str:
    return text.strip("~/").replace("/", "_") or "root"


class CallbackGuard:
    """Mixin of a node class, before rclpy's `Node` in its bases: every subscription, timer and service
    callback created on the node is wrapped by `guard_callback`; failures go to `callback_failed`."""

    def callback_failed(self, where: str, exc: Exception) -> None:
        self.get_logger().error(f"{where} failed: {type(exc).__name__}: {exc}", throttle_duration_sec=10.0)

    def _report(self, where: str, exc: Exception) -> None:
        self.callback_failed(where, exc)

    def create_subscription(
        self, msg_type: Any, topic: str, callback: Callable[..., Any], *args: Any, **kwargs: Any
    ) -> Any:
        guarded = guard_callback(f"subscription_{_name(topic)}", callback, self._report)
        return super().create_subscription(msg_type, topic, guarded, *args, **kwargs)

    def create_timer(
        self, timer_period_sec: float, callback: Callable[..., Any] | None, *args: Any, **kwargs: Any
    ) -> Any:
        if callback is not None:
            name = getattr(callback, "__name__", "callback")
            callback = guard_callback(f"timer_{_name(name)}", callback, self._report)
        return super().create_timer(timer_period_sec, callback, *args, **kwargs)

    def create_service(
        self, srv_type: Any, srv_name: str, callback: Callable[..., Any], *args: Any, **kwargs: Any
    ) -> Any:
        guarded = guard_callback(f"service_{_name(srv_name)}", callback, self._report, service_failure())
        return super().create_service(srv_type, srv_name, guarded, *args, **kwargs)
