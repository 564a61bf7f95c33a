"""TF broadcasting: tf2_ros when importable, else an equivalent publisher of tf2_msgs/TFMessage on /tf.

`tf2_ros.TransformBroadcaster` publishes `TFMessage` on `/tf` with a depth-100 reliable, volatile QoS;
`TfBroadcaster` below does exactly that when tf2_ros is missing (the PyPI ROS wheels lack it), so listeners
such as RViz and `tf2_echo` cannot tell the difference.
"""

from __future__ import annotations

from collections.abc import Sequence

from geometry_msgs.msg import TransformStamped
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy

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
    """Send `TransformStamped`s on `/tf` through tf2_ros or the package's own TFMessage publisher."""

    def __init__(self, node: Node, use_tf2_ros: bool = True) -> None:
        self._node = node
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
        """Publish one transform or several at once (one TFMessage)."""
        batch = [transforms] if isinstance(transforms, TransformStamped) else list(transforms)
        if self._tf2 is not None:  # pragma: no cover - only on a real ROS install
            self._tf2.sendTransform(batch)
        elif self._pub is not None:
            self._pub.publish(TFMessage(transforms=batch))

    def destroy(self) -> None:
        """Release the publisher (deactivate/cleanup)."""
        if self._pub is not None:
            self._node.destroy_publisher(self._pub)
            self._pub = None
        self._tf2 = None
