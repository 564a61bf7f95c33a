"""Sim(3) helpers of the loop closure: compose, invert, interpolate `geometry.Sim3`, and convert to gtsam.

`Sim3(rotation R, translation t, scale s)` maps ``x -> s R x + t`` (engine/geometry.py). gtsam's
`Similarity3(R, t_g, s)` maps ``x -> s (R x + t_g)``, so ``t_g = t / s``; both compose as groups.
A keyframe pose in the map is a `Sim3` taking points of its camera (optical axes, the stream's units at that
keyframe) into the map: its rigid part is the camera pose, its scale the local unit of the stream there.
"""

from __future__ import annotations

import numpy as np

from ..geometry import Sim3, matrix_to_quat_xyzw, quat_xyzw_to_matrix, rotation_vector, slerp
from .gtsam_import import gtsam


def compose(a: Sim3, b: Sim3) -> Sim3:
    """``a ∘ b`` (apply b, then a)."""
    return Sim3(
        a.rotation @ b.rotation, a.scale * (a.rotation @ b.translation) + a.translation, a.scale * b.scale
    )


def inverse(a: Sim3) -> Sim3:
    """``a⁻¹``."""
    rot = a.rotation.T
    return Sim3(rot, -(rot @ a.translation) / a.scale, 1.0 / a.scale)


def between(a: Sim3, b: Sim3) -> Sim3:
    """``a⁻¹ ∘ b``: b expressed in a's frame."""
    return compose(inverse(a), b)


def from_pose(c2w: np.ndarray, scale: float = 1.0) -> Sim3:
    """A rigid [4, 4] camera-to-world pose (and a scale) as a `Sim3`."""
    c2w = np.asarray(c2w, np.float64)
    return Sim3(c2w[:3, :3].copy(), c2w[:3, 3].copy(), float(scale))


def to_gtsam(a: Sim3) -> gtsam.Similarity3:
    return gtsam.Similarity3(
        gtsam.Rot3(a.rotation), np.asarray(a.translation, np.float64) / a.scale, float(a.scale)
    )


def from_gtsam(g: gtsam.Similarity3) -> Sim3:
    m = g.matrix()  # [[R, t_g], [0, 1/s]]
    scale = 1.0 / float(m[3, 3])
    return Sim3(m[:3, :3].copy(), scale * m[:3, 3], scale)


def interpolate(a: Sim3, b: Sim3, alpha: float) -> Sim3:
    """Between `a` (alpha 0) and `b` (alpha 1): slerp rotation, linear translation, geometric scale."""
    q = slerp(matrix_to_quat_xyzw(a.rotation), matrix_to_quat_xyzw(b.rotation), alpha)
    return Sim3(
        quat_xyzw_to_matrix(q),
        (1 - alpha) * a.translation + alpha * b.translation,
        float(a.scale ** (1 - alpha) * b.scale**alpha),
    )


def size(a: Sim3) -> tuple[float, float, float]:
    """How far `a` is from the identity: (translation norm, rotation angle in rad, |log scale|)."""
    return (
        float(np.linalg.norm(a.translation)),
        float(np.linalg.norm(rotation_vector(a.rotation))),
        float(abs(np.log(a.scale))),
    )
