"""`MapSide`: one camera's map (voxel map, occupancy grid, held keyframes) behind its one lock.

The mapper's pose side (`Mapper.locate`, under the tracker's `pose.lock`) and its map side run apart
(docs/architecture.md "Pose side and map side"); this is the map side's owner: the map thread integrates
through it, and every reader (the map and grid timers, the fused map of several cameras, `~/save_map`,
/diagnostics, a loop-closure rebuild) goes through its methods, never through the mapper's voxels or grid.
`lock` (`map.lock`, engine/lock_order.py) is public for the one caller that must change both sides at once
(the camera's outputs: reset, session save and load), which takes it before the pose lock.

Change tracking: `take_points` / `take_grid` return the map or grid only when it changed since that reader's
last take (or `force`): an integration that changed the map, a new epoch (`FrameCloud.map_cleared`),
`mark_changed`, a `rebuild`. A work of a camera stream left since (`MapWork.stream`, not `current`: a reset
or a loaded session came after it was located) is dropped, never integrated.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..lock_order import OrderedLock
from .fusion import in_robot_map
from .grid import Grid
from .mapper import FrameCloud, Mapper, MapWork

#: `OccupancyGridBuilder.counts()`: hits [X, Y] uint16, passes [X, Y] uint16, origin [2] int64.
GridCounts = tuple[np.ndarray, np.ndarray, np.ndarray]


class MapSide:
    """The map side of `mapper` (module doc)."""

    def __init__(self, mapper: Mapper, current: Callable[[int], bool] | None = None) -> None:
        self.lock = OrderedLock("map.lock")
        self._mapper = mapper
        self._current = current  # is a work's stream token current (`CameraState.is_current`; None: always)
        self.stale_dropped = 0  # works of a stream left since, dropped
        self._changed = {"map": False, "grid": False}  # per reader: changed since its last take

    def integrate(
        self, work: MapWork, on_cloud: Callable[[FrameCloud], None] | None = None
    ) -> FrameCloud | None:
        """`Mapper.integrate(work)`; `on_cloud(cloud)` runs under the lock (once a reset holds it, nothing of
        the old stream goes out). None: the work's stream is stale (dropped, counted in `stale_dropped`)."""
        with self.lock:
            if self._current is not None and not self._current(work.stream):
                self.stale_dropped += 1
                return None
            cloud = self._mapper.integrate(work)
            if cloud.map_changed or cloud.map_cleared:  # a new epoch cleared the old one's map
                self.mark_changed()
            if on_cloud is not None:
                on_cloud(cloud)
        return cloud

    def mark_changed(self) -> None:
        """The map was cleared or replaced (call with `lock` held): every reader takes it again."""
        self._changed = dict.fromkeys(self._changed, True)

    def take_points(self, force: bool = False) -> tuple[np.ndarray, np.ndarray] | None:
        """(xyz [N, 3] float32, rgb [N, 3] uint8) of the voxel map if it changed since the last take (or
        `force`), else None."""
        with self.lock:
            if not (self._changed["map"] or force):
                return None
            self._changed["map"] = False
            return self._mapper.voxels.points()

    def take_grid(self, force: bool = False) -> Grid | None:
        """The occupancy grid if it changed since the last take (or `force`), else None."""
        with self.lock:
            if not (self._changed["grid"] or force):
                return None
            self._changed["grid"] = False
            return self._mapper.grid.grid()

    def snapshot(self) -> tuple[np.ndarray, np.ndarray]:
        """(xyz, rgb) copies of the voxel map now."""
        with self.lock:
            return self._mapper.voxels.points()

    def grid(self) -> Grid:
        """The occupancy grid now."""
        with self.lock:
            return self._mapper.grid.grid()

    def size(self) -> int:
        """Points in the voxel map."""
        with self.lock:
            return len(self._mapper.voxels)

    def robot_parts(self) -> tuple[tuple[np.ndarray, np.ndarray], GridCounts] | None:
        """(points, grid counts) when this camera's map is in the robot's map frame (a robot TF mode; what
        engine/mapping/fusion.py fuses), else None."""
        with self.lock:
            if not in_robot_map(self._mapper):
                return None
            return self._mapper.voxels.points(), self._mapper.grid.counts()

    def rebuild(self, clouds: list[tuple[np.ndarray, np.ndarray, np.ndarray]]) -> None:
        """Replace the voxel map and the grid by `clouds` ((points [N, 3] float32 in the map, rgb [N, 3]
        uint8, camera centre [3]) each; a loop-closure correction moves every keyframe)."""
        with self.lock:
            self._mapper.voxels.clear()
            self._mapper.grid.clear()
            for points, colors, centre in clouds:
                self._mapper.voxels.insert(points, colors)
                self._mapper.grid.integrate(points, centre)
            self.mark_changed()
