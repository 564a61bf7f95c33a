"""Rotation and similarity-transform helpers (numpy, float64).

Quaternions are scalar-last (x, y, z, w), as the model's pose encoding, ROS messages and the TUM format.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


def quat_xyzw_to_matrix(q: np.ndarray) -> np.ndarray:
    """Rotation matrices of (possibly non-unit) quaternions, as the reference's ``quat_to_mat``.

    The reference divides by |q|² (``two_s = 2 / |q|²``), so a non-unit quaternion still yields a rotation.

    Args:
        q: [..., 4] quaternions (x, y, z, w).
    Returns:
        [..., 3, 3] float64 rotation matrices.
    Raises:
        ValueError: wrong last dimension or a zero quaternion.
    """
    q = np.asarray(q, dtype=np.float64)
    if q.shape[-1] != 4:
        raise ValueError(f"expected quaternions of shape [..., 4] (x, y, z, w), got {q.shape}")
    x, y, z, w = np.moveaxis(q, -1, 0)
    norm2 = x * x + y * y + z * z + w * w
    if np.any(norm2 <= 0.0):
        raise ValueError("expected non-zero quaternions, got |q| = 0")
    two_s = 2.0 / norm2
    rot = np.stack(
        [
            1 - two_s * (y * y + z * z),
            two_s * (x * y - z * w),
            two_s * (x * z + y * w),
            two_s * (x * y + z * w),
            1 - two_s * (x * x + z * z),
            two_s * (y * z - x * w),
            two_s * (x * z - y * w),
            two_s * (y * z + x * w),
            1 - two_s * (x * x + y * y),
        ],
        axis=-1,
    )
    return rot.reshape(*q.shape[:-1], 3, 3)


def matrix_to_quat_xyzw(rot: np.ndarray) -> np.ndarray:
    """Unit quaternions (x, y, z, w) with w ≥ 0 of rotation matrices.

    Args:
        rot: [..., 3, 3] rotation matrices.
    Returns:
        [..., 4] float64.
    """
    rot = np.asarray(rot, dtype=np.float64)
    if rot.shape[-2:] != (3, 3):
        raise ValueError(f"expected rotation matrices of shape [..., 3, 3], got {rot.shape}")
    m = rot.reshape(-1, 3, 3)
    if m.shape[0] == 1:  # one pose a frame (the node's pose path): 10x faster in floats, bit for bit the same
        return np.array(_one_quat_xyzw(m[0].tolist())).reshape(*rot.shape[:-2], 4)
    # Shepperd: pick the largest of 4w², 4x², 4y², 4z² for a well-conditioned square root.
    diag = np.stack([m[:, 0, 0], m[:, 1, 1], m[:, 2, 2]], axis=1)
    trace = diag.sum(axis=1)
    cand = np.stack(
        [1 + trace, 1 + 2 * diag[:, 0] - trace, 1 + 2 * diag[:, 1] - trace, 1 + 2 * diag[:, 2] - trace],
        axis=1,
    )
    s = 2.0 * np.sqrt(np.maximum(cand, 1e-300))  # [N, 4]
    r = m
    options = np.stack(
        [
            [
                (r[:, 2, 1] - r[:, 1, 2]) / s[:, 0],
                (r[:, 0, 2] - r[:, 2, 0]) / s[:, 0],
                (r[:, 1, 0] - r[:, 0, 1]) / s[:, 0],
                s[:, 0] / 4,
            ],
            [
                s[:, 1] / 4,
                (r[:, 0, 1] + r[:, 1, 0]) / s[:, 1],
                (r[:, 0, 2] + r[:, 2, 0]) / s[:, 1],
                (r[:, 2, 1] - r[:, 1, 2]) / s[:, 1],
            ],
            [
                (r[:, 0, 1] + r[:, 1, 0]) / s[:, 2],
                s[:, 2] / 4,
                (r[:, 1, 2] + r[:, 2, 1]) / s[:, 2],
                (r[:, 0, 2] - r[:, 2, 0]) / s[:, 2],
            ],
            [
                (r[:, 0, 2] + r[:, 2, 0]) / s[:, 3],
                (r[:, 1, 2] + r[:, 2, 1]) / s[:, 3],
                s[:, 3] / 4,
                (r[:, 1, 0] - r[:, 0, 1]) / s[:, 3],
            ],
        ]
    )  # [4 candidates, 4 components, N]
    best = cand.argmax(axis=1)
    q = options[best, :, np.arange(m.shape[0])]  # [N, 4]
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    q[q[:, 3] < 0] *= -1.0
    return q.reshape(*rot.shape[:-2], 4)


def _one_quat_xyzw(r: list[list[float]]) -> list[float]:
    """`matrix_to_quat_xyzw` of one [3, 3] rotation (nested lists) in Python floats: the same operations in
    the same order as the batched path (correctly rounded each), so the same bits (test_engine_decode.py)."""
    d0, d1, d2 = r[0][0], r[1][1], r[2][2]
    trace = d0 + d1 + d2
    cand = [1 + trace, 1 + 2 * d0 - trace, 1 + 2 * d1 - trace, 1 + 2 * d2 - trace]
    best = cand.index(max(cand))
    s = 2.0 * math.sqrt(max(cand[best], 1e-300))
    if best == 0:
        q = [(r[2][1] - r[1][2]) / s, (r[0][2] - r[2][0]) / s, (r[1][0] - r[0][1]) / s, s / 4]
    elif best == 1:
        q = [s / 4, (r[0][1] + r[1][0]) / s, (r[0][2] + r[2][0]) / s, (r[2][1] - r[1][2]) / s]
    elif best == 2:
        q = [(r[0][1] + r[1][0]) / s, s / 4, (r[1][2] + r[2][1]) / s, (r[0][2] - r[2][0]) / s]
    else:
        q = [(r[0][2] + r[2][0]) / s, (r[1][2] + r[2][1]) / s, s / 4, (r[1][0] - r[0][1]) / s]
    norm = math.sqrt(q[0] * q[0] + q[1] * q[1] + q[2] * q[2] + q[3] * q[3])
    q = [c / norm for c in q]
    return [-c for c in q] if q[3] < 0 else q


def rotation_angle(rot: np.ndarray) -> np.ndarray:
    """Rotation angle in radians of [..., 3, 3] rotation matrices."""
    trace = np.trace(np.asarray(rot, dtype=np.float64), axis1=-2, axis2=-1)
    return np.arccos(np.clip((trace - 1.0) / 2.0, -1.0, 1.0))


@dataclass(frozen=True)
class Sim3:
    """Similarity transform ``x ↦ scale · rotation · x + translation`` (float64).

    Attributes:
        rotation: [3, 3].
        translation: [3].
        scale: > 0.
    """

    rotation: np.ndarray
    translation: np.ndarray
    scale: float = 1.0

    @staticmethod
    def identity() -> Sim3:
        return Sim3(np.eye(3), np.zeros(3), 1.0)

    def __matmul__(self, other: Sim3) -> Sim3:
        """``self ∘ other`` (apply `other`, then `self`): the group product."""
        return Sim3(
            self.rotation @ other.rotation,
            self.scale * (self.rotation @ other.translation) + self.translation,
            self.scale * other.scale,
        )

    def inverse(self) -> Sim3:
        """``self⁻¹``: ``x ↦ (Rᵀ x - Rᵀ t) / s``."""
        rot = self.rotation.T
        return Sim3(rot, -(rot @ self.translation) / self.scale, 1.0 / self.scale)

    def apply_points(self, xyz: np.ndarray) -> np.ndarray:
        """[N, 3] points → [N, 3] (same dtype as the input)."""
        out = self.scale * (np.asarray(xyz, dtype=np.float64) @ self.rotation.T) + self.translation
        return out.astype(np.asarray(xyz).dtype, copy=False)

    def apply_pose(self, c2w: np.ndarray) -> np.ndarray:
        """Carry a camera-to-world pose [..., 4, 4] into the target frame.

        The camera keeps a rigid pose: R' = R_s·R, t' = s·R_s·t + t_s. Depths measured in the source frame
        must be multiplied by ``scale`` to stay consistent with the transformed pose.
        """
        c2w = np.asarray(c2w, dtype=np.float64)
        out = np.array(c2w, copy=True)
        out[..., :3, :3] = self.rotation @ c2w[..., :3, :3]
        out[..., :3, 3] = self.scale * (c2w[..., :3, 3] @ self.rotation.T) + self.translation
        return out


#: Rotation taking OpenCV optical axes (x right, y down, z forward) to REP-103 body axes (x forward, y left,
#: z up): x_b = z_o, y_b = -x_o, z_b = -y_o. `T_body_optical[:3, :3]`.
OPTICAL_TO_BODY = np.array([[0.0, 0.0, 1.0], [-1.0, 0.0, 0.0], [0.0, -1.0, 0.0]])


def rigid(rotation: np.ndarray, translation: np.ndarray) -> np.ndarray:
    """[4, 4] float64 homogeneous transform from a [3, 3] rotation and a [3] translation."""
    out = np.eye(4)
    out[:3, :3] = rotation
    out[:3, 3] = translation
    return out


def invert_rigid(pose: np.ndarray) -> np.ndarray:
    """Inverse of a rigid [4, 4] transform (Rᵀ, -Rᵀt), float64."""
    pose = np.asarray(pose, dtype=np.float64)
    out = np.eye(4)
    out[:3, :3] = pose[:3, :3].T
    out[:3, 3] = -pose[:3, :3].T @ pose[:3, 3]
    return out


def pose_from_quat(translation: np.ndarray, quat_xyzw: np.ndarray) -> np.ndarray:
    """[4, 4] float64 from a [3] translation and an (x, y, z, w) quaternion."""
    return rigid(quat_xyzw_to_matrix(quat_xyzw), np.asarray(translation, dtype=np.float64))


def rotation_vector(rot: np.ndarray) -> np.ndarray:
    """Axis · angle [3] (radians) of a [3, 3] rotation; robust near 0 and π."""
    rot = np.asarray(rot, dtype=np.float64)
    q = matrix_to_quat_xyzw(rot)
    s = np.linalg.norm(q[:3])
    if s < 1e-12:
        return np.zeros(3)
    angle = 2.0 * np.arctan2(s, q[3])
    return q[:3] / s * angle


def slerp(q0: np.ndarray, q1: np.ndarray, alpha: float) -> np.ndarray:
    """Spherical interpolation of unit quaternions (x, y, z, w) at ``alpha`` in [0, 1] (shortest arc)."""
    q0 = np.asarray(q0, np.float64) / np.linalg.norm(q0)
    q1 = np.asarray(q1, np.float64) / np.linalg.norm(q1)
    dot = float(q0 @ q1)
    if dot < 0.0:
        q1, dot = -q1, -dot
    if dot > 0.9995:
        q = q0 + alpha * (q1 - q0)
        return q / np.linalg.norm(q)
    theta = np.arccos(np.clip(dot, -1.0, 1.0))
    return (np.sin((1 - alpha) * theta) * q0 + np.sin(alpha * theta) * q1) / np.sin(theta)


def interpolate_pose(pose0: np.ndarray, pose1: np.ndarray, alpha: float) -> np.ndarray:
    """[4, 4] pose between two rigid poses: linear translation, slerp rotation (tf2's interpolation)."""
    q = slerp(matrix_to_quat_xyzw(pose0[:3, :3]), matrix_to_quat_xyzw(pose1[:3, :3]), alpha)
    t = (1.0 - alpha) * np.asarray(pose0, np.float64)[:3, 3] + alpha * np.asarray(pose1, np.float64)[:3, 3]
    return rigid(quat_xyzw_to_matrix(q), t)
