"""TF lookups for the node: `tf2_ros.Buffer` + `TransformListener` when importable, else `TfBuffer`
(tf_buffer.py) fed by subscriptions to `/tf` and `/tf_static` with tf2_ros's QoS.

`TfLookup.lookup(target, source, stamp_s, timeout_s)` returns `T_target_source` [4, 4] or raises
`TransformUnavailable` naming the missing edge, after waiting up to `timeout_s` for the data (the caller's
thread sleeps; the subscriptions run on the executor's other threads).
"""

from __future__ import annotations

import time

import numpy as np
from geometry_msgs.msg import Transform
from rclpy.callback_groups import ReentrantCallbackGroup
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy

try:
    from tf2_msgs.msg import TFMessage
except ImportError:  # PyPI wheels without tf2_msgs (scripts/build_tf2_msgs.py): no robot TF can be read
    TFMessage = None

from ..engine.geometry import pose_from_quat
from .tf import TF_QOS
from .tf_buffer import TfBuffer, TransformUnavailable

try:  # pragma: no cover - only on a real ROS install
    import tf2_ros
    from rclpy.duration import Duration
    from rclpy.time import Time as RclTime
except ImportError:
    tf2_ros = None

#: /tf_static as tf2_ros subscribes it (`StaticListenerQoS`).
TF_STATIC_QOS = QoSProfile(depth=100, history=HistoryPolicy.KEEP_LAST, reliability=ReliabilityPolicy.RELIABLE,
                           durability=DurabilityPolicy.TRANSIENT_LOCAL)
POLL_S = 0.005

__all__ = ["TfLookup", "TransformUnavailable", "transform_to_matrix"]


def transform_to_matrix(tf: Transform) -> np.ndarray:
    """geometry_msgs/Transform -> [4, 4] float64."""
    t, q = tf.translation, tf.rotation
    return pose_from_quat([t.x, t.y, t.z], [q.x, q.y, q.z, q.w])


class TfLookup:
    """TF listener of `node` (module doc). `use_tf2_ros=False` forces the package's own buffer (tests)."""

    def __init__(self, node: Node, use_tf2_ros: bool = True, cache_s: float = 10.0) -> None:
        self._node = node
        self._subs = []
        self._tf2 = None
        if use_tf2_ros and tf2_ros is not None:  # pragma: no cover - only on a real ROS install
            self._tf2 = tf2_ros.Buffer(cache_time=Duration(seconds=cache_s))
            self._listener = tf2_ros.TransformListener(self._tf2, node, spin_thread=False)
            self.buffer = None
            return
        self.buffer = TfBuffer(cache_s)
        if TFMessage is None:
            node.get_logger().error(
                "neither tf2_ros nor tf2_msgs is importable: the robot's TF cannot be read, so tf.mode auto "
                "maps as a bare camera and the robot modes drop every frame (tf_unavailable); build tf2_msgs "
                "with scripts/build_tf2_msgs.py"
            )
            return
        group = ReentrantCallbackGroup()
        self._subs = [
            node.create_subscription(TFMessage, "/tf", self._on_tf, TF_QOS, callback_group=group),
            node.create_subscription(TFMessage, "/tf_static", self._on_static, TF_STATIC_QOS,
                                     callback_group=group),
        ]

    def _on_tf(self, msg: TFMessage) -> None:
        self._store(msg, static=False)

    def _on_static(self, msg: TFMessage) -> None:
        self._store(msg, static=True)

    def _store(self, msg: TFMessage, static: bool) -> None:
        for tf in msg.transforms:
            stamp = tf.header.stamp.sec + 1e-9 * tf.header.stamp.nanosec
            self.buffer.set_transform(tf.header.frame_id, tf.child_frame_id, stamp,
                                      transform_to_matrix(tf.transform), static)

    def lookup(self, target: str, source: str, stamp_s: float, timeout_s: float) -> np.ndarray:
        """`T_target_source` at `stamp_s`, waiting up to `timeout_s`.

        Raises:
            TransformUnavailable: still missing after the timeout (its `edge` names what is missing).
        """
        if self._tf2 is not None:  # pragma: no cover - only on a real ROS install
            try:
                tf = self._tf2.lookup_transform(target, source, RclTime(nanoseconds=int(stamp_s * 1e9)),
                                                Duration(seconds=timeout_s))
            except (tf2_ros.LookupException, tf2_ros.ExtrapolationException,
                    tf2_ros.ConnectivityException) as exc:
                raise TransformUnavailable(str(exc), f"{target} -> {source}") from exc
            return transform_to_matrix(tf.transform)
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                return self.buffer.lookup(target, source, stamp_s)
            except TransformUnavailable:
                if time.monotonic() >= deadline:
                    raise
            time.sleep(POLL_S)

    def destroy(self) -> None:
        for sub in self._subs:
            self._node.destroy_subscription(sub)
        self._subs = []
        self._tf2 = None
