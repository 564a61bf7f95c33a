"""`CameraTracker`: one camera's pose in the map: its `Mapper`, TF-mode policy and `map -> odom` estimate.

One call per frame: `track(result, camera, stamp_s)` takes a `FrameResult` and returns a `TrackedFrame` (the
`PosedFrame`, its `MapWork` for the map side, the inverted edge `<root> -> map` of `map_to_camera`,
whether this is the stream's first `map -> odom`), or raises `TransformUnavailable` (the frame is dropped
before anything is published). What it decides on its own, given the robot's TF as plain data
(`RobotTfSource`, engine/robot_tf.py) and an optional metric depth source (`DepthSource`):

* the epoch and TF mode of each stream (docs/robot.md "TF modes"): a new epoch of the session chooses the
  mode (`RobotFrames.resolve_mode`; `tf.mode: auto`); in `map_to_camera` the frame `map` hangs BELOW the
  camera, or below the root of the camera's own subtree when it already has a parent in TF (a URDF gap,
  reported in `gap`): the edge is `<root> -> map` (`TrackedFrame.root_map`), so the node never makes a robot
  frame the child of its edge (a tf2 consumer keeps a frame's parent and cache type from its newest sample:
  a late static `base_link -> camera_link` must not race the node's samples of `camera_link`);
* the `auto` switches as the robot comes up (robot_state_publisher or odometry started after the node): a
  stream in `map_to_camera` whose extrinsics `base_frame -> camera` appeared continues as `map_to_base` (or
  `map_to_odom` when odometry is there too), one in `map_to_base` whose odometry appeared as `map_to_odom`,
  without a reset and without a jump (`Mapper.switch_mode`; `switches`, a warning); the switch from
  `map_to_camera` happens only at a frame stamped after the last `<root> -> map` sample (no stamp with both
  edges: no loop at any time; the gap between them is one frame); odometry that starts
  after the frame's stamp (frames waited in the queue) is taken at its newest sample for the switch, so `map`
  keeps a child while the queued frames drain (exact again from the next frame with odometry at its stamp);
* the shared robot map of a later camera: its new `map_to_odom` stream starts in the driving camera's map
  frame (`robot_map`: that camera's T_map_odom);
* the `map -> odom` estimate (slam_toolbox's `map_to_odom_`, under its own lock): set by each frame, moved by
  loop closure (`jump`), restored with a saved session (`restore_estimate`), read by the node's republish
  timer (`estimate`).

Threads: `track` runs on one thread (the camera pipeline's pose stage, engine/camera_pipeline.py; `run` calls
it inline; both through the camera's `CameraState`, engine/camera_state.py); its TF lookups (which may wait
up to `tf.timeout`) run outside `lock`, which guards the pose side (the mapper's chain, scale and
trajectory) for `locate`: the node's readers take it, never waiting for a TF lookup. Notices (the TF mode of
a stream, the switch, stamps going back) go to `on_notice(level, text, throttle_s)`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Protocol

import numpy as np

from .geometry import invert_rigid
from .health import Verdict
from .lock_order import OrderedLock
from .mapping.frames import TfMode
from .mapping.mapper import Mapper, MapperConfig, MapWork, PosedFrame, RobotSample
from .mapping.tf_tree import subtree_root
from .result import FrameResult
from .robot_tf import RobotFrames, RobotTfConfig, RobotTfSource, TransformUnavailable

#: `on_notice(level, text, throttle_s)`: level "info" or "warning"; throttle_s: at most one such notice per
#: that many seconds (None: every one; only warnings are throttled).
Notice = Callable[[str, str, float | None], None]


class DepthSource(Protocol):
    """Metric depth registered to the colour image (the node's depth topic, `scale.source: depth`)."""

    def take(self, stamp_s: float, shape: tuple[int, int]) -> np.ndarray | None:
        """[H, W] float32 metres of the depth image stamped `stamp_s`, resized to `shape`; None if none."""


@dataclass(frozen=True)
class TrackedFrame:
    """One frame's pose side, as `CameraTracker.track` returns it.

    Attributes:
        frame: the poses, twist, metric depth and covariances (engine/mapping/mapper.py `PosedFrame`).
        work: what the map side integrates for this frame (`Mapper.integrate`).
        root: the parent of the `map_to_camera` edge `root -> map`: the camera, or the root of its subtree (a
            URDF gap).
        root_map: T_root_map [4, 4] (`T_root_cam · T_map_cam⁻¹`) of a `map_to_camera` frame, else None.
        first_map_odom: the stream's first `map -> odom` (published at the image stamp too).
        health: the frame's tracking health (`CameraState` with health on; engine/health.py), else None.
    """

    frame: PosedFrame
    work: MapWork
    root: str
    root_map: np.ndarray | None
    first_map_odom: bool
    health: Verdict | None = None


class CameraTracker:
    """One camera's pose pipeline (module doc).

    Args:
        mapper_config: the `Mapper`'s configuration.
        tf_config: TF mode, frames and `tf.timeout` (`RobotTfConfig`).
        tf: the robot's TF (`RobotTfSource`).
        tf_graph: the TF graph now, child -> parent, without the node's own edges (where `map` attaches in
            `map_to_camera`); None: no graph (the camera is its own root).
        depth: metric depth images for `scale.source: depth`, else None.
        robot_map: T_map_odom [4, 4] of the camera that drives the robot TF (None: none yet), for a camera
            that does not: its new `map_to_odom` streams start in that camera's map frame.
        on_notice: where notices go (module doc); None: nowhere.
    """

    def __init__(
        self,
        mapper_config: MapperConfig,
        tf_config: RobotTfConfig,
        tf: RobotTfSource,
        tf_graph: Callable[[], dict[str, str]] | None = None,
        depth: DepthSource | None = None,
        robot_map: Callable[[], np.ndarray | None] | None = None,
        on_notice: Notice | None = None,
    ) -> None:
        self.mapper = Mapper(mapper_config)
        self.robot = RobotFrames(tf, tf_config)
        self._graph = tf_graph or dict
        self._depth = depth
        self._robot_map = robot_map
        self._notice = on_notice or (lambda level, text, throttle_s: None)
        self.lock = OrderedLock("pose.lock")  # the pose side (module doc)
        self._estimate_lock = OrderedLock("tracker.estimate_lock")  # the latest T_map_odom only
        self._map_odom: np.ndarray | None = None
        self._sent = False  # a map -> odom was given in this stream (the first is also at the image stamp)
        self.root: str | None = None
        self.mode_reason = ""
        self.gap = ""  # the missing link of a URDF gap
        self.switches = 0
        self._edge_stamp = -np.inf  # stamp of this stream's newest `root -> map` (map_to_camera) edge
        self._logged_mode: tuple[str, str] | None = None

    @property
    def tf_config(self) -> RobotTfConfig:
        return self.robot.config

    # ------------------------------------------------------------------------------------------ frames
    def track(self, result: FrameResult, camera: str, stamp_s: float, stream: int = 0) -> TrackedFrame:
        """The pose side of one frame whose image has optical frame `camera` and stamp `stamp_s` (s), stepped
        in camera stream `stream` (`CameraState.stream`, carried by its `MapWork`).

        Raises:
            TransformUnavailable: a transform the TF mode (its `mode`) needs is missing after `tf.timeout`.
        """
        mapper = self.mapper
        mode = mapper.mode
        new_epoch = mapper.needs_new_epoch(result)
        if new_epoch:  # a stream starts: its TF mode (auto)
            mode = self._start_stream(camera, stamp_s)
        try:
            robot, root_cam = self._sample(mode, camera, stamp_s, new_epoch)
        except TransformUnavailable as exc:
            raise type(exc)(str(exc), exc.edge, mode) from exc  # FrameTooOld stays one
        shared = self._robot_map() if self._robot_map is not None else None
        if shared is not None and robot.mode == TfMode.MAP_TO_ODOM and mapper.needs_new_epoch(result):
            robot = replace(robot, map_base=shared @ robot.odom_base)  # the driving camera's map frame
        sensor = self._depth.take(stamp_s, result.image_hw) if self._depth is not None else None
        with self.lock:
            if robot.mode != mode and not new_epoch:  # auto: the robot's TF came up
                mapper.switch_mode(robot.mode)
                self._switched(mode, robot.mode, camera, stamp_s)
            bad_stamps = mapper.stamps_backwards + mapper.stamps_duplicate
            frame, work = mapper.locate(result, stamp_s, robot, sensor, stream)
            if mapper.stamps_backwards + mapper.stamps_duplicate > bad_stamps:
                self._notice(
                    "warning",
                    f"image stamp {stamp_s:.6f} s went back or repeated ({mapper.stamps_backwards} "
                    f"backwards, {mapper.stamps_duplicate} duplicate so far): no twist for this frame",
                    10.0,
                )
            if frame.new_epoch:
                self.new_stream()
            root_map = None
            if frame.mode == TfMode.MAP_TO_CAMERA:
                root_cam = np.eye(4) if root_cam is None else root_cam
                root_map = root_cam @ invert_rigid(frame.camera_pose)
                self._edge_stamp = max(self._edge_stamp, stamp_s)
            first = False
            if frame.map_odom is not None:
                with self._estimate_lock:
                    self._map_odom = frame.map_odom
                    first, self._sent = not self._sent, True
        return TrackedFrame(frame, work, self.root or camera, root_map, first)

    def _start_stream(self, camera: str, stamp_s: float) -> str:
        """The TF mode of a stream whose first frame has `camera` and `stamp_s` (module doc)."""
        mode, reason = self.robot.resolve_mode(camera, stamp_s)
        self.root, self.gap = camera, ""
        if mode == TfMode.MAP_TO_CAMERA:
            root = subtree_root(camera, self._graph())  # not above the node's own edges
            if root != camera:
                self.root = root
                self.gap = (
                    f"{self.tf_config.base_frame} -> {root} is missing: '{camera}' is below '{root}' in TF "
                    f"(a URDF gap, or its publisher is not up yet), so map hangs below '{root}' "
                    f"({root} -> map) until it appears; then the node switches to map_to_base (map_to_odom "
                    "with odometry) by itself, no reset needed"
                )
                reason = f"{reason}; {self.gap}"
        if (mode, reason) != self._logged_mode:  # once, not again for every frame dropped meanwhile
            self._notice("warning" if self.gap else "info", f"TF mode {mode} ({reason})", None)
            self._logged_mode = (mode, reason)
        self.mode_reason = reason
        return mode

    def _sample(
        self, mode: str, camera: str, stamp_s: float, new_epoch: bool
    ) -> tuple[RobotSample, np.ndarray | None]:
        """(the transforms `mode` needs at `stamp_s`, T_root_cam of a map_to_camera edge from the
        camera's subtree root, else None); `map_to_odom` when odometry appeared in an `auto` `map_to_base`
        stream. Raises `TransformUnavailable`."""
        robot = self.robot.sample(mode, camera, stamp_s)
        if mode != TfMode.MAP_TO_ODOM and not new_epoch and self.tf_config.mode == TfMode.AUTO:
            robot = self._robot_came_up(robot, camera, stamp_s)
        root_cam = None
        if robot.mode == TfMode.MAP_TO_CAMERA and self.root not in (None, camera):
            root_cam = self.robot.root_pose(self.root, camera, stamp_s)
        return robot, root_cam

    def _robot_came_up(self, robot: RobotSample, camera: str, stamp_s: float) -> RobotSample:
        """`auto`: the sample in the mode the robot's TF allows now (module doc), else `robot` unchanged."""
        if robot.mode == TfMode.MAP_TO_CAMERA:
            if stamp_s <= self._edge_stamp:  # not before the newest `root -> map` (stamps went back)
                return robot
            base_cam = self.robot.extrinsics_at(camera, stamp_s)
            if base_cam is None:
                return robot
            robot = replace(robot, mode=TfMode.MAP_TO_BASE, base_cam=base_cam)
        odom_base = self.robot.odometry_at(stamp_s)
        if odom_base is None:  # odometry that started after this (queued) frame: its newest sample
            odom_base = self.robot.odometry_at(0.0)
        return robot if odom_base is None else replace(robot, mode=TfMode.MAP_TO_ODOM, odom_base=odom_base)

    def _switched(self, before: TfMode, after: TfMode, camera: str, stamp_s: float) -> None:
        """The mapper went from `before` to `after` at `stamp_s` (the robot came up): a WARN, /diagnostics."""
        cfg = self.tf_config
        self.switches += 1
        appeared = (
            f"{cfg.odom_frame} -> {cfg.base_frame}"
            if before == TfMode.MAP_TO_BASE
            else f"{cfg.base_frame} -> {camera}"
        )
        edge = f"map -> {cfg.odom_frame}" if after == TfMode.MAP_TO_ODOM else f"map -> {cfg.base_frame}"
        self.mode_reason = (
            f"{appeared} appeared in TF at {stamp_s:.3f} s: switched from {before} (map unchanged)"
        )
        self._logged_mode = None
        self.root, self.gap = camera, ""
        self._notice(
            "warning",
            f"TF mode {before} -> {after}: {appeared} appeared in TF (image {stamp_s:.3f} s); publishing "
            f"{edge} from now on (no jump in map, no reset needed) instead of the previous edge",
            None,
        )

    # ------------------------------------------------------------------------------------------ streams
    def new_stream(self) -> None:
        """Forget the estimate (a new epoch or a reset); the next `map -> odom` is a stream's first."""
        with self._estimate_lock:
            self._map_odom = None
            self._sent = False
        self._edge_stamp = -np.inf

    def clear(self) -> None:
        """A reset (with `lock` held by the caller, and the map side's): forget the stream (the mapper's
        map, trajectory, scale, chain) and the estimate; the next stream logs its TF mode again."""
        self.mapper.clear()
        self.new_stream()
        self._logged_mode = None
        self.gap = ""

    # ------------------------------------------------------------------------------------------ map -> odom
    def estimate(self) -> np.ndarray | None:
        """The latest T_map_odom [4, 4] (None before one)."""
        with self._estimate_lock:
            return self._map_odom

    def jump(self, move: Callable[[np.ndarray], np.ndarray]) -> None:
        """A loop closure's correction: the estimate becomes `move(T_map_odom)`."""
        with self._estimate_lock:
            if self._map_odom is not None:
                self._map_odom = move(self._map_odom)

    def restore_estimate(self, map_odom: np.ndarray | None) -> None:
        """A loaded session's T_map_odom (republished until the first frame gives a new one, which is then a
        stream's first)."""
        with self._estimate_lock:
            self._map_odom, self._sent = map_odom, False
