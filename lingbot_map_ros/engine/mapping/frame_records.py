"""What goes in and out of `Mapper` per frame (engine/mapping/mapper.py): `RobotSample` (the robot's TF at
the image stamp, in), `PosedFrame` (the pose side's outputs, `Mapper.locate`), `MapWork` (what the map side
needs of a located frame) and `FrameCloud` (the map side's outputs, `Mapper.integrate`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .frames import FrameChain, TfMode
from .scale import ScaleState
from .voxel_map import VoxelMapConfig


@dataclass(frozen=True)
class RobotSample:
    """TF at the image stamp: `mode` (a `TfMode` other than auto), `base_cam` [4, 4] T_base_cam (robot modes),
    `odom_base` [4, 4] T_odom_base (map_to_odom, or scale from odometry), None where not looked up;
    `map_base` [4, 4] T_map_base in a map frame that already exists (another camera's, robot modes): a new
    epoch then starts in that map frame instead of one at the base's pose (several cameras, one map)."""

    mode: TfMode = TfMode.MAP_TO_CAMERA
    base_cam: np.ndarray | None = None
    odom_base: np.ndarray | None = None
    map_base: np.ndarray | None = None


@dataclass
class PosedFrame:
    """One frame's pose outputs (`Mapper.locate`), all in metres (model units with `scale.source: none`).

    Attributes:
        stamp_s: image stamp.
        new_epoch: the first frame of a new map frame: consumers clear paths and maps first.
        mode: TF mode of the epoch.
        camera_pose: [4, 4] T_map_cam (optical axes).
        body_pose: [4, 4] the odometry pose: T_map_base in the robot modes, T_map_cam in map_to_camera.
        map_odom: [4, 4] T_map_odom (map_to_odom only).
        twist: [6] (vx, vy, vz, wx, wy, wz) of the body frame in the body frame.
        pose_covariance / twist_covariance: [6, 6] (x, y, z, rot x, rot y, rot z), row-major in messages.
        depth: [H, W] float32 metric z-depth; intrinsics [3, 3].
        scale: the scale estimate after this frame.
    """

    stamp_s: float
    index: int
    epoch: int
    is_keyframe: bool
    new_epoch: bool
    mode: str
    camera_pose: np.ndarray
    body_pose: np.ndarray
    map_odom: np.ndarray | None
    twist: np.ndarray
    pose_covariance: np.ndarray
    twist_covariance: np.ndarray
    depth: np.ndarray | None
    intrinsics: np.ndarray
    scale: ScaleState
    image_hw: tuple[int, int]


@dataclass(frozen=True)
class MapWork:
    """What `Mapper.integrate` needs of one located frame, as the pose side was at that frame: `stream`, the
    camera's stream token it was stepped in (`CameraState.stream`: a work of a stream left since is dropped,
    `MapSide.integrate`), `epoch` (the session's, `FrameResult.epoch`: another than the map's clears the map
    first), `is_keyframe`, `pose_c2w` [4, 4] (model world),
    `camera_pose` [4, 4] T_map_cam, metric `depth` [H, W] float32, `depth_conf` [H, W], `intrinsics` [3, 3],
    `rgb` [H, W, 3] uint8, `voxel` (threshold and stride then: live parameters), a copy of the frame `chain`
    (its scale), `scale_converged` and `mapping_enabled` then."""

    stream: int
    epoch: int
    is_keyframe: bool
    pose_c2w: np.ndarray
    camera_pose: np.ndarray
    depth: np.ndarray | None
    depth_conf: np.ndarray | None
    intrinsics: np.ndarray
    rgb: np.ndarray
    voxel: VoxelMapConfig
    chain: FrameChain
    scale_converged: bool
    mapping_enabled: bool


@dataclass
class FrameCloud:
    """The map side of one frame (`integrate`): `points` [N, 3] float32 in the map frame (confident pixels,
    `voxel.pixel_stride`), `colors` [N, 3] uint8, `map_changed` (the voxel map / grid changed), `map_cleared`
    (the work was of a new epoch: the map of the old one was cleared first)."""

    points: np.ndarray
    colors: np.ndarray
    map_changed: bool
    map_cleared: bool = False
