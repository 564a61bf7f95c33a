"""TF broadcasting: tf2_ros when importable, else an equivalent publisher of tf2_msgs/TFMessage on /tf.

`tf2_ros.TransformBroadcaster` publishes `TFMessage` on `/tf` with a depth-100 reliable, volatile QoS;
`TfBroadcaster` below does exactly that when tf2_ros is missing (the PyPI ROS wheels lack it), so listeners
such as RViz and `tf2_echo` cannot tell the difference. Every edge it sends is checked first by the node's
one `TfEdgeGuard` (engine/mapping/tf_tree.py: one parent per frame); a refused edge is not sent, counted and
reported (`on_refused`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from geometry_msgs.msg import TransformStamped
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy

from ...engine.face import TfEdgeGuard, TfGraph

try:
    from tf2_msgs.msg import TFMessage
except ImportError:  # PyPI wheels without the tf2_msgs of scripts/build_tf2_msgs.py (a bare GPU machine)
    TFMessage = None

try:  # pragma: no cover - only on a real ROS install
    from tf2_ros import TransformBroadcaster as _Tf2RosBroadcaster
except ImportError:
    _Tf2RosBroadcaster = None

#: QoS of /tf as tf2_ros uses it (`tf2_ros.DynamicBroadcasterQoS`).
TF_QOS = QoSProfile(
    depth=100,
    history=HistoryPolicy.KEEP_LAST,
    reliability=ReliabilityPolicy.RELIABLE,
    durability=DurabilityPolicy.VOLATILE,
)


class TfBroadcaster:
    """Send `TransformStamped`s on `/tf` through tf2_ros or the package's own TFMessage publisher.

    Args:
        node: the node (or its `NodeFacade`).
        guard: the node's one-parent check (None: a guard of its own that sees no TF, for tools and tests).
        name: who publishes, in the guard's messages (e.g. the camera).
        on_refused: `(edge "parent -> child", reason)` of every edge the guard refused.
    """

    def __init__(
        self,
        node: Node,
        use_tf2_ros: bool = True,
        guard: TfEdgeGuard | None = None,
        name: str = "camera",
        on_refused: Callable[[str, str], None] | None = None,
    ) -> None:
        self._node = node
        self.guard = guard if guard is not None else TfEdgeGuard(TfGraph())
        self.name = name
        self._on_refused = on_refused or (lambda edge, reason: None)
        self.refused = 0  # edges not sent (the guard's refusals)
        self._tf2 = _Tf2RosBroadcaster(node) if (use_tf2_ros and _Tf2RosBroadcaster is not None) else None
        self._pub = None
        if self._tf2 is None and TFMessage is None:
            node.get_logger().error(
                "neither tf2_ros nor tf2_msgs is importable: /tf is NOT published (odometry is); build "
                "tf2_msgs with scripts/build_tf2_msgs.py"
            )
        elif self._tf2 is None:
            self._pub = node.create_publisher(TFMessage, "/tf", TF_QOS)

    def send(self, transforms: TransformStamped | Sequence[TransformStamped]) -> None:
        """Publish one transform or several at once (one TFMessage), each edge the guard allows."""
        batch = []
        for tf in [transforms] if isinstance(transforms, TransformStamped) else transforms:
            problem = self.guard.check(tf.header.frame_id, tf.child_frame_id, self.name)
            if problem is None:
                batch.append(tf)
            else:
                self.refused += 1
                self._on_refused(f"{tf.header.frame_id} -> {tf.child_frame_id}", problem)
        if not batch:
            return
        if self._tf2 is not None:  # pragma: no cover - only on a real ROS install
            self._tf2.sendTransform(batch)
        elif self._pub is not None:
            self._pub.publish(TFMessage(transforms=batch))

    def release(self) -> None:
        """Its edges are no longer published (a new stream): other publishers of the node may take them."""
        self.guard.release(self.name)

    def destroy(self) -> None:
        """Release the publisher (deactivate/cleanup)."""
        self.release()
        if self._pub is not None:
            self._node.destroy_publisher(self._pub)
            self._pub = None
        self._tf2 = None
