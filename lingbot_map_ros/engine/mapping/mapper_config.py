"""The mapper's settings: `MapperConfig` (voxel map, scale, grid, covariances, path and trajectory
budgets) and `CovarianceConfig`. Their parameter fields are `setting`s (engine/settings.py): the node's
`covariance.*`, `twist.min_dt`, `path.max_length` and `trajectory.max_poses` rows are derived from them."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..settings import setting
from .grid import GridConfig
from .scale import ScaleConfig
from .voxel_map import VoxelMapConfig


@dataclass(frozen=True)
class CovarianceConfig:
    """Pose standard deviations reported in the odometry covariance (the model predicts none).

    Attributes:
        position_std: metres, per axis.
        orientation_std: radians, per axis.
        unscaled_factor: multiplies the variances while the scale has not converged.
        twist_min_dt: seconds; consecutive stamps closer than this give no twist (unknown covariance).
    """

    position_std: float = setting(
        0.05,
        "Odometry pose standard deviation per axis in metres (the model predicts none).",
        bounds=(1e-6, 1e3),
    )
    orientation_std: float = setting(
        0.02, "Odometry orientation standard deviation per axis in radians.", bounds=(1e-6, 10.0)
    )
    unscaled_factor: float = setting(
        100.0,
        "Variances are multiplied by this while the metric scale has not converged.",
        bounds=(1.0, 1e9),
    )
    twist_min_dt: float = setting(
        0.005,
        "Seconds; frames closer than this (or with a stamp going backwards) give no twist (covariance 1e6).",
        bounds=(0.0, 10.0),
    )


@dataclass(frozen=True)
class MapperConfig:
    """Everything the mapper needs (built from the node's parameters or `run`'s options)."""

    voxel: VoxelMapConfig = field(default_factory=VoxelMapConfig)
    scale: ScaleConfig = field(default_factory=ScaleConfig)
    grid: GridConfig = field(default_factory=GridConfig)
    covariance: CovarianceConfig = field(default_factory=CovarianceConfig)
    path_max_length: int = setting(
        1000,
        "Poses kept in ~/path (oldest dropped; ~3-9 ms per 1000 poses to publish, at path.publish_rate).",
        bounds=(1, 100_000),
    )
    trajectory_max_poses: int = setting(
        1_000_000,
        "Poses of the trajectory kept for ~/save_map since the last reset (64 B each: 64 MB at 1,000,000, "
        "~9 h at 30 Hz); beyond it the oldest are dropped and counted (/diagnostics trajectory_dropped).",
        bounds=(1, 50_000_000),
    )
