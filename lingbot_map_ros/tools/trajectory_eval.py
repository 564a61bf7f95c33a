"""Trajectory files (TUM) and trajectory error: Sim(3) Umeyama alignment and absolute trajectory error.

TUM format, one pose per line: `timestamp tx ty tz qx qy qz qw` (seconds; camera-to-world; Hamilton
quaternion, scalar last). Poses in memory are camera-to-world [N, 4, 4] float64.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np


def matrix_to_quaternion(r: np.ndarray) -> np.ndarray:
    """Unit quaternions [N, 4] (x, y, z, w), w >= 0, of rotation matrices [N, 3, 3]."""
    r = np.asarray(r, dtype=np.float64).reshape(-1, 3, 3)
    q = np.empty((len(r), 4))
    for i, m in enumerate(r):
        # Shepperd's method: pivot on the largest of w, x, y, z for numerical stability.
        trace = np.trace(m)
        candidates = (trace, m[0, 0], m[1, 1], m[2, 2])
        pivot = int(np.argmax(candidates))
        if pivot == 0:
            s = 2.0 * np.sqrt(1.0 + trace)
            q[i] = ((m[2, 1] - m[1, 2]) / s, (m[0, 2] - m[2, 0]) / s, (m[1, 0] - m[0, 1]) / s, s / 4)
        elif pivot == 1:
            s = 2.0 * np.sqrt(1.0 + m[0, 0] - m[1, 1] - m[2, 2])
            q[i] = (s / 4, (m[0, 1] + m[1, 0]) / s, (m[0, 2] + m[2, 0]) / s, (m[2, 1] - m[1, 2]) / s)
        elif pivot == 2:
            s = 2.0 * np.sqrt(1.0 + m[1, 1] - m[0, 0] - m[2, 2])
            q[i] = ((m[0, 1] + m[1, 0]) / s, s / 4, (m[1, 2] + m[2, 1]) / s, (m[0, 2] - m[2, 0]) / s)
        else:
            s = 2.0 * np.sqrt(1.0 + m[2, 2] - m[0, 0] - m[1, 1])
            q[i] = ((m[0, 2] + m[2, 0]) / s, (m[1, 2] + m[2, 1]) / s, s / 4, (m[1, 0] - m[0, 1]) / s)
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    return np.where(q[:, 3:] < 0, -q, q)


def quaternion_to_matrix(q: np.ndarray) -> np.ndarray:
    """Rotation matrices [N, 3, 3] of quaternions [N, 4] (x, y, z, w; normalised here)."""
    q = np.asarray(q, dtype=np.float64).reshape(-1, 4)
    x, y, z, w = (q / np.linalg.norm(q, axis=1, keepdims=True)).T
    return np.stack([
        np.stack([1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)], axis=-1),
        np.stack([2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)], axis=-1),
        np.stack([2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)], axis=-1),
    ], axis=1)


def write_tum_poses(path: Path, stamps_ns: np.ndarray, poses: np.ndarray) -> None:
    """Write camera-to-world `poses` [N, 4, 4] at `stamps_ns` [N] (int ns) as a TUM file."""
    poses = np.asarray(poses, dtype=np.float64)
    if poses.ndim != 3 or poses.shape[1:] != (4, 4) or len(poses) != len(stamps_ns):
        raise ValueError(f"expected poses [N, 4, 4] and N stamps, got {poses.shape} and {len(stamps_ns)}")
    quats = matrix_to_quaternion(poses[:, :3, :3])
    lines = [f"{int(s) // 1_000_000_000}.{int(s) % 1_000_000_000:09d} "
             + " ".join(f"{v:.9f}" for v in (*p[:3, 3], *q)) for s, p, q in zip(stamps_ns, poses, quats,
                                                                               strict=True)]
    Path(path).write_text("\n".join(lines) + "\n")


def read_tum(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """Stamps [N] float64 seconds and camera-to-world poses [N, 4, 4] from a TUM file ('#' lines skipped)."""
    rows = []
    for number, line in enumerate(Path(path).read_text().splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        fields = line.split()
        if len(fields) != 8:
            raise ValueError(f"{path}:{number}: expected 8 fields 'timestamp tx ty tz qx qy qz qw', "
                             f"got {len(fields)}")
        rows.append([float(f) for f in fields])
    if not rows:
        raise ValueError(f"TUM file {path} holds no poses")
    data = np.array(rows)
    poses = np.tile(np.eye(4), (len(data), 1, 1))
    poses[:, :3, :3] = quaternion_to_matrix(data[:, 4:8])
    poses[:, :3, 3] = data[:, 1:4]
    return data[:, 0], poses


@dataclass(frozen=True)
class Sim3:
    """x_target = scale * rotation @ x_source + translation."""

    scale: float
    rotation: np.ndarray  # [3, 3]
    translation: np.ndarray  # [3]

    def apply(self, points: np.ndarray) -> np.ndarray:
        """Transform points [N, 3]."""
        return self.scale * points @ self.rotation.T + self.translation


def umeyama_sim3(source: np.ndarray, target: np.ndarray) -> Sim3:
    """Least-squares similarity taking `source` [N, 3] onto `target` [N, 3] (Umeyama 1991, with scale)."""
    source, target = np.asarray(source, np.float64), np.asarray(target, np.float64)
    if source.shape != target.shape or source.ndim != 2 or source.shape[1] != 3 or len(source) < 3:
        raise ValueError(f"need two matching point sets [N>=3, 3], got {source.shape} and {target.shape}")
    mu_s, mu_t = source.mean(axis=0), target.mean(axis=0)
    xs, xt = source - mu_s, target - mu_t
    covariance = xt.T @ xs / len(source)
    u, d, vt = np.linalg.svd(covariance)
    sign = np.eye(3)
    if np.linalg.det(u) * np.linalg.det(vt) < 0:
        sign[2, 2] = -1.0
    rotation = u @ sign @ vt
    variance = (xs**2).sum() / len(source)
    if variance <= 0:
        raise ValueError("source points are all identical; a similarity is undefined")
    scale = float(np.trace(np.diag(d) @ sign) / variance)
    return Sim3(scale, rotation, mu_t - scale * rotation @ mu_s)


@dataclass(frozen=True)
class AteResult:
    """Absolute trajectory error of camera centres after Sim(3) alignment (metres of the reference)."""

    rmse: float
    mean: float
    median: float
    max: float
    matched: int
    alignment: Sim3


def associate(stamps_a: np.ndarray, stamps_b: np.ndarray, max_diff_s: float = 0.02) -> np.ndarray:
    """Index pairs [M, 2] of stamps of `a` and `b` (seconds) that match within `max_diff_s`, nearest first."""
    pairs = []
    for i, stamp in enumerate(stamps_a):
        j = int(np.argmin(np.abs(stamps_b - stamp)))
        if abs(stamps_b[j] - stamp) <= max_diff_s:
            pairs.append((i, j))
    return np.array(pairs, dtype=np.int64).reshape(-1, 2)


def absolute_trajectory_error(estimate: Path, reference: Path, max_diff_s: float = 0.02) -> AteResult:
    """Sim(3)-aligned ATE of the TUM trajectory `estimate` against the TUM ground truth `reference`."""
    stamps_e, poses_e = read_tum(estimate)
    stamps_r, poses_r = read_tum(reference)
    pairs = associate(stamps_e, stamps_r, max_diff_s)
    if len(pairs) < 3:
        raise ValueError(f"only {len(pairs)} stamps of {estimate} match {reference} within {max_diff_s} s; "
                         "need >= 3")
    est, ref = poses_e[pairs[:, 0], :3, 3], poses_r[pairs[:, 1], :3, 3]
    alignment = umeyama_sim3(est, ref)
    errors = np.linalg.norm(alignment.apply(est) - ref, axis=1)
    return AteResult(float(np.sqrt((errors**2).mean())), float(errors.mean()), float(np.median(errors)),
                     float(errors.max()), len(pairs), alignment)
