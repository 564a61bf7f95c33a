"""Publishers of the node's outputs: conversion and publishing only; the geometry is the engine's.

Each camera's engine is its `CameraState` (engine/camera_state.py: tracker, map side, loop closer, the one
correction rule), made here with the node's TF lookup, depth topic and logger. `MappingOutputs.publish`
(on the camera pipeline's pose stage, engine/camera_pipeline.py) takes a
`FrameResult` with the `TrackedFrame` the camera's `CameraTracker` made of it (engine/tracker.py: the
TF mode of each stream and the `auto` switch, the robot's TF at the image stamp read through the node's
`TfLookup`, `Mapper.locate`: frame chain, metric scale, trajectory, twist, the `map -> odom` estimate) and
publishes its pose outputs at once: the TF mode's single edge (`map -> odom`, `map -> base_frame` or
`map -> camera`; tf/camera_edge.py: the one-parent check, the `map -> odom` republish), `~/odometry` (the base
frame in the robot modes, with covariances), `~/camera_pose`, `~/camera_info` and `~/depth` (metres), all
stamped with the image stamp. The frame's map work (points, voxel map, grid, `~/frame_cloud`) goes to the
camera's map thread (map_worker.py) and never delays them; `~/path` (`path.publish_rate`), `~/map_cloud`
and `~/grid` are published by the node's timers. (A frame whose transforms are missing never gets here: the
pipeline hands it to `CameraStream.delivered` as missing, `tf_unavailable`.) `lock` (the
tracker's) guards the pose side (mapper pose state, path), the `MapSide`'s lock the map side
(engine/mapping/map_side.py); where both are needed (`both_sides`), the map's is taken first.
"""

from __future__ import annotations

import pathlib
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import replace
from functools import partial
from typing import TYPE_CHECKING, Protocol

import numpy as np
from builtin_interfaces.msg import Time
from geometry_msgs.msg import Pose, PoseStamped
from nav_msgs.msg import OccupancyGrid, Odometry, Path
from rclpy.node import Node
from sensor_msgs.msg import CameraInfo, Image, PointCloud2
from std_msgs.msg import Header

from ...engine.face import (
    CameraState,
    FrameResult,
    HealthConfig,
    RobotTfConfig,
    SessionSnapshot,
    StreamingSession,
    TfEdgeGuard,
    TrackedFrame,
    persistence,
    write_nav2_map,
    write_ply,
    write_tum,
)
from ..diagnostics.stats import log_notice
from ..input.depth import DepthInput
from ..input.streams import DEFAULT_CAMERA_FRAME
from ..messages.conversions import depth_to_image
from ..messages.poses import (
    camera_info_msg,
    odometry_msg,
    pose_msg,
    pose_stamped_msg,
    seconds_stamp,
    stamp_seconds,
)
from ..tf.camera_edge import CameraTf
from ..tf.listener import TfLookup
from .config import FRAME_QOS, MAP_QOS, OutputConfig
from .map_worker import MapItem, MapWorker
from .path import PathOutput

if TYPE_CHECKING:
    from ...engine.face import LoopCloser


class LoopPublisher(Protocol):
    """What a camera keeps of its loop-closure publishers (ros/outputs/loop.py `LoopOutputs`, set at
    activate), named here so that this module does not import the one that builds on it."""

    def stats(self) -> dict[str, object]:
        """/diagnostics: where the verification passes ran."""

    def optimize(self, timeout_s: float = ...) -> str:
        """`~/optimize`: a forced pose-graph pass; its report line."""

    def reject_last_loop(self, timeout_s: float = ...) -> str:
        """`~/reject_loop`: undo the last accepted loop; its report line."""


#: How long `~/save_map`, `~/save_session` and deactivate wait for the map thread's queued works.
MAP_DRAIN_S = 5.0


class MappingOutputs:
    """Create the output publishers on `node` and publish `FrameResult`s through the mapper.

    Subscriptions and timers are the node's (created once and kept, entities.py): the TF `lookup` and the
    `depth_input` are passed in, and the node's timers call `republish_map_odom`, `publish_path`,
    `publish_map` and `publish_grid`. The map thread (`map`) lives until `destroy`.

    Args:
        node: the (activated) lifecycle node, or its `NodeFacade`; publishers live in its private namespace.
        config: frames and options; `update_config` swaps in live changes.
        lookup: TF lookups at image stamps (the node's `TfLookup`).
        depth_input: the metric depth topic (`scale.source: depth`), else None.
        topic_prefix: where the publishers live (`~/`, or `~/<camera>/` with several cameras).
        robot_map: T_map_odom [4, 4] of the camera that drives the robot TF (None: none yet), for a camera
            that does not: its new streams in map_to_odom start in that camera's map frame (one map).
        on_map_error: `(exception)` of a map work that failed on the map thread (counted by the node).
        tf_guard: the node's one-parent check of every TF edge (None: one of its own).
    """

    def __init__(
        self,
        node: Node,
        config: OutputConfig,
        lookup: TfLookup,
        depth_input: DepthInput | None = None,
        topic_prefix: str = "~/",
        robot_map: Callable[[], np.ndarray | None] | None = None,
        on_map_error: Callable[[Exception], None] | None = None,
        tf_guard: TfEdgeGuard | None = None,
    ) -> None:
        self._node = node
        self.config = config
        self.state = CameraState(  # the camera's engine: tracker, map side, loop closer, corrections
            config.mapper_config(),
            RobotTfConfig(
                config.tf_mode,
                config.base_frame,
                config.odom_frame,
                config.tf_timeout,
                odometry_scale=config.scale.source == "odometry",
            ),
            lookup,
            lambda: self.tf.guard.foreign_graph(),
            depth_input if config.scale.source == "depth" else None,
            robot_map,
            partial(log_notice, node.get_logger()),
            HealthConfig() if config.tracking_health else None,
            config.mapping_enabled,
        )
        self.tracker = self.state.tracker
        self.lock = self.tracker.lock  # the pose side: mapper pose state, path
        self.mapper = self.state.mapper
        self.tf = CameraTf(node, config, self.tracker, tf_guard, topic_prefix.strip("~/") or "camera")
        topics = {
            "odometry": Odometry,
            "camera_pose": PoseStamped,
            "path": Path,
            "depth": Image,
            "camera_info": CameraInfo,
            "frame_cloud": PointCloud2,
        }
        self._pubs = {
            name: node.create_publisher(msg, topic_prefix + name, FRAME_QOS) for name, msg in topics.items()
        }
        self._pubs["map_cloud"] = node.create_publisher(PointCloud2, topic_prefix + "map_cloud", MAP_QOS)
        self._pubs["grid"] = node.create_publisher(OccupancyGrid, topic_prefix + "grid", MAP_QOS)
        self.state.set_mapping(config.mapping_enabled)
        map_pubs = {name: self._pubs[name] for name in ("frame_cloud", "map_cloud", "grid")}
        self.map_side = self.state.map_side  # the map's one owner (engine/mapping/map_side.py)
        self.map = MapWorker(self.map_side, map_pubs, config.map_queue_size, on_map_error or (lambda e: None))
        self.path = PathOutput(self._pubs["path"], self.mapper.trajectory)
        self.frames_published = 0
        self.last_stamp: Time | None = None  # stamp of the last published frame (map cloud stamp)
        self.loop: LoopPublisher | None = None  # loop closure's publishers (outputs/loop.py), at activate

    def update_config(self, config: OutputConfig) -> None:
        """Apply live options (path length, publish flags) to the following frames."""
        with self.lock:
            self.path.resize(config.path_max_length)
            self.config = config
            self.tf.update_config(config)
            voxel = replace(
                self.mapper.config.voxel,
                conf_threshold=config.map_conf_threshold,
                pixel_stride=config.map_stride,
            )
            self.mapper.config = replace(self.mapper.config, voxel=voxel)
            self.state.set_mapping(config.mapping_enabled)

    @property
    def map_frame(self) -> str:
        """This camera's map frame: `map_frame`, or `camera_map_frame` (when set) unless the stream is mapped
        in the robot's frame (a robot TF mode)."""
        cfg = self.config
        robot = self.mapper.mode in ("map_to_odom", "map_to_base")
        return cfg.camera_map_frame if cfg.camera_map_frame and not robot else cfg.map_frame

    def camera_frame(self, header: Header) -> str:
        """The camera's optical frame of a frame: the `camera_frame` parameter, else the image's frame_id."""
        return self.config.camera_frame or header.frame_id or DEFAULT_CAMERA_FRAME

    def publish(self, result: FrameResult, header: Header, tracked: TrackedFrame) -> None:
        """Publish one `FrameResult` whose image had `header`, as the camera pipeline's pose stage tracked it
        (`tracked`, engine/camera_pipeline.py); its map work to the map thread."""
        camera = self.camera_frame(header)
        frame, work = tracked.frame, tracked.work
        with self.lock:
            if frame.new_epoch:
                self.path.clear()
                self.tf.release()
            map_header = Header(stamp=header.stamp, frame_id=self.map_frame)
            body = pose_msg(frame.body_pose)  # one quaternion for odometry (and TF of the body)
            self.path.append(map_header)  # the mapper's trajectory holds the pose
            frame_cloud = self.config.publish_frame_cloud
        self._publish_frame(tracked, body, header, camera)
        # (the keyframe goes to the loop closer after this: `CameraState.posed`, the camera pipeline)
        # else it has nothing to do on the map thread (no depth: the step skipped the depth head)
        if work.depth is not None and (work.is_keyframe or frame_cloud or frame.new_epoch):
            self.map.submit(MapItem(work, map_header, frame_cloud))
        self.frames_published += 1
        self.last_stamp = header.stamp

    def _publish_frame(self, tracked: TrackedFrame, body: Pose, header: Header, camera: str) -> None:
        """The pose outputs: the TF edge, odometry, camera_pose, camera_info, depth (`body`: the message of
        `frame.body_pose`, which is `frame.camera_pose` in map_to_camera)."""
        cfg, frame = self.config, tracked.frame
        cam = body if frame.camera_pose is frame.body_pose else pose_msg(frame.camera_pose)
        cam_header = Header(stamp=header.stamp, frame_id=camera)
        map_frame = self.map_frame
        map_header = Header(stamp=header.stamp, frame_id=map_frame)
        self.tf.publish(tracked, body, header.stamp, map_frame)
        child = camera if frame.mode == "map_to_camera" else cfg.base_frame
        self._pubs["odometry"].publish(
            odometry_msg(body, frame.twist, map_header, child, frame.pose_covariance, frame.twist_covariance)
        )
        self._pubs["camera_pose"].publish(pose_stamped_msg(cam, map_header))
        height, width = frame.image_hw
        self._pubs["camera_info"].publish(camera_info_msg(frame.intrinsics, width, height, cam_header))
        if cfg.publish_depth and frame.depth is not None:
            self._pubs["depth"].publish(depth_to_image(frame.depth, cam_header))

    def republish_map_odom(self) -> None:
        """Timer (`tf.publish_rate`): the latest `map -> odom` stamped now + tolerance (tf/camera_edge.py)."""
        self.tf.republish()

    def publish_path(self) -> bool:
        """Timer (`path.publish_rate`): `~/path` if a frame was published since the last call; stamped with
        the last frame's stamp, as the message of that frame would have been."""
        return self.path.send(self.lock)

    def depth_wanted(self) -> bool:
        """Whether ~/depth is published and has a subscriber (the step then runs the depth head)."""
        return self.config.publish_depth and self._pubs["depth"].get_subscription_count() > 0

    def publish_map(self, stamp: Time, force: bool = False) -> int:
        """Publish ~/map_cloud if the map changed since the last call (or `force`); returns its size."""
        return self.map.publish_map(stamp, self.map_frame, force)

    def publish_grid(self, force: bool = False) -> bool:
        """Publish ~/grid if it changed since the last call (or `force`)."""
        stamp = self.last_stamp or self._node.get_clock().now().to_msg()
        return self.map.publish_grid(stamp, self.map_frame, force)

    @contextmanager
    def both_sides(self, drain: bool = True) -> Iterator[None]:
        """Hold the map's lock, then `lock`, once the queued map works are integrated (`drain`) or dropped."""
        if drain:
            self.map.drain(MAP_DRAIN_S)
        else:
            self.map.discard()
        with self.map_side.lock, self.lock:
            yield

    def publish_cleared(self, stamp: Time) -> None:
        """After `clear`: publish an empty path, map and grid so viewers drop the old ones."""
        header = Header(stamp=stamp, frame_id=self.map_frame)
        self.path.send_cleared(header)
        self.publish_map(stamp, force=True)
        self.publish_grid(force=True)

    def snapshot(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]:
        """Map and trajectory (the last `trajectory.max_poses` poses) since the last reset, in map_frame.

        Returns:
            `(xyz [N, 3] float32, rgb [N, 3] uint8, stamps [M] float64 s, rows [M, 7] tx ty tz qx qy qz qw,
            poses dropped since the reset (oldest first) to keep M <= trajectory.max_poses)`.
        """
        self.map.drain(MAP_DRAIN_S)  # every keyframe published so far is in the map
        xyz, rgb = self.map_side.snapshot()
        with self.lock:
            stamps, rows = self.mapper.trajectory.full_history()
            dropped = self.mapper.trajectory.history_dropped
        return xyz, rgb, stamps, rows, dropped

    def save(self, out_dir: pathlib.Path, tag: str) -> str:
        """Write `map_<tag>.ply`, `trajectory_<tag>.tum` and the Nav2 map `map_<tag>.pgm` + `map_<tag>.yaml`
        (atomic) into `out_dir`; returns the report line.

        Raises:
            OSError: the directory cannot be created or written.
        """
        xyz, rgb, stamps, rows, dropped = self.snapshot()
        grid = self.map_side.grid()
        out_dir.mkdir(parents=True, exist_ok=True)
        ply = write_ply(out_dir / f"map_{tag}.ply", xyz, rgb)
        tum = write_tum(out_dir / f"trajectory_{tag}.tum", stamps, rows)
        pgm, yaml = write_nav2_map(out_dir, f"map_{tag}", grid)
        report = (
            f"map: {ply} ({len(xyz)} points); trajectory: {tum} ({len(stamps)} poses); "
            f"grid: {yaml} + {pgm.name} ({grid.data.shape[1]}x{grid.data.shape[0]} cells)"
        )
        if dropped:
            report += (
                f"; the oldest {dropped} poses since the reset were dropped "
                f"(trajectory.max_poses = {self.config.trajectory_max_poses})"
            )
        return report

    def restore(self, session: StreamingSession, snapshot: SessionSnapshot) -> None:
        """Continue a saved session (engine/persistence/save_load.py): the session re-runs its anchors, the
        mapper takes
        its map, grid, trajectory and frame chain; the path is rebuilt from the trajectory, the saved
        T_map_odom is republished (stamped now) until the first frame gives a new one, and map cloud, grid and
        path are published at once (latched for late subscribers). In localization mode with tracking health
        the camera starts lost (`CameraState.session_loaded`).

        Raises:
            SessionError: the snapshot does not fit (see `persistence.restore`).
        """
        with self.both_sides(drain=False), self.held_closer() as closer:
            persistence.restore(session, self.mapper, snapshot, loop=closer)
            self.map_side.mark_changed()
            stamps = self.mapper.trajectory.stamps()
            self.last_stamp = seconds_stamp(float(stamps[-1])) if len(stamps) else None
            self.path.restore(Header(stamp=self.last_stamp or Time(), frame_id=self.config.map_frame))
            saved = _saved_map_odom(snapshot.state)
            self.tracker.restore_estimate(
                saved if self.mapper.mode == "map_to_odom" and len(stamps) else None
            )
        self.state.session_loaded()  # localization mode: lost until a verified match (tracking health)
        self.publish_path()
        self.publish_map(self.last_stamp or self._node.get_clock().now().to_msg(), force=True)
        self.publish_grid(force=True)

    def held_closer(self) -> AbstractContextManager[LoopCloser | None]:
        """This camera's loop closer under its lock, or None without loop closure."""
        return self.state.held_closer()

    def robot_map_odom(self) -> np.ndarray | None:
        """The last T_map_odom [4, 4] published (None before one, or when this camera publishes none)."""
        return self.tracker.estimate() if self.config.publish_robot_tf else None

    def map_size(self) -> int:
        return self.map_side.size()

    def trajectory_stats(self) -> dict[str, object]:
        """For /diagnostics: `trajectory_poses` kept for ~/save_map, `trajectory_dropped` (oldest, since the
        last reset, beyond `trajectory.max_poses`), and the mapper's TF mode, scale (value, spread, source,
        samples, converged, age in seconds of image time), stamp counters and the map thread's counters."""
        with self.map_side.lock, self.lock:  # held keyframes and grid rays are the map side's
            stats = self.mapper.stats()
            out: dict[str, object] = {
                "trajectory_poses": self.mapper.trajectory.history_length,
                "trajectory_dropped": self.mapper.trajectory.history_dropped,
            }
        updated = stats.pop("scale_updated_stamp")
        last = stamp_seconds(self.last_stamp) if self.last_stamp is not None else None
        stats["scale_age_s"] = round(last - updated, 3) if last is not None and updated >= 0 else -1.0
        stats.update(self.tf.stats())
        out.update(stats)
        out.update(self.map.stats())
        out.update({f"loop_closure.{k}": round(v, 3) for k, v in self.state.loop_stats().items()})
        if self.loop is not None:  # where the verification passes ran (outputs/loop.py)
            out.update(self.loop.stats())
        return out

    def clear(self) -> None:
        """Forget path, map, grid, trajectory, scale and TF mode (reset; the queued map works are dropped);
        the next publish_map sends an empty cloud."""
        with self.path.send_lock, self.both_sides(drain=False):
            self.path.clear()
            self.tracker.clear()  # the mapper's stream and map; a new stream logs its TF mode again
            self.tf.release()
            self.map_side.mark_changed()
            self.state.clear_loop()
            self.last_stamp = None

    def destroy(self) -> None:
        """End the map thread (and the loop closer's) and release the publishers (cleanup; no-ops through the
        node's `NodeFacade`)."""
        self.map.stop()
        self.state.stop()
        self.tf.destroy()
        for pub in self._pubs.values():
            self._node.destroy_publisher(pub)
        self._pubs.clear()


def _saved_map_odom(state: dict[str, object]) -> np.ndarray | None:
    """T_map_odom [4, 4] saved with a session (`state.node.map_odom`), None when absent or malformed."""
    node = state.get("node")
    value = node.get("map_odom") if isinstance(node, dict) else None
    try:
        m = np.asarray(value, np.float64)
    except (TypeError, ValueError):
        return None
    return m if m.shape == (4, 4) and np.isfinite(m).all() else None
