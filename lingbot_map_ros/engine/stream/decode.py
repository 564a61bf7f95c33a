"""Decoding of the model's outputs: pose encoding → camera-to-world pose and intrinsics; depth → world points.

Conventions (spec §3.5): ``pose_enc`` = [t_x, t_y, t_z, q_x, q_y, q_z, q_w, fov_h, fov_w] with the quaternion
scalar-last and not normalised; [R | t] is CAMERA-TO-WORLD in OpenCV optical axes (x right, y down,
z forward); FoVs in radians. Intrinsics: fy = (H/2)/tan(fov_h/2), fx = (W/2)/tan(fov_w/2), cx = W/2,
cy = H/2 in pixels of the image the model saw. Unprojection of pixel (u, v) (u = column index, no +0.5):
X_cam = depth · K⁻¹ [u, v, 1]ᵀ, X_world = R · X_cam + t.
"""

from __future__ import annotations

import numpy as np

from ..geometry import quat_xyzw_to_matrix

POSE_ENC_DIM = 9
#: FoVs are clamped to [MIN_FOV_RAD, π − MIN_FOV_RAD]: the model's ReLU can output exactly 0 (the reference
#: then yields an infinite focal length and non-finite points); the clamp keeps intrinsics and points finite.
MIN_FOV_RAD = 1e-3


def _check_pose_enc(pose_enc: np.ndarray) -> np.ndarray:
    pose_enc = np.asarray(pose_enc, dtype=np.float64)
    if pose_enc.shape[-1] != POSE_ENC_DIM:
        raise ValueError(f"expected pose_enc of shape [..., {POSE_ENC_DIM}], got {pose_enc.shape}")
    return pose_enc


def pose_encoding_to_c2w(pose_enc: np.ndarray) -> np.ndarray:
    """Camera-to-world poses from pose encodings.

    Args:
        pose_enc: [..., 9] (float32 or float64).
    Returns:
        [..., 4, 4] float64 homogeneous camera → world transforms (OpenCV optical camera axes).
    """
    pose_enc = _check_pose_enc(pose_enc)
    c2w = np.zeros((*pose_enc.shape[:-1], 4, 4))
    c2w[..., :3, :3] = quat_xyzw_to_matrix(pose_enc[..., 3:7])
    c2w[..., :3, 3] = pose_enc[..., :3]
    c2w[..., 3, 3] = 1.0
    return c2w


def fov_to_intrinsics(pose_enc: np.ndarray, image_hw: tuple[int, int]) -> np.ndarray:
    """Pinhole intrinsics in pixels of the model input from the FoV part of the pose encoding.

    Args:
        pose_enc: [..., 9]; entries 7, 8 are fov_h, fov_w in radians.
        image_hw: (H, W) of the model input (pre-processed image).
    Returns:
        [..., 3, 3] float64 with fx, fy, cx = W/2, cy = H/2; FoVs clamped to [MIN_FOV_RAD, π − MIN_FOV_RAD].
    """
    pose_enc = _check_pose_enc(pose_enc)
    h, w = image_hw
    fov = np.clip(pose_enc[..., 7:9], MIN_FOV_RAD, np.pi - MIN_FOV_RAD)
    k = np.zeros((*pose_enc.shape[:-1], 3, 3))
    k[..., 0, 0] = (w / 2.0) / np.tan(fov[..., 1] / 2.0)
    k[..., 1, 1] = (h / 2.0) / np.tan(fov[..., 0] / 2.0)
    k[..., 0, 2] = w / 2.0
    k[..., 1, 2] = h / 2.0
    k[..., 2, 2] = 1.0
    return k


def unproject_depth(
    depth: np.ndarray,
    intrinsics: np.ndarray,
    c2w: np.ndarray,
    mask: np.ndarray | None = None,
    stride: int = 1,
) -> tuple[np.ndarray, np.ndarray]:
    """World points of a z-depth map.

    Args:
        depth: [H, W] z-depth along the optical axis (NaN / ≤ 0 = no measurement).
        intrinsics: [3, 3] in pixels of ``depth``'s grid.
        c2w: [4, 4] camera → world.
        mask: optional [H, W] bool of pixels to keep (before striding).
        stride: keep every ``stride``-th row and column.
    Returns:
        (xyz [N, 3] float32 world points, flat [N] int64 row-major indices of the kept pixels in [H, W]).
    """
    depth = np.asarray(depth)
    if depth.ndim != 2:
        raise ValueError(f"expected depth of shape [H, W], got {depth.shape}")
    w = depth.shape[1]
    if stride < 1:
        raise ValueError(f"expected stride >= 1, got {stride}")
    d = depth[::stride, ::stride].astype(np.float64)
    keep = np.isfinite(d) & (d > 0)
    if mask is not None:
        if mask.shape != depth.shape:
            raise ValueError(f"expected mask of shape {depth.shape}, got {mask.shape}")
        keep &= mask[::stride, ::stride]
    rows, cols = np.nonzero(keep)
    v, u = rows * stride, cols * stride
    # Rays of the kept pixels only: K⁻¹ [u, v, 1]ᵀ, then scaled by depth and moved to the world.
    k_inv = np.linalg.inv(np.asarray(intrinsics, dtype=np.float64))
    cam = (u[:, None] * k_inv[:, 0] + v[:, None] * k_inv[:, 1] + k_inv[:, 2]) * d[rows, cols, None]
    c2w = np.asarray(c2w, dtype=np.float64)
    world = cam @ c2w[:3, :3].T + c2w[:3, 3]
    return world.astype(np.float32), (v * w + u).astype(np.int64)
