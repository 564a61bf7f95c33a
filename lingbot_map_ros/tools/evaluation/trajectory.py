"""Trajectory error: Sim(3) Umeyama alignment and absolute trajectory error (ATE) of TUM trajectories.

TUM files (one `timestamp tx ty tz qx qy qz qw` line per camera-to-world pose) are read and written by
the engine's writers; this module only associates stamps and measures. The alignment is `evo`'s Umeyama
(`evo.core.geometry.umeyama_alignment`, the library `evo_ape tum --align --correct_scale` uses; issue 23).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from evo.core.geometry import umeyama_alignment

from lingbot_map_ros.engine.offline import Sim3, read_tum

ALIGNMENTS = ("sim3", "se3", "none")


def umeyama_sim3(source: np.ndarray, target: np.ndarray, with_scale: bool = True) -> Sim3:
    """Least-squares similarity taking `source` [N, 3] onto `target` [N, 3] (Umeyama 1991); with
    `with_scale=False` the rigid (SE(3)) least-squares fit, scale 1."""
    source, target = np.asarray(source, np.float64), np.asarray(target, np.float64)
    if source.shape != target.shape or source.ndim != 2 or source.shape[1] != 3 or len(source) < 3:
        raise ValueError(f"need two matching point sets [N>=3, 3], got {source.shape} and {target.shape}")
    if ((source - source.mean(axis=0)) ** 2).sum() / len(source) <= 1e-18:
        raise ValueError("source points are all identical; a similarity is undefined")
    rotation, translation, scale = umeyama_alignment(source.T, target.T, with_scale)
    return Sim3(rotation, translation, float(scale))


@dataclass(frozen=True)
class AteResult:
    """Absolute trajectory error of camera centres after Sim(3) alignment, in units of the reference."""

    rmse: float
    mean: float
    median: float
    max: float
    matched: int
    alignment: Sim3


def associate(stamps_a: np.ndarray, stamps_b: np.ndarray, max_diff_s: float = 0.02) -> np.ndarray:
    """Index pairs [M, 2] (a, b) of stamps (seconds) that are nearest neighbours within `max_diff_s`."""
    stamps_b = np.asarray(stamps_b, np.float64)
    pairs = []
    for i, stamp in enumerate(np.asarray(stamps_a, np.float64)):
        j = int(np.argmin(np.abs(stamps_b - stamp)))
        if abs(stamps_b[j] - stamp) <= max_diff_s:
            pairs.append((i, j))
    return np.array(pairs, dtype=np.int64).reshape(-1, 2)


def ate(estimate: np.ndarray, reference: np.ndarray, alignment: str = "sim3") -> AteResult:
    """ATE of matched camera centres `estimate` [N, 3] against `reference` [N, 3] after aligning the
    estimate with a similarity ("sim3", monocular), a rigid motion ("se3") or not at all ("none")."""
    if alignment not in ALIGNMENTS:
        raise ValueError(f"alignment must be one of {ALIGNMENTS}, got {alignment!r}")
    estimate = np.asarray(estimate, np.float64)
    if alignment == "none":
        transform = Sim3.identity()
    else:
        transform = umeyama_sim3(estimate, reference, with_scale=alignment == "sim3")
    errors = np.linalg.norm(transform.apply_points(estimate) - reference, axis=1)
    return AteResult(
        float(np.sqrt((errors**2).mean())),
        float(errors.mean()),
        float(np.median(errors)),
        float(errors.max()),
        len(errors),
        transform,
    )


def check_trajectory(stamps: np.ndarray, rows: np.ndarray, what: str) -> None:
    """ValueError naming what is wrong with a trajectory (stamps [N] s, TUM rows [N, 7]) before any maths:
    no poses, or a non-finite stamp or value (NaN would end in "SVD did not converge")."""
    if len(stamps) == 0:
        raise ValueError(f"the {what} holds no poses")
    bad = ~(
        np.isfinite(np.asarray(stamps, np.float64)) & np.isfinite(np.asarray(rows, np.float64)).all(axis=1)
    )
    if bad.any():
        first = int(np.flatnonzero(bad)[0])
        raise ValueError(
            f"the {what} has {int(bad.sum())} pose(s) with a non-finite stamp or value (NaN or inf), "
            f"the first at row {first}"
        )


def matched_ate(
    stamps_e: np.ndarray,
    rows_e: np.ndarray,
    stamps_r: np.ndarray,
    rows_r: np.ndarray,
    max_diff_s: float = 0.02,
    alignment: str = "sim3",
) -> AteResult:
    """ATE of trajectory e against reference r (stamps [N] s, TUM rows [N, 7]) on stamp-matched poses.
    ValueError when either is empty or holds a non-finite value (`check_trajectory`)."""
    check_trajectory(stamps_e, rows_e, "estimate")
    check_trajectory(stamps_r, rows_r, "reference")
    pairs = associate(stamps_e, stamps_r, max_diff_s)
    if len(pairs) < 3:
        raise ValueError(
            f"only {len(pairs)} stamps of the estimate match the reference within {max_diff_s} s; need >= 3"
        )
    return ate(rows_e[pairs[:, 0], :3], rows_r[pairs[:, 1], :3], alignment)


def absolute_trajectory_error(
    estimate: Path, reference: Path, max_diff_s: float = 0.02, alignment: str = "sim3"
) -> AteResult:
    """ATE of the TUM trajectory `estimate` against the TUM ground truth `reference` (default Sim(3))."""
    return matched_ate(*read_tum(estimate), *read_tum(reference), max_diff_s, alignment)
