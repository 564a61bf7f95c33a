"""The one frame chain: model world -> (re-anchor Sim(3)) -> metric scale -> map -> robot frames.

Frames (docs/robot.md):

* model world: whatever frame the session's `pose_c2w` lives in (the first anchor camera, OpenCV optical
  axes; after a long-stream re-anchor the session has already applied its Sim(3) so the poses stay
  continuous). Units: the model's up-to-scale depth unit.
* metric: model units multiplied by the scale `s` (engine/mapping/scale.py; 1 with `scale.source: none`).
* map (REP-105): in the robot TF modes the base frame at the first frame of the epoch (x forward, y left,
  z up from the base); in `map_to_camera` the first camera rotated to REP-103 body axes.
* robot frames: `T_map_base = T_map_cam · T_base_cam⁻¹` and `T_map_odom = T_map_base · T_odom_base⁻¹`.

The chain is anchored on the first camera: `T_map_cam(t) = T_map_cam0 · [R0ᵀR(t) | s·R0ᵀ(t(t) − t0)]`, so a
new scale estimate moves the trajectory about the first camera and never moves the map origin.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

import numpy as np

from ..geometry import OPTICAL_TO_BODY, Sim3, invert_rigid, rigid


class TfMode(StrEnum):
    """TF modes (REP-105): which single edge the node publishes (docs/robot.md). The one definition of the
    mode names: the node's `tf.mode` choices, the mapper, the tracker, the fusion and the node's TF policy
    use its members. A member equals its string (`TfMode.AUTO == "auto"`), so the `tf.mode` parameter, the
    YAML and saved sessions keep plain strings."""

    AUTO = "auto"
    MAP_TO_ODOM = "map_to_odom"
    MAP_TO_BASE = "map_to_base"
    MAP_TO_CAMERA = "map_to_camera"


#: The modes that read the robot's TF (base -> camera extrinsics; odom -> base too in `map_to_odom`).
ROBOT_TF_MODES = (TfMode.MAP_TO_ODOM, TfMode.MAP_TO_BASE)
#: The modes a stream runs in (`auto` resolved by `choose_tf_mode`).
RESOLVED_TF_MODES = (*ROBOT_TF_MODES, TfMode.MAP_TO_CAMERA)
TF_MODES = tuple(TfMode)


def choose_tf_mode(requested: str, has_extrinsics: bool, has_odometry: bool) -> TfMode:
    """The TF mode of a stream: `requested` unless it is `auto`, which picks `map_to_odom` when both the
    extrinsics (base -> camera) and odometry (odom -> base) are known, `map_to_base` with only the
    extrinsics, else `map_to_camera`."""
    if requested not in TF_MODES:
        raise ValueError(f"tf mode must be one of {', '.join(TF_MODES)}, got '{requested}'")
    if requested != TfMode.AUTO:
        return TfMode(requested)
    if has_extrinsics and has_odometry:
        return TfMode.MAP_TO_ODOM
    return TfMode.MAP_TO_BASE if has_extrinsics else TfMode.MAP_TO_CAMERA


def camera_rest_pose() -> np.ndarray:
    """`T_map_cam0` of `map_to_camera`: the first camera at the origin, optical axes turned to REP-103."""
    return rigid(OPTICAL_TO_BODY, np.zeros(3))


@dataclass
class FrameChain:
    """Model world -> map for one epoch.

    Attributes:
        world_cam0: [4, 4] pose of the first camera in the model world (model units).
        map_cam0: [4, 4] rigid pose of the first camera in the map (metres): the extrinsics `T_base_cam` in
            the robot modes (the map is the first base frame), `camera_rest_pose()` otherwise.
        scale: metres per model unit (> 0).
    """

    world_cam0: np.ndarray
    map_cam0: np.ndarray
    scale: float = 1.0

    def __post_init__(self) -> None:
        self._cam0_world = invert_rigid(self.world_cam0)

    def camera_pose(self, pose_c2w: np.ndarray) -> np.ndarray:
        """[4, 4] model-world camera pose -> `T_map_cam` [4, 4] float64 (metres, optical camera axes)."""
        rel = self._cam0_world @ np.asarray(pose_c2w, np.float64)
        rel[:3, 3] *= self.scale
        return self.map_cam0 @ rel

    def sim3(self) -> Sim3:
        """The chain as a Sim(3) G: model world -> map (``camera_pose(p)`` = ``G.apply_pose(p)``; loop closure
        moves map poses by ``G ∘ C ∘ G⁻¹`` for a correction C of the model world)."""
        r_map, t_map = self.map_cam0[:3, :3], self.map_cam0[:3, 3]
        rotation = r_map @ self._cam0_world[:3, :3]
        return Sim3(rotation, self.scale * (r_map @ self._cam0_world[:3, 3]) + t_map, float(self.scale))

    def world_points(self, xyz: np.ndarray) -> np.ndarray:
        """[N, 3] model-world points -> [N, 3] float32 map points (metres)."""
        xyz = np.asarray(xyz, np.float64)
        cam0 = self.scale * (xyz @ self._cam0_world[:3, :3].T + self._cam0_world[:3, 3])
        return (cam0 @ self.map_cam0[:3, :3].T + self.map_cam0[:3, 3]).astype(np.float32)


def camera_points(
    depth: np.ndarray, intrinsics: np.ndarray, mask: np.ndarray, stride: int
) -> tuple[np.ndarray, np.ndarray]:
    """Points of a z-depth map in the camera (optical) frame.

    Args:
        depth: [H, W] z-depth (NaN / <= 0: none), any unit (the points carry it).
        intrinsics: [3, 3] pixels of `depth`'s grid.
        mask: [H, W] bool of pixels to keep.
        stride: every n-th row and column.
    Returns:
        (xyz [N, 3] float64 in the camera frame, flat [N] int64 row-major pixel indices).
    """
    d = np.asarray(depth)[::stride, ::stride].astype(np.float64)
    keep = np.isfinite(d) & (d > 0) & mask[::stride, ::stride]
    index = np.flatnonzero(keep)  # row-major, as np.nonzero
    rows, cols = np.divmod(index, d.shape[1])
    v, u = rows * stride, cols * stride
    z = d.reshape(-1).take(index)
    k_inv = np.linalg.inv(np.asarray(intrinsics, np.float64))
    cam = np.empty((index.size, 3), np.float64)
    for j in range(3):  # K⁻¹ (u, v, 1) · z, per axis (the same float operations as a broadcast)
        cam[:, j] = (u * k_inv[j, 0] + v * k_inv[j, 1] + k_inv[j, 2]) * z
    return cam, (v * depth.shape[1] + u).astype(np.int64)


def transform_points(pose: np.ndarray, xyz: np.ndarray) -> np.ndarray:
    """[N, 3] points in the child frame of `pose` [4, 4] -> [N, 3] float32 in its parent frame."""
    return (np.asarray(xyz, np.float64) @ pose[:3, :3].T + pose[:3, 3]).astype(np.float32)


def saved_rigid(value: object, name: str) -> np.ndarray:
    """A saved [4, 4] rigid transform (finite, orthonormal rotation, last row 0 0 0 1) or ValueError."""
    m = np.asarray(value, dtype=np.float64)
    if m.shape != (4, 4) or not np.isfinite(m).all():
        raise ValueError(f"saved {name} must be a finite 4x4 matrix")
    if not (np.allclose(m[:3, :3] @ m[:3, :3].T, np.eye(3), atol=1e-6) and np.allclose(m[3], [0, 0, 0, 1])):
        raise ValueError(f"saved {name} is not a rigid transform")
    return m
