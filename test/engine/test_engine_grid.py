"""OccupancyGridBuilder's vectorised floor-ray cast and saturating counts against a per-ray reference."""

from __future__ import annotations

import math

import numpy as np

from lingbot_map_ros.engine.mapping.grid import GridConfig, OccupancyGridBuilder


def _reference_passes(cfg: GridConfig, floor: np.ndarray, cam3: np.ndarray) -> dict[tuple[int, int], int]:
    """Passes of the floor rays, one ray at a time (module doc of engine/mapping/grid.py): samples every half
    cell
    from where the ray runs below `min_height`, one pass per cell a ray enters, its end cell excluded; the
    floor points' own cells get a pass each."""
    passes: dict[tuple[int, int], int] = {}
    for point in floor:
        end = (math.floor(point[0] / cfg.resolution), math.floor(point[1] / cfg.resolution))
        passes[end] = passes.get(end, 0) + 1
        drop = cam3[2] - point[2]
        first = min(max((cam3[2] - cfg.min_height) / max(drop, 1e-12), 0.0), 1.0) if drop > 0 else 0.0
        delta = point[:2] - cam3[:2]
        steps = math.ceil(np.linalg.norm(delta) * (1.0 - first) / (0.5 * cfg.resolution))
        previous = None
        for k in range(steps):
            frac = first + (1.0 - first) * k / steps
            xy = (cam3[:2] + frac * delta) / cfg.resolution
            cell = (math.floor(xy[0]), math.floor(xy[1]))
            if cell != previous and cell != end:
                passes[cell] = passes.get(cell, 0) + 1
            previous = cell
    return passes


def test_floor_rays_match_a_per_ray_cast() -> None:
    cfg = GridConfig(resolution=0.1)
    rng = np.random.default_rng(3)
    cam3 = np.array([0.33, -0.21, 1.2])
    floor = np.column_stack([rng.uniform(-3, 3, 300), rng.uniform(-3, 3, 300), rng.uniform(-0.2, 0.09, 300)])
    builder = OccupancyGridBuilder(cfg)
    builder.integrate(floor.astype(np.float32), cam3)
    hits, passes, origin = builder.counts()
    assert hits.sum() == 0
    expected = _reference_passes(cfg, floor.astype(np.float32).astype(np.float64), cam3)
    got = {
        (int(x) + int(origin[0]), int(y) + int(origin[1])): int(passes[x, y])
        for x, y in zip(*np.nonzero(passes), strict=True)
    }
    assert got == expected and sum(expected.values()) > 2 * len(floor)


def test_counts_saturate_and_both_add_paths_agree() -> None:
    builder = OccupancyGridBuilder(GridConfig())
    assert builder._cover(np.array([[0, 0], [1800, 39]]))
    far = int(builder._flat(np.array([1800]), np.array([0]))[0])  # wide span: the sort path
    wide = np.array([0, 0, 5, far], np.int64)
    builder._add(builder._hits, wide)  # span far beyond 4 * len: the sort path
    builder._add(builder._passes, wide[:3])  # close indices: the bincount path
    builder._add(builder._passes, np.full(70_000, 7, np.int64))
    builder._add(builder._passes, np.full(3, 7, np.int64))
    view_h, view_p = builder._hits.reshape(-1), builder._passes.reshape(-1)
    assert (view_h[0], view_h[5], view_h[far], view_h.sum()) == (2, 1, 1, 4)
    assert (view_p[0], view_p[5], view_p[7], view_p[far]) == (2, 1, 65535, 0)
