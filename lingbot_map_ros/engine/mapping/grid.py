"""2D occupancy grid of the map (Nav2's `nav_msgs/OccupancyGrid`), and its `map.pgm` + `map.yaml` files.

Built from the same keyframe points as the voxel map, in the map frame (metres, z up; in the robot TF modes
z = 0 is the ground under the base frame at the first frame). Per keyframe, 2D rays go from the camera's
(x, y) to each point's (x, y):

* a point with `min_height <= z <= max_height` is an obstacle: its cell gets a hit;
* a point below `min_height` is floor seen by the camera: its cell gets a pass;
* the cells where a ray (in 3D: its height falls linearly from the camera to the point) runs below
  `min_height` get a pass too: nothing in the band stands there, or the ray would have stopped. A ray passing
  over a low obstacle does not free its cell (a purely 2D ray cast would erase tables and boxes);
* points above `max_height` (ceiling) are ignored.

A cell is occupied (100) when hits / (hits + passes) >= `occupied_ratio`, free (0) when it was passed through
more than hit, unknown (-1) when no ray reached it. numpy only; the grid grows to cover what was seen, up to
`max_cells` per side (points beyond are dropped and counted): two uint16 (saturating) counters per cell, at
most 2 · 2 · 2000² B = 16 MB.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..settings import setting
from .writers import atomic_write

#: nav2_map_server loads a trinary pixel p as occupied when 1 - p/255 > occupied_thresh, free when below
#: free_thresh, else unknown. Unknown is written as 205 (1 - 205/255 = 0.19608), so free_thresh must stay at
#: or below that: 0.196 (ROS 1's map_saver value) keeps unknown unknown; nav2 map_saver's 0.25 makes it free.
FREE_THRESH = 0.196
#: Cells added on each side when the grid grows (fewer re-allocations).
GROW_MARGIN = 40


@dataclass(frozen=True)
class GridConfig:
    """`grid.*` parameters (metres)."""

    resolution: float = setting(0.05, "Cell size of ~/grid in metres.", bounds=(0.005, 10.0))
    min_height: float = setting(
        0.1,
        "Points above this height (m, from the base frame's ground) are obstacles; below: floor (free).",
        bounds=(-10.0, 10.0),
    )
    max_height: float = setting(1.5, "Points above this height (m) are ignored.", bounds=(-10.0, 100.0))
    occupied_ratio: float = 0.35
    max_rays: int = 10_000
    max_samples: int = 100_000
    max_range: float = 8.0
    max_cells: int = 2000

    def __post_init__(self) -> None:
        if not self.resolution > 0:
            raise ValueError(f"grid.resolution must be > 0, got {self.resolution}")
        if not self.max_height > self.min_height:
            raise ValueError(
                f"grid.max_height ({self.max_height}) must be > grid.min_height ({self.min_height})"
            )


@dataclass(frozen=True)
class Grid:
    """An occupancy grid: `data` [H, W] int8 (-1 unknown, 0 free, 100 occupied), row 0 at the lowest y
    (OccupancyGrid order), cell (row, col) centred at `origin + (col + 0.5, row + 0.5) · resolution`."""

    data: np.ndarray
    resolution: float
    origin_xy: tuple[float, float]


class OccupancyGridBuilder:
    """Accumulates hits and passes per cell (module doc)."""

    def __init__(self, config: GridConfig | None = None) -> None:
        self.config = config or GridConfig()
        self.clear()

    def clear(self) -> None:
        self._hits = np.zeros((0, 0), np.uint16)  # saturating counts, indexed [x, y] from `_origin`
        self._passes = np.zeros((0, 0), np.uint16)
        self._origin = np.zeros(2, np.int64)  # cell index of [0, 0]
        self.dropped = 0
        self.rays_total = 0

    def integrate(self, xyz: np.ndarray, camera_xyz: np.ndarray) -> None:
        """One keyframe: `xyz` [N, 3] map points, `camera_xyz` [3] the camera's position in the map.

        Cost: only the part of a floor ray below `min_height` is sampled (every half cell), at most
        `max_samples` samples per keyframe (rays subsampled evenly beyond that)."""
        cfg = self.config
        xyz = np.asarray(xyz)
        keep = xyz[:, 2].astype(np.float64) <= cfg.max_height
        finite = np.isfinite(xyz)
        if not finite.all():
            keep &= np.all(finite, axis=1)
        xyz = xyz.take(np.flatnonzero(keep), axis=0).astype(np.float64)  # float64 only for the rows kept
        cam3 = np.asarray(camera_xyz, np.float64)
        cam = cam3[:2]
        xyz = xyz.take(np.flatnonzero(np.linalg.norm(xyz[:, :2] - cam, axis=1) <= cfg.max_range), axis=0)
        if len(xyz) > cfg.max_rays:  # deterministic subset
            xyz = xyz.take(np.linspace(0, len(xyz) - 1, cfg.max_rays).astype(np.int64), axis=0)
        if len(xyz) == 0:
            return
        end = np.floor(xyz[:, :2] / cfg.resolution).astype(np.int64)
        start = np.floor(cam / cfg.resolution).astype(np.int64)
        if not self._cover(np.vstack([end, start[None]])):
            return
        end_flat = self._flat(end[:, 0], end[:, 1])
        obstacle = xyz[:, 2] >= cfg.min_height
        floor = np.flatnonzero(~obstacle)
        self._add(self._hits, end_flat[obstacle])
        self._add(self._passes, end_flat.take(floor))
        self._cast_floor_rays(xyz.take(floor, axis=0), end_flat.take(floor), cam3)
        self.rays_total += len(xyz)

    def counts(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(hits [X, Y] uint16, passes [X, Y] uint16, origin [2] int64 cell index of [0, 0]): copies, for a
        saved session."""
        return self._hits.copy(), self._passes.copy(), self._origin.copy()

    def restore(self, hits: np.ndarray, passes: np.ndarray, origin: np.ndarray) -> None:
        """Replace the counts with saved ones (`counts()`); ValueError for mismatched or negative arrays."""
        hits, passes = np.asarray(hits), np.asarray(passes)
        if hits.ndim != 2 or hits.shape != passes.shape or np.asarray(origin).shape != (2,):
            raise ValueError(f"grid counts must be two equal [X, Y] arrays and an origin [2]: {hits.shape}")
        if hits.dtype != np.uint16 or passes.dtype != np.uint16:
            raise ValueError(f"grid counts must be uint16, got {hits.dtype} and {passes.dtype}")
        if np.any(np.array(hits.shape) > self.config.max_cells):
            raise ValueError(f"grid counts must have at most {self.config.max_cells} cells a side")
        self.clear()
        self._hits, self._passes = hits.copy(), passes.copy()
        self._origin = np.asarray(origin, np.int64).copy()

    def _cast_floor_rays(self, floor: np.ndarray, end_flat: np.ndarray, cam3: np.ndarray) -> None:
        """Passes for the cells where the rays to floor points run below `min_height` (end cells excluded).

        Args:
            floor: [F, 3] float64 floor points (map frame).
            end_flat: [F] int64 flat index (`_flat`) of each point's cell.
            cam3: [3] float64 camera position.
        Samples every half cell from where the ray dips below `min_height` to its end; one flat int64 index
        per sample (rays concatenated, no per-sample ray index)."""
        cfg = self.config
        if len(floor) == 0:
            return
        cam = cam3[:2]
        drop = cam3[2] - floor[:, 2]
        # the ray's height falls linearly: below min_height from `first` (fraction of the ray) to its end
        below = np.clip((cam3[2] - cfg.min_height) / np.maximum(drop, 1e-12), 0.0, 1.0)
        first = np.where(drop > 0, below, 0.0)
        delta = floor[:, :2] - cam
        length = np.linalg.norm(delta, axis=1) * (1.0 - first)
        steps = np.ceil(length / (0.5 * cfg.resolution)).astype(np.int64)
        total = int(steps.sum())
        if total > cfg.max_samples:
            count = max(1, len(floor) * cfg.max_samples // total)
            keep = np.linspace(0, len(floor) - 1, count).astype(np.int64)
            end_flat, first, delta, steps = end_flat[keep], first[keep], delta[keep], steps[keep]
        live = np.flatnonzero(steps > 0)
        if live.size == 0:
            return
        end_flat, first, steps = end_flat[live], first[live], steps[live]
        dx, dy = delta[live, 0], delta[live, 1]
        starts = np.cumsum(steps) - steps
        offsets = np.arange(int(steps.sum())) - np.repeat(starts, steps)
        first_s = np.repeat(first, steps)
        frac = first_s + (1.0 - first_s) * offsets / np.repeat(steps, steps)
        cx = np.floor((cam[0] + frac * np.repeat(dx, steps)) / cfg.resolution).astype(np.int64)
        cy = np.floor((cam[1] + frac * np.repeat(dy, steps)) / cfg.resolution).astype(np.int64)
        cells = self._flat(cx, cy)
        # one pass per (ray, cell): a ray's samples are in order and a straight ray never comes back to a cell
        new = np.ones(len(cells), bool)
        np.not_equal(cells[1:], cells[:-1], out=new[1:])
        new[starts] = True
        new &= cells != np.repeat(end_flat, steps)
        self._add(self._passes, cells[new])

    def grid(self) -> Grid:
        """The current grid (copies)."""
        hits = self._hits.astype(np.float64)
        passes = self._passes.astype(np.float64)
        data = np.full(hits.shape, -1, np.int8)
        seen = (hits + passes) > 0
        ratio = np.where(seen, hits / np.maximum(hits + passes, 1), 0.0)
        data[seen] = 0
        data[seen & (ratio >= self.config.occupied_ratio)] = 100
        res = self.config.resolution
        return Grid(data.T.copy(), res, (float(self._origin[0] * res), float(self._origin[1] * res)))

    def _flat(self, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        """[N] int64 flat index into the [X, Y] count arrays of the cells (x, y) [N] int64 (covered)."""
        return (x - self._origin[0]) * self._hits.shape[1] + (y - self._origin[1])

    def _add(self, counts: np.ndarray, flat: np.ndarray) -> None:
        """Saturating += 1 per occurrence of each flat cell index [N] int64 (`_flat`): a bincount over the
        span of the indices when it is small, else a sort (no full-size temporary)."""
        if len(flat) == 0:
            return
        lo, hi = int(flat.min()), int(flat.max())
        if hi - lo < 4 * len(flat) + 65_536:
            n = np.bincount(flat - lo)
            where = np.flatnonzero(n)
            n = n[where]
            where += lo
        else:
            where, n = np.unique(flat, return_counts=True)
        view = counts.reshape(-1)
        view[where] = np.minimum(view[where].astype(np.int64) + n, np.iinfo(np.uint16).max)

    def _cover(self, cells: np.ndarray) -> bool:
        """Grow the arrays (indexed [x, y]) to hold `cells` (with a margin, so growth is rare); False (and
        counted) beyond `max_cells` a side."""
        lo = cells.min(axis=0)
        hi = cells.max(axis=0) + 1
        if self._hits.size:
            cur_lo, cur_hi = self._origin, self._origin + np.array(self._hits.shape)
            if np.all(lo >= cur_lo) and np.all(hi <= cur_hi):
                return True
            lo, hi = np.minimum(lo, cur_lo), np.maximum(hi, cur_hi)
        lo, hi = lo - GROW_MARGIN, hi + GROW_MARGIN
        size = hi - lo
        if np.any(size > self.config.max_cells):
            self.dropped += len(cells)
            return False
        hits = np.zeros(tuple(size), np.uint16)
        passes = np.zeros(tuple(size), np.uint16)
        if self._hits.size:
            o = self._origin - lo
            hits[o[0] : o[0] + self._hits.shape[0], o[1] : o[1] + self._hits.shape[1]] = self._hits
            passes[o[0] : o[0] + self._hits.shape[0], o[1] : o[1] + self._hits.shape[1]] = self._passes
        self._hits, self._passes, self._origin = hits, passes, lo
        return True


def write_nav2_map(directory: str | os.PathLike, name: str, grid: Grid) -> tuple[Path, Path]:
    """Write `<name>.pgm` (binary P5, 8 bit) + `<name>.yaml` as nav2_map_server's map_saver does (trinary:
    occupied 0 black, free 254 white, unknown 205), loadable by its map_server unchanged. Atomic.

    Returns:
        (pgm path, yaml path).
    """
    directory = Path(directory)
    h, w = grid.data.shape
    pixels = np.full((h, w), 205, np.uint8)
    pixels[grid.data == 0] = 254
    pixels[grid.data == 100] = 0
    image = np.flipud(pixels)  # PGM row 0 is the top (highest y)
    header = f"P5\n# CREATOR: lingbot_map_ros {grid.resolution:.3f} m/pix\n{w} {h}\n255\n".encode()
    pgm = atomic_write(directory / f"{name}.pgm", lambda f: f.write(header + image.tobytes()))
    text = (
        f"image: {name}.pgm\n"
        "mode: trinary\n"
        f"resolution: {grid.resolution}\n"
        f"origin: [{grid.origin_xy[0]}, {grid.origin_xy[1]}, 0]\n"
        "negate: 0\n"
        "occupied_thresh: 0.65\n"
        f"free_thresh: {FREE_THRESH}\n"
    )
    yaml = atomic_write(directory / f"{name}.yaml", lambda f: f.write(text.encode()))
    return pgm, yaml


def read_pgm(path: str | os.PathLike) -> np.ndarray:
    """[H, W] uint8 pixels of a binary (P5) 8-bit PGM, comments allowed (for tests and tools)."""
    data = Path(path).read_bytes()
    tokens: list[bytes] = []
    pos = 0
    while len(tokens) < 4:
        while data[pos : pos + 1].isspace():
            pos += 1
        if data[pos : pos + 1] == b"#":
            pos = data.index(b"\n", pos) + 1
            continue
        end = pos
        while not data[end : end + 1].isspace():
            end += 1
        tokens.append(data[pos:end])
        pos = end
    if tokens[0] != b"P5" or int(tokens[3]) > 255:
        raise ValueError(f"{path}: not an 8-bit binary PGM")
    w, h = int(tokens[1]), int(tokens[2])
    return np.frombuffer(data[pos + 1 : pos + 1 + w * h], np.uint8).reshape(h, w)
