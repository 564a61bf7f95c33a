"""One map from several cameras' mappers (no ROS imports): the node's shared `~/map_cloud`, `~/grid` and
`~/save_map`, and `lingbot-map-ros run` with several camera topics.

Each camera keeps its own `Mapper` (frame chain, scale, trajectory, epochs). Those whose map frame is the
robot's (TF modes map_to_odom / map_to_base: engine/mapping/frames.py) are fused here: their voxel maps
re-voxelised
into one (`VoxelMapConfig`), their grids' hit and pass counts summed cell by cell.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from .frames import ROBOT_TF_MODES
from .grid import Grid, GridConfig, OccupancyGridBuilder
from .mapper import Mapper
from .voxel_map import VoxelMap, VoxelMapConfig


def in_robot_map(mapper: Mapper) -> bool:
    """True when `mapper`'s current stream is mapped in the robot's map frame (fusable)."""
    return mapper.mode in ROBOT_TF_MODES


def fuse_points(
    clouds: Sequence[tuple[np.ndarray, np.ndarray]], config: VoxelMapConfig
) -> tuple[np.ndarray, np.ndarray]:
    """Several voxel maps' points (`Mapper.voxels.points()`: xyz [N, 3] float32, rgb [N, 3] uint8, one map
    frame) as one voxel map.

    Returns:
        `(xyz [M, 3] float32, rgb [M, 3] uint8)` (M <= `config.max_points`).
    """
    fused = VoxelMap(config)
    for xyz, rgb in clouds:
        if len(xyz):
            fused.insert(xyz, rgb)
    return fused.points()


def fuse_grids(counts: Sequence[tuple[np.ndarray, np.ndarray, np.ndarray]], config: GridConfig) -> Grid:
    """One occupancy grid from several grids of the same resolution, given as `OccupancyGridBuilder.counts()`
    (hits [X, Y] uint16, passes [X, Y] uint16, origin [2] int64 cell): hits and passes summed per cell
    (saturating at uint16), classified as `OccupancyGridBuilder.grid` does."""
    parts = [part for part in counts if part[0].size]
    fused = OccupancyGridBuilder(config)
    if not parts:
        return fused.grid()
    low = np.min([origin for _, _, origin in parts], axis=0)
    high = np.max([origin + np.array(hits.shape) for hits, _, origin in parts], axis=0)
    shape = tuple(int(v) for v in high - low)
    hits_sum, passes_sum = np.zeros(shape, np.int64), np.zeros(shape, np.int64)
    for hits, passes, origin in parts:
        x, y = (origin - low).astype(int)
        hits_sum[x : x + hits.shape[0], y : y + hits.shape[1]] += hits
        passes_sum[x : x + passes.shape[0], y : y + passes.shape[1]] += passes
    cap = np.iinfo(np.uint16).max
    if max(shape) > config.max_cells:  # the union of the cameras' grids may be wider than one camera's
        fused = OccupancyGridBuilder(replace(config, max_cells=max(shape)))
    fused.restore(
        np.minimum(hits_sum, cap).astype(np.uint16), np.minimum(passes_sum, cap).astype(np.uint16), low
    )
    return fused.grid()
