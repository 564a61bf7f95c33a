"""One camera's TF edge (docs/robot.md "TF modes"): the mode of each stream, the `auto` switch, the edge, and
the `map -> odom` estimate republished by the node's timer.

* `start_stream`: the mode of a new stream (robot_tf.py `resolve_mode`); in `map_to_camera` the frame `map`
  is attached to: the camera, or the root of the camera's own subtree when the camera already has a parent
  in TF (a URDF gap: `camera_link -> camera_optical` without `base_link -> camera_link`), with a WARN and
  /diagnostics naming the missing link.
* `sample`: the transforms of one frame; in `auto`, a stream in `map_to_base` whose odometry appeared is
  handed over as `map_to_odom` (the caller switches the mapper: `T_map_odom = T_map_base · T_odom_base⁻¹`, no
  jump in `map`; `switched` logs it). From then on `map -> base` is no longer published.
* `publish`: the edge of a posed frame, through the node's one-parent check (tf.py, engine/tf_tree.py).
  `map -> odom` is stamped image + `tf.transform_tolerance`, the first one of a stream also at the image
  stamp (so the first frame's own `map -> optical` lookup at its stamp succeeds).
* `republish`: the timer (`tf.publish_rate`): the latest `T_map_odom` stamped now + `tf.transform_tolerance`
  on the node's clock (the bag's `/clock` under `use_sim_time`; nothing while that clock is still 0), as
  slam_toolbox and RTAB-Map do. The estimate has its own lock: the timer never holds the pose path's.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import replace

import numpy as np
from builtin_interfaces.msg import Time
from geometry_msgs.msg import Pose
from rclpy.node import Node

from ..engine.geometry import invert_rigid
from ..engine.mapper import PosedFrame, RobotSample
from ..engine.tf_tree import TfEdgeGuard, subtree_root
from .geometry import seconds_stamp, transform_msg
from .output_config import OutputConfig
from .robot_tf import RobotFrames, RobotTfConfig
from .tf import TfBroadcaster
from .tf_listener import TfLookup

#: How long a refused edge keeps /diagnostics at WARN after the last refusal.
REFUSED_WARN_S = 10.0


class CameraTf:
    """The TF side of one camera's outputs (module doc).

    Args:
        node: the node (or its `NodeFacade`): logger, clock, the /tf publisher.
        config: the outputs' options (frames, `tf.*`, `publish_robot_tf`); `config` may be swapped live.
        lookup: the node's TF lookups.
        guard: the node's one-parent check (None: one of its own).
        name: the publisher's name in the guard's messages (the camera).
    """

    def __init__(
        self, node: Node, config: OutputConfig, lookup: TfLookup, guard: TfEdgeGuard | None, name: str
    ) -> None:
        self._node = node
        self.config = config
        self._tf = TfBroadcaster(node, guard=guard, name=name, on_refused=self._refused)
        self.robot = RobotFrames(
            lookup,
            RobotTfConfig(
                config.tf_mode,
                config.base_frame,
                config.odom_frame,
                config.tf_timeout,
                odometry_scale=config.scale.source == "odometry",
            ),
        )
        self._estimate_lock = threading.Lock()  # the latest T_map_odom only (slam_toolbox's map_to_odom_)
        self._map_odom: np.ndarray | None = None
        self._sent = False  # map -> odom published in this stream (the first is also at the image stamp)
        self.mode_reason = ""
        self._logged_mode: tuple[str, str] | None = None
        self.root: str | None = None  # map_to_camera: the child of the edge (the camera or its subtree root)
        self.gap = ""  # the missing link of a URDF gap, for /diagnostics
        self.switches = 0
        self._reported: dict[str, str] = {}  # edge -> the refusal last logged for it
        self._last_refusal: tuple[float, str] | None = None

    # ------------------------------------------------------------------------------------------ streams
    def start_stream(self, camera: str, stamp_s: float) -> str:
        """The TF mode of a stream whose first frame has `camera` and `stamp_s` (module doc)."""
        mode, reason = self.robot.resolve_mode(camera, stamp_s)
        self.root, self.gap = camera, ""
        if mode == "map_to_camera":
            root = subtree_root(camera, self._tf.guard.foreign_graph())  # not above the node's own edges
            if root != camera:
                self.root = root
                self.gap = (
                    f"{self.config.base_frame} -> {root} is missing: '{camera}' is below '{root}' in TF "
                    f"(a URDF gap, or its publisher is not up yet), so map is attached above '{root}' "
                    f"(map -> {root}); ~/reset once the link is there"
                )
                reason = f"{reason}; {self.gap}"
        if (mode, reason) != self._logged_mode:  # once, not again for every frame dropped meanwhile
            log = self._node.get_logger()
            (log.warning if self.gap else log.info)(f"TF mode {mode} ({reason})")
            self._logged_mode = (mode, reason)
        self.mode_reason = reason
        return mode

    def sample(
        self, mode: str, camera: str, stamp_s: float, new_epoch: bool
    ) -> tuple[RobotSample, np.ndarray | None]:
        """(the transforms `mode` needs at `stamp_s`, T_root_cam [4, 4] of a map_to_camera edge attached to
        the camera's subtree root, else None). `robot.mode` becomes `map_to_odom` when odometry appeared in
        an `auto` stream in `map_to_base`.

        Raises:
            TransformUnavailable: a transform is missing after `tf.timeout`.
        """
        robot = self.robot.sample(mode, camera, stamp_s)
        root_cam = None
        if mode == "map_to_camera" and self.root not in (None, camera):
            root_cam = self.robot.root_pose(self.root, camera, stamp_s)
        if mode == "map_to_base" and not new_epoch and self.config.tf_mode == "auto":
            odom_base = self.robot.odometry_at(stamp_s)
            if odom_base is not None:
                robot = replace(robot, mode="map_to_odom", odom_base=odom_base)
        return robot, root_cam

    def switched(self, stamp_s: float) -> None:
        """The mapper went from `map_to_base` to `map_to_odom` at `stamp_s`: WARN and /diagnostics."""
        cfg = self.config
        self.switches += 1
        self.mode_reason = (
            f"{cfg.odom_frame} -> {cfg.base_frame} appeared in TF at {stamp_s:.3f} s: switched "
            f"from map_to_base (map unchanged)"
        )
        self._logged_mode = None
        self._node.get_logger().warning(
            f"TF mode map_to_base -> map_to_odom: {cfg.odom_frame} -> {cfg.base_frame} appeared in TF (image "
            f"{stamp_s:.3f} s); publishing map -> {cfg.odom_frame} = T_map_base · T_odom_base⁻¹ from now on "
            f"(no jump in map) and no more map -> {cfg.base_frame}"
        )

    def new_stream(self) -> None:
        """Forget the estimate (a new epoch or a reset); the next `map -> odom` is a stream's first."""
        with self._estimate_lock:
            self._map_odom = None
            self._sent = False
        self._tf.release()

    def clear(self) -> None:
        """A reset: a new stream that logs its TF mode again."""
        self.new_stream()
        self._logged_mode = None
        self.gap = ""

    # ------------------------------------------------------------------------------------------ edges
    def publish(
        self,
        frame: PosedFrame,
        body: Pose,
        cam: Pose,
        stamp: Time,
        map_frame: str,
        camera: str,
        root_cam: np.ndarray | None,
    ) -> None:
        """The TF edge of a posed frame (`body`, `cam`: its pose messages; `stamp`: the image stamp)."""
        cfg = self.config
        if frame.map_odom is not None:
            with self._estimate_lock:
                self._map_odom = frame.map_odom
                first, self._sent = not self._sent, True
            if frame.mode == "map_to_odom" and cfg.publish_robot_tf:
                stamps = [stamp] if first else []
                stamps.append(seconds_stamp(frame.stamp_s + cfg.tf_transform_tolerance))
                self._tf.send([transform_msg(frame.map_odom, s, map_frame, cfg.odom_frame) for s in stamps])
        elif frame.mode == "map_to_base" and cfg.publish_robot_tf:
            self._tf.send(transform_msg(body, stamp, map_frame, cfg.base_frame))
        elif frame.mode == "map_to_camera":
            if root_cam is None:
                self._tf.send(transform_msg(cam, stamp, map_frame, camera))
            else:
                map_root = frame.camera_pose @ invert_rigid(root_cam)
                self._tf.send(transform_msg(map_root, stamp, map_frame, self.root or camera))

    def republish(self) -> None:
        """Timer (`tf.publish_rate`): the latest T_map_odom stamped now + `tf.transform_tolerance`."""
        cfg = self.config
        with self._estimate_lock:
            map_odom = self._map_odom
        if map_odom is None or not cfg.publish_robot_tf:
            return
        now_ns = self._node.get_clock().now().nanoseconds
        if now_ns <= 0:  # use_sim_time before the first /clock
            return
        stamp = seconds_stamp(now_ns * 1e-9 + cfg.tf_transform_tolerance)
        self._tf.send(transform_msg(map_odom, stamp, cfg.map_frame, cfg.odom_frame))

    def estimate(self) -> np.ndarray | None:
        """The latest T_map_odom [4, 4] (None before one)."""
        with self._estimate_lock:
            return self._map_odom

    def jump(self, move: Callable[[np.ndarray], np.ndarray]) -> None:
        """A loop closure's correction: the estimate becomes `move(T_map_odom)` (republished by the timer
        from now on; the next frame's edge carries the same correction)."""
        with self._estimate_lock:
            if self._map_odom is not None:
                self._map_odom = move(self._map_odom)

    def restore(self, map_odom: np.ndarray | None) -> None:
        """A loaded session's T_map_odom: republished (stamped now) until the first frame gives a new one."""
        with self._estimate_lock:
            self._map_odom, self._sent = map_odom, False

    # ---------------------------------------------------------------------------------- diagnostics
    def _refused(self, edge: str, reason: str) -> None:
        self._last_refusal = (time.monotonic(), f"TF edge {edge} not published: {reason}")
        if self._reported.get(edge) != reason:  # once per edge and reason (the republish runs at 20 Hz)
            self._reported[edge] = reason
            self._node.get_logger().warning(f"not publishing TF {edge}: {reason}")

    def warnings(self) -> list[str]:
        """What keeps /diagnostics at WARN: a URDF gap, an edge refused within `REFUSED_WARN_S`."""
        out = [f"TF gap: {self.gap}"] if self.gap else []
        refusal = self._last_refusal
        if refusal is not None and time.monotonic() - refusal[0] < REFUSED_WARN_S:
            out.append(refusal[1])
        return out

    def stats(self) -> dict[str, object]:
        """/diagnostics values: `tf_mode_reason`, `tf_mode_switches`, `tf_edges_refused`, `tf_gap`."""
        return {
            "tf_mode_reason": self.mode_reason,
            "tf_mode_switches": self.switches,
            "tf_edges_refused": self._tf.refused,
            "tf_gap": self.gap,
        }

    def update_config(self, config: OutputConfig) -> None:
        self.config = config

    def destroy(self) -> None:
        self._tf.destroy()
