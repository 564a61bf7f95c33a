"""One camera's TF edge on the wire (docs/robot.md "TF modes"): the edge of each posed frame and the
`map -> odom` republish. The policy (the TF mode of each stream, the `auto` switch, a URDF gap, the
`map -> odom` estimate) is the engine's `CameraTracker` (engine/tracker.py); this publishes what it decided.

* `publish`: the edge of a tracked frame, through the node's one-parent check (tf/broadcaster.py,
  engine/mapping/tf_tree.py): `map -> odom`, `map -> base`, or in `map_to_camera` the inverted edge
  `<root> -> map` the tracker built (`TrackedFrame.root_map`: the camera, or its subtree's root).
  `map -> odom` is stamped image + `tf.transform_tolerance`, the stream's first one also at the image
  stamp (so the first frame's own `map -> optical` lookup at its stamp succeeds).
* `republish`: the timer (`tf.publish_rate`): the tracker's latest `T_map_odom` stamped now +
  `tf.transform_tolerance` on the node's clock (the bag's `/clock` under `use_sim_time`; nothing while that
  clock is still 0), as slam_toolbox and RTAB-Map do. The estimate has its own lock: the timer never holds
  the pose path's.
"""

from __future__ import annotations

import time

from builtin_interfaces.msg import Time
from geometry_msgs.msg import Pose
from rclpy.node import Node

from ...engine.face import CameraTracker, TfEdgeGuard, TfMode, TrackedFrame
from ..messages.poses import seconds_stamp, transform_msg
from ..outputs.config import OutputConfig
from .broadcaster import TfBroadcaster

#: How long a refused edge keeps /diagnostics at WARN after the last refusal.
REFUSED_WARN_S = 10.0


class CameraTf:
    """The TF side of one camera's outputs (module doc).

    Args:
        node: the node (or its `NodeFacade`): logger, clock, the /tf publisher.
        config: the outputs' options (frames, `tf.*`, `publish_robot_tf`); `config` may be swapped live.
        tracker: the camera's `CameraTracker` (TF mode, URDF gap, the `map -> odom` estimate).
        guard: the node's one-parent check (None: one of its own).
        name: the publisher's name in the guard's messages (the camera).
    """

    def __init__(
        self, node: Node, config: OutputConfig, tracker: CameraTracker, guard: TfEdgeGuard | None, name: str
    ) -> None:
        self._node = node
        self.config = config
        self.tracker = tracker
        self._tf = TfBroadcaster(node, guard=guard, name=name, on_refused=self._refused)
        self._reported: dict[str, str] = {}  # edge -> the refusal last logged for it
        self._last_refusal: tuple[float, str] | None = None

    @property
    def guard(self) -> TfEdgeGuard:
        """The one-parent check the edges go through (its `foreign_graph` is the tracker's TF graph)."""
        return self._tf.guard

    def release(self) -> None:
        """A new stream (new epoch or reset): this camera's edges are free for another publisher."""
        self._tf.release()

    # ------------------------------------------------------------------------------------------ edges
    def publish(self, tracked: TrackedFrame, body: Pose, stamp: Time, map_frame: str) -> None:
        """The TF edge of a tracked frame (`body`: its body pose message; `stamp`: the image stamp)."""
        cfg, frame = self.config, tracked.frame
        if frame.map_odom is not None:
            if frame.mode == TfMode.MAP_TO_ODOM and cfg.publish_robot_tf:
                stamps = [stamp] if tracked.first_map_odom else []
                stamps.append(seconds_stamp(frame.stamp_s + cfg.tf_transform_tolerance))
                self._tf.send([transform_msg(frame.map_odom, s, map_frame, cfg.odom_frame) for s in stamps])
        elif frame.mode == TfMode.MAP_TO_BASE and cfg.publish_robot_tf:
            self._tf.send(transform_msg(body, stamp, map_frame, cfg.base_frame))
        elif frame.mode == TfMode.MAP_TO_CAMERA and tracked.root_map is not None:
            self._tf.send(transform_msg(tracked.root_map, stamp, tracked.root, map_frame))

    def republish(self) -> None:
        """Timer (`tf.publish_rate`): the latest T_map_odom stamped now + `tf.transform_tolerance`."""
        cfg = self.config
        map_odom = self.tracker.estimate()
        if map_odom is None or not cfg.publish_robot_tf:
            return
        now_ns = self._node.get_clock().now().nanoseconds
        if now_ns <= 0:  # use_sim_time before the first /clock
            return
        stamp = seconds_stamp(now_ns * 1e-9 + cfg.tf_transform_tolerance)
        self._tf.send(transform_msg(map_odom, stamp, cfg.map_frame, cfg.odom_frame))

    # ---------------------------------------------------------------------------------- diagnostics
    def _refused(self, edge: str, reason: str) -> None:
        self._last_refusal = (time.monotonic(), f"TF edge {edge} not published: {reason}")
        if self._reported.get(edge) != reason:  # once per edge and reason (the republish runs at 20 Hz)
            self._reported[edge] = reason
            self._node.get_logger().warning(f"not publishing TF {edge}: {reason}")

    def warnings(self) -> list[str]:
        """What keeps /diagnostics at WARN: a URDF gap, an edge refused within `REFUSED_WARN_S`."""
        gap = self.tracker.gap
        out = [f"TF gap: {gap}"] if gap else []
        refusal = self._last_refusal
        if refusal is not None and time.monotonic() - refusal[0] < REFUSED_WARN_S:
            out.append(refusal[1])
        return out

    def stats(self) -> dict[str, object]:
        """/diagnostics values: `tf_mode_reason`, `tf_mode_switches`, `tf_edges_refused`, `tf_gap`."""
        tracker = self.tracker
        return {
            "tf_mode_reason": tracker.mode_reason,
            "tf_mode_switches": tracker.switches,
            "tf_edges_refused": self._tf.refused,
            "tf_gap": tracker.gap,
        }

    def update_config(self, config: OutputConfig) -> None:
        self.config = config

    def destroy(self) -> None:
        self._tf.destroy()
