"""The options of one camera's outputs (`OutputConfig`, from the node's parameters) and their QoS."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy

from ...engine.face import CovarianceConfig, GridConfig, MapperConfig, ScaleConfig, VoxelMapConfig
from ..params.declare import NodeParams, owner_values, param_reader

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
    """One camera's outputs: the node's parameters (`params`: frames, TF mode, publishing switches) and the
    mapper's settings (`mapper`, built from the parameters of its settings), each held once, plus what
    differs per camera. The read-only attributes below name the parameter they read."""

    params: NodeParams
    mapper: MapperConfig
    #: Several cameras (docs/node.md): the map frame of this camera while it is mapped without the robot
    #: (map_to_camera), e.g. `map_front`; empty: `map_frame` always.
    camera_map_frame: str = ""
    #: Whether this camera publishes the robot TF edge (map -> odom / map -> base): only one camera may.
    publish_robot_tf: bool = True

    @staticmethod
    def from_params(p: NodeParams) -> OutputConfig:
        """The outputs of one of `len(p.cameras)` cameras (they share the map point budget equally)."""
        value = param_reader(p)
        voxel = VoxelMapConfig(**owner_values(VoxelMapConfig, value))
        mapper = MapperConfig(
            voxel=replace(voxel, max_points=max(1, voxel.max_points // len(p.cameras))),
            scale=ScaleConfig(**owner_values(ScaleConfig, value), min_conf=voxel.conf_threshold),
            grid=GridConfig(**owner_values(GridConfig, value)),
            covariance=CovarianceConfig(**owner_values(CovarianceConfig, value)),
            **owner_values(MapperConfig, value),
        )
        return OutputConfig(p, mapper)

    def with_params(self, **changes: Any) -> OutputConfig:
        """This camera's outputs with some parameters changed (`NodeParams` field names)."""
        fresh = OutputConfig.from_params(replace(self.params, **changes))
        return replace(fresh, camera_map_frame=self.camera_map_frame, publish_robot_tf=self.publish_robot_tf)

    @property
    def map_frame(self) -> str:
        return self.params.map_frame

    @property
    def odom_frame(self) -> str:
        return self.params.odom_frame

    @property
    def base_frame(self) -> str:
        return self.params.base_frame

    @property
    def camera_frame(self) -> str:
        """Empty: the input header's frame_id."""
        return self.params.camera_frame

    @property
    def tf_mode(self) -> str:
        return self.params.tf_mode

    @property
    def tf_timeout(self) -> float:
        return self.params.tf_timeout

    @property
    def tf_transform_tolerance(self) -> float:
        return self.params.tf_transform_tolerance

    @property
    def publish_depth(self) -> bool:
        return self.params.publish_depth

    @property
    def publish_frame_cloud(self) -> bool:
        return self.params.publish_frame_cloud

    @property
    def mapping_enabled(self) -> bool:
        return self.params.mapping_enabled

    @property
    def tracking_health(self) -> bool:
        return self.params.tracking_health

    @property
    def path_max_length(self) -> int:
        return self.mapper.path_max_length

    @property
    def trajectory_max_poses(self) -> int:
        return self.mapper.trajectory_max_poses

    @property
    def map_conf_threshold(self) -> float:
        return self.mapper.voxel.conf_threshold

    @property
    def map_stride(self) -> int:
        return self.mapper.voxel.pixel_stride

    @property
    def scale(self) -> ScaleConfig:
        return self.mapper.scale

    @property
    def map_queue_size(self) -> int:
        """Map works waiting for the map thread (ros/outputs/map_worker.py); a full queue drops its oldest."""
        return self.params.kv_cache_scale_frames + MAP_QUEUE_SLACK

    def voxel_map_config(self) -> VoxelMapConfig:
        """The accumulated map's settings (voxel size, confidence threshold, pixel stride, point budget)."""
        return self.mapper.voxel

    def mapper_config(self) -> MapperConfig:
        return self.mapper
