"""Publishers of the node's outputs and the per-stream state behind them (path, map, last pose).

`MappingOutputs` turns each `FrameResult` (model world = first anchor camera, OpenCV optical axes) into TF
`map_frame -> camera`, `~/odometry`, `~/path`, `~/depth`, `~/camera_info` and `~/frame_cloud`, all stamped
with the input image's stamp, and accumulates the map that `~/map_cloud` publishes. It is driven from the
inference thread (publish) and the map timer (map cloud); `lock` guards the path and the map.
"""

from __future__ import annotations

import pathlib
import threading
from collections import deque
from dataclasses import dataclass

import numpy as np
from builtin_interfaces.msg import Time
from geometry_msgs.msg import PoseStamped
from nav_msgs.msg import Odometry, Path
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import CameraInfo, Image, PointCloud2
from std_msgs.msg import Header

from ..engine.mapping import Trajectory, VoxelMap, VoxelMapConfig, write_ply, write_tum
from ..engine.result import FrameResult
from .conversions import depth_to_image, points_to_cloud
from .geometry import (
    body_twist,
    camera_info_msg,
    odometry_msg,
    pose_stamped_msg,
    transform_msg,
    world_to_map_points,
    world_to_map_pose,
)
from .params import NodeParams
from .tf import TfBroadcaster

#: ~/map_cloud: latched for late subscribers (RViz started after the node).
MAP_QOS = QoSProfile(
    depth=1,
    history=HistoryPolicy.KEEP_LAST,
    reliability=ReliabilityPolicy.RELIABLE,
    durability=DurabilityPolicy.TRANSIENT_LOCAL,
)
#: Per-frame outputs: reliable, a few frames deep (the anchor phase publishes its frames back to back).
FRAME_QOS = QoSProfile(depth=10, history=HistoryPolicy.KEEP_LAST, reliability=ReliabilityPolicy.RELIABLE)


@dataclass(frozen=True)
class OutputConfig:
    """Frames and options of the outputs (from `NodeParams`)."""

    map_frame: str
    camera_frame: str  # empty: the input header's frame_id
    path_max_length: int
    trajectory_max_poses: int
    map_conf_threshold: float
    map_stride: int
    map_voxel_size: float
    map_max_points: int
    publish_depth: bool
    publish_frame_cloud: bool

    @staticmethod
    def from_params(p: NodeParams) -> OutputConfig:
        return OutputConfig(
            map_frame=p.map_frame,
            camera_frame=p.camera_frame,
            path_max_length=p.path_max_length,
            trajectory_max_poses=p.trajectory_max_poses,
            map_conf_threshold=p.map_conf_threshold,
            map_stride=p.map_stride,
            map_voxel_size=p.map_voxel_size,
            map_max_points=p.map_max_points,
            publish_depth=p.publish_depth,
            publish_frame_cloud=p.publish_frame_cloud,
        )

    def voxel_map_config(self) -> VoxelMapConfig:
        """The accumulated map's settings (voxel size, confidence threshold, pixel stride, point budget)."""
        return VoxelMapConfig(
            voxel_size=self.map_voxel_size,
            conf_threshold=self.map_conf_threshold,
            pixel_stride=self.map_stride,
            max_points=self.map_max_points,
        )


def stamp_seconds(stamp: Time) -> float:
    """builtin_interfaces/Time -> float seconds."""
    return stamp.sec + 1e-9 * stamp.nanosec


class MappingOutputs:
    """Create the output publishers on `node` and publish `FrameResult`s.

    Args:
        node: the (activated) lifecycle node; publishers live in its private namespace (`~/...`).
        config: frames and options; `update_config` swaps in live changes.
    """

    def __init__(self, node: Node, config: OutputConfig) -> None:
        self._node = node
        self.config = config
        self.lock = threading.Lock()
        self._tf = TfBroadcaster(node)
        self._pubs = {
            "odometry": node.create_publisher(Odometry, "~/odometry", FRAME_QOS),
            "path": node.create_publisher(Path, "~/path", FRAME_QOS),
            "depth": node.create_publisher(Image, "~/depth", FRAME_QOS),
            "camera_info": node.create_publisher(CameraInfo, "~/camera_info", FRAME_QOS),
            "frame_cloud": node.create_publisher(PointCloud2, "~/frame_cloud", FRAME_QOS),
            "map_cloud": node.create_publisher(PointCloud2, "~/map_cloud", MAP_QOS),
        }
        self._path: deque[PoseStamped] = deque(maxlen=config.path_max_length)
        self._map = VoxelMap(config.voxel_map_config())
        self._map_dirty = False
        # Only its full log (TUM, ~/save_map) is used: the last `trajectory.max_poses` poses since a reset.
        self._trajectory = Trajectory(
            max_length=1, keep_full_history=True, max_history=config.trajectory_max_poses
        )
        self._prev: tuple[np.ndarray, float] | None = None  # (pose in map, stamp s) of the last frame
        self._epoch: int | None = None
        self.frames_published = 0
        self.last_stamp: Time | None = None  # stamp of the last published frame (map cloud stamp)

    def update_config(self, config: OutputConfig) -> None:
        """Apply live options (path length, map confidence threshold, stride) to the following frames."""
        with self.lock:
            if config.path_max_length != self.config.path_max_length:
                self._path = deque(self._path, maxlen=config.path_max_length)
            self.config = config

    def camera_frame(self, header: Header) -> str:
        """The TF child frame of a frame: the `camera_frame` parameter, else the image's frame_id."""
        return self.config.camera_frame or header.frame_id or "camera_optical_frame"

    def publish(self, result: FrameResult, header: Header) -> None:
        """Publish one `FrameResult` whose input image had `header` (stamp and frame kept)."""
        cfg = self.config
        if self._epoch is not None and result.epoch != self._epoch:
            self.clear()  # the engine re-anchored by itself (e.g. the resolution changed)
        self._epoch = result.epoch
        camera = self.camera_frame(header)
        cam_header = Header(stamp=header.stamp, frame_id=camera)
        map_header = Header(stamp=header.stamp, frame_id=cfg.map_frame)
        pose = world_to_map_pose(result.pose_c2w)
        stamp_s = stamp_seconds(header.stamp)
        twist = (
            body_twist(self._prev[0], pose, stamp_s - self._prev[1])
            if self._prev
            else body_twist(pose, pose, 0)
        )
        self._prev = (pose, stamp_s)

        self._tf.send(transform_msg(pose, header.stamp, cfg.map_frame, camera))
        self._pubs["odometry"].publish(odometry_msg(pose, twist, map_header, camera))
        height, width = result.image_hw
        self._pubs["camera_info"].publish(camera_info_msg(result.intrinsics, width, height, cam_header))
        if cfg.publish_depth:
            self._pubs["depth"].publish(depth_to_image(result.depth, cam_header))
        xyz, rgb = result.points(conf_threshold=cfg.map_conf_threshold, stride=cfg.map_stride)
        xyz = world_to_map_points(xyz)
        if cfg.publish_frame_cloud:
            self._pubs["frame_cloud"].publish(points_to_cloud(xyz, rgb, map_header))
        with self.lock:
            self._path.append(pose_stamped_msg(pose, map_header))
            self._trajectory.append(stamp_s, pose)
            path = Path(header=map_header, poses=list(self._path))
            if result.is_keyframe and len(xyz):
                self._map.insert(xyz, rgb)
                self._map_dirty = True
        self._pubs["path"].publish(path)
        self.frames_published += 1
        self.last_stamp = header.stamp

    def publish_map(self, stamp: Time, force: bool = False) -> int:
        """Publish ~/map_cloud if the map changed since the last call (or `force`); returns its size."""
        with self.lock:
            if not (self._map_dirty or force):
                return -1
            xyz, rgb = self._map.points()
            self._map_dirty = False
        header = Header(stamp=stamp, frame_id=self.config.map_frame)
        self._pubs["map_cloud"].publish(points_to_cloud(xyz, rgb, header))
        return len(xyz)

    def publish_cleared(self, stamp: Time) -> None:
        """After `clear`: publish an empty path and an empty map so viewers drop the old ones."""
        header = Header(stamp=stamp, frame_id=self.config.map_frame)
        self._pubs["path"].publish(Path(header=header))
        self.publish_map(stamp, force=True)

    def snapshot(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]:
        """Map and trajectory (the last `trajectory.max_poses` poses) since the last reset, in map_frame.

        Returns:
            `(xyz [N, 3] float32, rgb [N, 3] uint8, stamps [M] float64 s, rows [M, 7] tx ty tz qx qy qz qw,
            poses dropped since the reset (oldest first) to keep M <= trajectory.max_poses)`.
        """
        with self.lock:
            xyz, rgb = self._map.points()
            stamps, rows = self._trajectory.full_history()
            dropped = self._trajectory.history_dropped
        return xyz, rgb, stamps, rows, dropped

    def save(self, out_dir: pathlib.Path, tag: str) -> str:
        """Write `map_<tag>.ply` and `trajectory_<tag>.tum` (atomic) into `out_dir`; returns the report line.

        Raises:
            OSError: the directory cannot be created or written.
        """
        xyz, rgb, stamps, rows, dropped = self.snapshot()
        out_dir.mkdir(parents=True, exist_ok=True)
        ply = write_ply(out_dir / f"map_{tag}.ply", xyz, rgb)
        tum = write_tum(out_dir / f"trajectory_{tag}.tum", stamps, rows)
        report = f"map: {ply} ({len(xyz)} points); trajectory: {tum} ({len(stamps)} poses)"
        if dropped:
            report += (
                f"; the oldest {dropped} poses since the reset were dropped "
                f"(trajectory.max_poses = {self.config.trajectory_max_poses})"
            )
        return report

    def map_size(self) -> int:
        with self.lock:
            return len(self._map)

    def trajectory_stats(self) -> dict[str, int]:
        """For /diagnostics: `trajectory_poses` kept for ~/save_map, `trajectory_dropped` (oldest, since the
        last reset, beyond `trajectory.max_poses`)."""
        with self.lock:
            return {
                "trajectory_poses": self._trajectory.history_length,
                "trajectory_dropped": self._trajectory.history_dropped,
            }

    def clear(self) -> None:
        """Forget path, map and last pose (reset); the next publish_map sends an empty cloud."""
        with self.lock:
            self._path.clear()
            self._trajectory.clear()
            self._map.clear()
            self._map_dirty = True
            self._prev = None
            self._epoch = None
            self.last_stamp = None

    def destroy(self) -> None:
        """Release all publishers (deactivate)."""
        self._tf.destroy()
        for pub in self._pubs.values():
            self._node.destroy_publisher(pub)
        self._pubs.clear()
