"""The options of one camera's outputs (`OutputConfig`, from the node's parameters) and their QoS."""

from __future__ import annotations

from dataclasses import dataclass

from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy

from ..engine.grid import GridConfig
from ..engine.mapper import CovarianceConfig, MapperConfig
from ..engine.mapping import VoxelMapConfig
from ..engine.scale import ScaleConfig
from .params import NodeParams

#: Map works that may wait for a camera's map thread beyond the anchor phase's (published back to back).
MAP_QUEUE_SLACK = 8

#: ~/map_cloud and ~/grid: latched for late subscribers (RViz, Nav2 started after the node).
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
    odom_frame: str = "odom"
    base_frame: str = "base_link"
    tf_mode: str = "map_to_camera"
    tf_timeout: float = 0.2
    tf_transform_tolerance: float = 0.1
    scale: ScaleConfig = ScaleConfig()
    grid: GridConfig = GridConfig()
    covariance: CovarianceConfig = CovarianceConfig()
    mapping_enabled: bool = True
    #: Several cameras (docs/node.md): the map frame of this camera while it is mapped without the robot
    #: (map_to_camera), e.g. `map_front`; empty: `map_frame` always.
    camera_map_frame: str = ""
    #: Whether this camera publishes the robot TF edge (map -> odom / map -> base): only one camera may.
    publish_robot_tf: bool = True
    #: Map works waiting for the map thread (ros/map_worker.py); a full queue drops its oldest.
    map_queue_size: int = 8 + MAP_QUEUE_SLACK

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
            map_max_points=max(1, p.map_max_points // len(p.cameras)),  # one budget shared by all cameras
            publish_depth=p.publish_depth,
            publish_frame_cloud=p.publish_frame_cloud,
            odom_frame=p.odom_frame,
            base_frame=p.base_frame,
            tf_mode=p.tf_mode,
            tf_timeout=p.tf_timeout,
            tf_transform_tolerance=p.tf_transform_tolerance,
            scale=ScaleConfig(
                source=p.scale_source,
                factor=p.scale_factor,
                min_baseline=p.scale_min_baseline,
                min_samples=p.scale_min_samples,
                window=p.scale_window,
                min_conf=p.map_conf_threshold,
                max_change=p.scale_max_change,
            ),
            grid=GridConfig(
                resolution=p.grid_resolution, min_height=p.grid_min_height, max_height=p.grid_max_height
            ),
            covariance=CovarianceConfig(
                position_std=p.covariance_position_std,
                orientation_std=p.covariance_orientation_std,
                unscaled_factor=p.covariance_unscaled_factor,
                twist_min_dt=p.twist_min_dt,
            ),
            mapping_enabled=p.mapping_enabled,
            map_queue_size=p.kv_cache_scale_frames + MAP_QUEUE_SLACK,
        )

    def voxel_map_config(self) -> VoxelMapConfig:
        """The accumulated map's settings (voxel size, confidence threshold, pixel stride, point budget)."""
        return VoxelMapConfig(
            voxel_size=self.map_voxel_size,
            conf_threshold=self.map_conf_threshold,
            pixel_stride=self.map_stride,
            max_points=self.map_max_points,
        )

    def mapper_config(self) -> MapperConfig:
        return MapperConfig(
            voxel=self.voxel_map_config(),
            scale=self.scale,
            grid=self.grid,
            covariance=self.covariance,
            path_max_length=self.path_max_length,
            trajectory_max_poses=self.trajectory_max_poses,
        )
