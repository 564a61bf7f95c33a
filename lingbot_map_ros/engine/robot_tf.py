"""The robot's TF at an image stamp, for the mapper: the TF mode of a stream and the transforms it needs.

The robot's TF comes in as plain data through `RobotTfSource` (`lookup(target, source, stamp_s, timeout_s)
-> T_target_source [4, 4]`, raising `TransformUnavailable`): the node implements it over its TF listener
(ros/tf/listener.py `TfLookup`), tests over a plain buffer; engine/ never sees a ROS message.

`resolve_mode` makes the `tf.mode: auto` choice when a stream starts (and after a reset): `map_to_odom` when
`base_frame -> <camera>` is in TF at the image stamp and `odom_frame -> base_frame` is in TF at all (data
newer than the stamp counts: odometry that starts just after the camera), `map_to_base` when only the
extrinsics are, else `map_to_camera` (each probe waits up to `tf.timeout`). While an `auto` stream waits
for the robot, `extrinsics_at` and `odometry_at` (no waiting) tell the caller that the extrinsics or the
odometry have appeared, so it switches to `map_to_base` / `map_to_odom` without a jump
(engine/mapping/mapper.py `Mapper.switch_mode`). `root_pose` is the camera in the root of its own subtree
(the parent of `map_to_camera`'s edge `<root> -> map` when the camera already has a parent: a URDF gap).
`sample` looks up, at the image stamp, the extrinsics `T_base_cam` (robot modes) and the odometry
`T_odom_base` (map_to_odom, or `scale.source: odometry`), or raises `TransformUnavailable` naming the
missing edge: the caller drops the frame (`tf_unavailable`; `FrameTooOld`, `frame_too_old`: the stamp is older
than the TF history kept).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from .mapping.frames import TfMode, choose_tf_mode
from .mapping.mapper import RobotSample


class TransformUnavailable(LookupError):
    """No transform: `edge` names the missing or out-of-range `parent -> child` (or unconnected frames);
    `mode`: the TF mode that needed it (set by `CameraTracker.track`; None from a plain lookup)."""

    #: The drop cause of a frame it stops (/diagnostics `rejected.<cause>`).
    cause = "tf_unavailable"

    def __init__(self, message: str, edge: str, mode: str | None = None) -> None:
        super().__init__(message)
        self.edge = edge
        self.mode = mode

    def reason(self) -> str:
        """Why the frame was dropped, for the log."""
        return f"missing transform {self.edge} (TF mode {self.mode}): {self}"


class FrameTooOld(TransformUnavailable):
    """The image stamp is older than the TF history kept (`tf.cache_time` behind the newest sample): the
    transform was pruned, so the frame is dropped at once (`frame_too_old`), not reported as an
    extrapolation into the past."""

    cause = "frame_too_old"

    def reason(self) -> str:
        return f"{self} (TF mode {self.mode})"


class RobotTfSource(Protocol):
    """The robot's TF as plain data (the node's `TfLookup`)."""

    def lookup(self, target: str, source: str, stamp_s: float, timeout_s: float) -> np.ndarray:
        """`T_target_source` [4, 4] float64 at `stamp_s` (0: the latest), waiting up to `timeout_s` for it.

        Raises:
            TransformUnavailable: still missing after the timeout (its `edge` names what is missing).
        """


class NoRobotTf:
    """A `RobotTfSource` without a robot (a bare camera: `run`, `run --topics`): every lookup is missing."""

    def lookup(self, target: str, source: str, stamp_s: float, timeout_s: float) -> np.ndarray:
        raise TransformUnavailable(f"no robot TF ({target} -> {source})", f"{target} -> {source}")


@dataclass(frozen=True)
class RobotTfConfig:
    """Frames and TF options (from the parameters `tf.mode`, `base_frame`, `odom_frame`, `tf.timeout`)."""

    mode: str = TfMode.AUTO  # a `TfMode` (the `tf.mode` parameter's string equals its member)
    base_frame: str = "base_link"
    odom_frame: str = "odom"
    timeout_s: float = 0.2
    odometry_scale: bool = False  # scale.source == odometry: odom -> base is needed in every robot mode


class RobotFrames:
    """TF lookups of one node (module doc)."""

    def __init__(self, lookup: RobotTfSource, config: RobotTfConfig) -> None:
        self.lookup = lookup
        self.config = config

    def resolve_mode(self, camera: str, stamp_s: float) -> tuple[TfMode, str]:
        """(mode, why) for a stream whose first image has `camera` as frame and `stamp_s` as stamp."""
        cfg = self.config
        if cfg.mode != TfMode.AUTO:
            return TfMode(cfg.mode), "tf.mode"
        has_ext = self._available(cfg.base_frame, camera, stamp_s)
        # odometry at the stamp, or newer (it may start just after the camera): the latest sample (stamp 0)
        has_odom = has_ext and self._available(cfg.odom_frame, cfg.base_frame, 0.0)
        mode = choose_tf_mode(TfMode.AUTO, has_ext, has_odom)
        why = {
            TfMode.MAP_TO_ODOM: f"{cfg.odom_frame} -> {cfg.base_frame} -> {camera} is in TF",
            TfMode.MAP_TO_BASE: f"{cfg.base_frame} -> {camera} is in TF, {cfg.odom_frame} -> "
            f"{cfg.base_frame} is not (within {cfg.timeout_s} s); a later {cfg.odom_frame} -> "
            f"{cfg.base_frame} switches to {TfMode.MAP_TO_ODOM}",
            TfMode.MAP_TO_CAMERA: f"no {cfg.base_frame} -> {camera} in TF within {cfg.timeout_s} s; mapping "
            f"as a bare camera ({camera} -> map) until it appears, then {TfMode.MAP_TO_BASE} "
            f"({TfMode.MAP_TO_ODOM} with {cfg.odom_frame} -> {cfg.base_frame}) without a reset",
        }[mode]
        return mode, why

    def sample(self, mode: str, camera: str, stamp_s: float) -> RobotSample:
        """The transforms `mode` needs at `stamp_s`.

        Raises:
            TransformUnavailable: one is missing after `tf.timeout` (its `edge` names it).
        """
        cfg = self.config
        if mode == TfMode.MAP_TO_CAMERA and not cfg.odometry_scale:
            return RobotSample(mode)
        base_cam = self.lookup.lookup(cfg.base_frame, camera, stamp_s, cfg.timeout_s)
        odom_base = None
        if mode == TfMode.MAP_TO_ODOM or cfg.odometry_scale:
            odom_base = self.lookup.lookup(cfg.odom_frame, cfg.base_frame, stamp_s, cfg.timeout_s)
        return RobotSample(mode, base_cam, odom_base)

    def odometry_at(self, stamp_s: float) -> np.ndarray | None:
        """T_odom_base [4, 4] at `stamp_s` (0: the newest) if it is in TF now (no waiting), else None."""
        cfg = self.config
        return self._now(cfg.odom_frame, cfg.base_frame, stamp_s)

    def extrinsics_at(self, camera: str, stamp_s: float) -> np.ndarray | None:
        """T_base_cam [4, 4] at `stamp_s` if it is in TF now (no waiting), else None."""
        return self._now(self.config.base_frame, camera, stamp_s)

    def _now(self, target: str, source: str, stamp_s: float) -> np.ndarray | None:
        try:
            return self.lookup.lookup(target, source, stamp_s, 0.0)
        except TransformUnavailable:
            return None

    def root_pose(self, root: str, camera: str, stamp_s: float) -> np.ndarray:
        """T_root_cam [4, 4] at `stamp_s`. Raises `TransformUnavailable` after `tf.timeout`."""
        return self.lookup.lookup(root, camera, stamp_s, self.config.timeout_s)

    def _available(self, target: str, source: str, stamp_s: float) -> bool:
        try:
            self.lookup.lookup(target, source, stamp_s, self.config.timeout_s)
        except TransformUnavailable:
            return False
        return True
