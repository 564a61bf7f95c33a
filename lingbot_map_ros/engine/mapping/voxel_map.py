"""Map accumulation: a voxel-grid point map with a hard point budget, a bounded trajectory, file writers.

Points and poses are in whatever frame the caller inserts them in: `engine/mapping/mapper.py` (the node and
`run`)
inserts map-frame points (REP-103/REP-105, metres once the scale is known). numpy only.

`VoxelMap` keeps one point per occupied voxel: the running mean of the positions and colours that fell into it
(weight capped at ``max_weight`` so a voxel follows later, better-constrained observations). Voxels live in
slot arrays that grow (doubling) up to ``max_points``, so an unused budget costs no memory; a two-level sorted
index (a large ``main`` run plus a
small ``pending`` run merged into it when it grows past ``merge_threshold``) finds a voxel's slot with
``searchsorted``, so an insert costs O(n log n) in the frame's points plus an amortised linear merge. When
every slot is taken the least-recently-observed ``evict_fraction`` of the voxels is dropped at once (budget
policy: evict oldest, the map shows the most recently seen region at full resolution; the voxel size never
changes). Voxel keys hold 21 bits a cell axis (about ±21 km at 2 cm): an empty map whose first points lie
outside that range re-centres its key origin on them (an extrinsic at x = 1e6 m still maps); points beyond the
range of a non-empty map are counted (`dropped_out_of_range`) and logged once per map, never silently lost.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

from ..settings import setting
from .trajectory import Trajectory
from .writers import read_ply, read_tum, write_ply, write_tum

__all__ = [
    "Trajectory",
    "VoxelMap",
    "VoxelMapConfig",
    "read_ply",
    "read_tum",
    "write_ply",
    "write_tum",
]

_KEY_BITS = 21
_KEY_OFFSET = 1 << (_KEY_BITS - 1)
#: Slots allocated at first (the arrays double from here up to ``max_points``).
_INITIAL_SLOTS = 1 << 16
_LOG = logging.getLogger(__name__)


@dataclass(frozen=True)
class VoxelMapConfig:
    """Parameters of :class:`VoxelMap` (lengths in the units of the inserted points: metres from the mapper).

    Attributes:
        voxel_size: edge of a voxel.
        conf_threshold: keep pixels with depth confidence above this (reference viewer: 1.5).
        pixel_stride: use every n-th row and column of a frame.
        max_points: hard budget of voxels (= published points).
        evict_fraction: share of the budget freed at once when it is full (least recently observed first).
        max_weight: cap of the running-average weight of a voxel.
        merge_threshold: size of the pending index run that triggers a merge into the main run.
    """

    voxel_size: float = setting(
        0.02, "Voxel edge of the map in metres (model units with scale.source none).", bounds=(1e-4, 100.0)
    )
    conf_threshold: float = setting(
        1.5, "Keep pixels with depth confidence above this (confidence >= 1).", bounds=(0.0, 1e6)
    )
    pixel_stride: int = setting(4, "Pixel stride when unprojecting a frame.", bounds=(1, 64), node_default=2)
    max_points: int = setting(
        1_000_000,
        "Point budget of the map cloud, shared by all cameras (each gets an equal part); memory grows with "
        "the points actually mapped.",
        bounds=(1000, 50_000_000),
        node_default=500_000,
    )
    evict_fraction: float = 0.1
    max_weight: float = 32.0
    merge_threshold: int = 65_536

    def __post_init__(self) -> None:
        if not self.voxel_size > 0:
            raise ValueError(f"voxel_size must be > 0, got {self.voxel_size}")
        if self.pixel_stride < 1:
            raise ValueError(f"pixel_stride must be >= 1, got {self.pixel_stride}")
        if self.max_points < 1:
            raise ValueError(f"max_points must be >= 1, got {self.max_points}")
        if not 0.0 < self.evict_fraction <= 1.0:
            raise ValueError(f"evict_fraction must be in (0, 1], got {self.evict_fraction}")
        if not self.max_weight >= 1.0:
            raise ValueError(f"max_weight must be >= 1, got {self.max_weight}")


class VoxelMap:
    """Voxel-grid accumulation of coloured world points under a hard point budget."""

    def __init__(self, config: VoxelMapConfig | None = None) -> None:
        self.config = config or VoxelMapConfig()
        self.clear()

    def clear(self) -> None:
        """Drop every voxel (e.g. after a session reset: the map frame changes) and the memory they held."""
        cap = min(self.config.max_points, _INITIAL_SLOTS)
        self._mean = np.zeros((cap, 6), np.float32)  # x, y, z, r, g, b running means per slot
        self._weight = np.zeros(cap, np.float32)
        self._stamp = np.zeros(cap, np.int64)
        self._key = np.zeros(cap, np.int64)
        self._occupied = np.zeros(cap, bool)
        self._free = np.arange(cap - 1, -1, -1, dtype=np.int64)  # stack, pop from the end
        self._num_free = cap
        self._origin = np.zeros(3, np.float32)  # cell of key 0 (re-centred by an empty map's first points)
        self._main_keys = np.zeros(0, np.int64)
        self._main_slots = np.zeros(0, np.int64)
        self._pending_keys = np.zeros(0, np.int64)
        self._pending_slots = np.zeros(0, np.int64)
        self._clock = 0
        self.evicted_total = 0
        self.dropped_out_of_range = 0

    def __len__(self) -> int:
        return self._weight.shape[0] - self._num_free

    def insert(self, xyz: np.ndarray, rgb: np.ndarray) -> None:
        """Accumulate points.

        Args:
            xyz: [N, 3] float32 map-frame points (non-finite rows ignored).
            rgb: [N, 3] uint8 colours.
        """
        if xyz.ndim != 2 or xyz.shape[1] != 3 or rgb.shape != xyz.shape or rgb.dtype != np.uint8:
            raise ValueError(
                f"expected xyz [N, 3] and rgb [N, 3] uint8, got {xyz.shape} and {rgb.shape} {rgb.dtype}"
            )
        self._clock += 1
        cell = np.floor(xyz / np.float32(self.config.voxel_size)) - self._origin
        if not np.abs(cell).max(initial=0.0) < _KEY_OFFSET:  # a NaN or a cell out of the key range (rare)
            cell = self._recentre(cell)
            ok = np.all(np.abs(cell) < _KEY_OFFSET, axis=1)  # NaN compares False: dropped as well
            self._count_out_of_range(int((~ok).sum()))
            xyz, rgb, cell = xyz[ok], rgb[ok], cell[ok]
        if xyz.shape[0] == 0:
            return
        uniq, inverse, counts = voxel_groups(cell.T.astype(np.int64, order="C") + _KEY_OFFSET)
        n = uniq.shape[0]
        sums = np.empty((n, 6), np.float64)
        for j in range(3):
            sums[:, j] = np.bincount(inverse, weights=xyz[:, j], minlength=n)
            sums[:, 3 + j] = np.bincount(inverse, weights=rgb[:, j], minlength=n)
        means = (sums / counts[:, None]).astype(np.float32)
        cnt = counts.astype(np.float32)

        slots = self._lookup(uniq)
        hit = np.flatnonzero(slots >= 0)
        if hit.size:
            s = slots[hit]
            w_new = cnt[hit]
            total = self._weight[s] + w_new
            a = (w_new / total)[:, None]
            old = self._mean.take(s, axis=0)
            self._mean[s] = old + a * (means.take(hit, axis=0) - old)
            self._weight[s] = np.minimum(total, self.config.max_weight)
            self._stamp[s] = self._clock
        miss = np.flatnonzero(slots < 0)
        if miss.size:
            self._add_new(uniq[miss], means.take(miss, axis=0), np.minimum(cnt[miss], self.config.max_weight))

    def points(self, min_weight: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
        """The map: (xyz [M, 3] float32, rgb [M, 3] uint8), one point per voxel of weight ≥ ``min_weight``."""
        keep = np.flatnonzero(self._occupied & (self._weight >= min_weight))
        mean = self._mean.take(keep, axis=0)
        return mean[:, :3].copy(), np.clip(np.rint(mean[:, 3:]), 0, 255).astype(np.uint8)

    def stats(self) -> dict[str, float]:
        """Occupancy and eviction counters (for diagnostics)."""
        return {
            "points": len(self),
            "max_points": self.config.max_points,
            "voxel_size": self.config.voxel_size,
            "evicted_total": self.evicted_total,
            "dropped_out_of_range": self.dropped_out_of_range,
        }

    def _recentre(self, cell: np.ndarray) -> np.ndarray:
        """An empty map takes the median finite cell of its first points as key origin; returns `cell`
        relative to the origin."""
        finite = cell[np.isfinite(cell).all(axis=1)]
        if len(self) or not finite.size or self._origin.any():
            return cell
        self._origin = np.floor(np.median(finite, axis=0)).astype(np.float32)
        _LOG.warning(
            "voxel map: key origin re-centred at cell %s (points beyond the key range)", self._origin
        )
        return cell - self._origin

    def _count_out_of_range(self, count: int) -> None:
        if count and not self.dropped_out_of_range:
            _LOG.warning(
                "voxel map: %d point(s) outside the voxel key range (about ±%.0f m from %s) dropped; "
                "counted in map.points_out_of_range",
                count,
                _KEY_OFFSET * self.config.voxel_size,
                self._origin * self.config.voxel_size,
            )
        self.dropped_out_of_range += count

    def _reserve(self, n: int) -> None:
        """Grow the slot arrays (doubling, at most to ``max_points``) until ``n`` slots are free."""
        cap = self._weight.shape[0]
        if n <= self._num_free or cap >= self.config.max_points:
            return
        new_cap = min(self.config.max_points, max(2 * cap, cap + n - self._num_free))
        grow = new_cap - cap
        self._mean = np.concatenate([self._mean, np.zeros((grow, 6), np.float32)])
        self._weight = np.concatenate([self._weight, np.zeros(grow, np.float32)])
        self._stamp = np.concatenate([self._stamp, np.zeros(grow, np.int64)])
        self._key = np.concatenate([self._key, np.zeros(grow, np.int64)])
        self._occupied = np.concatenate([self._occupied, np.zeros(grow, bool)])
        new_slots = np.arange(new_cap - 1, cap - 1, -1, dtype=np.int64)
        self._free = np.concatenate(
            [new_slots, self._free[: self._num_free], np.zeros(cap - self._num_free, np.int64)]
        )
        self._num_free += grow

    def _lookup(self, keys: np.ndarray) -> np.ndarray:
        """Slots of sorted unique ``keys`` (-1 where absent)."""
        slots = np.full(keys.shape[0], -1, np.int64)
        for run_keys, run_slots in (
            (self._main_keys, self._main_slots),
            (self._pending_keys, self._pending_slots),
        ):
            if run_keys.size == 0:
                continue
            pos = np.minimum(np.searchsorted(run_keys, keys), run_keys.size - 1)
            found = run_keys[pos] == keys
            slots[found] = run_slots[pos[found]]
        return slots

    def _add_new(self, keys: np.ndarray, means: np.ndarray, weights: np.ndarray) -> None:
        n = keys.shape[0]
        if n > self.config.max_points:  # a single frame larger than the budget: keep a uniform subset
            pick = np.linspace(0, n - 1, self.config.max_points).astype(np.int64)
            keys, means, weights, n = keys[pick], means[pick], weights[pick], self.config.max_points
        self._reserve(n)
        if n > self._num_free:
            self._evict(max(n - self._num_free, int(self.config.evict_fraction * self.config.max_points)))
        slots = self._free[self._num_free - n : self._num_free].copy()
        self._num_free -= n
        self._mean[slots] = means
        self._weight[slots] = weights
        self._stamp[slots] = self._clock
        self._key[slots] = keys
        self._occupied[slots] = True
        pos = np.searchsorted(self._pending_keys, keys)
        self._pending_keys = np.insert(self._pending_keys, pos, keys)
        self._pending_slots = np.insert(self._pending_slots, pos, slots)
        if self._pending_keys.size >= self.config.merge_threshold:
            self._merge_pending()

    def _merge_pending(self) -> None:
        pos = np.searchsorted(self._main_keys, self._pending_keys)
        self._main_keys = np.insert(self._main_keys, pos, self._pending_keys)
        self._main_slots = np.insert(self._main_slots, pos, self._pending_slots)
        self._pending_keys = np.zeros(0, np.int64)
        self._pending_slots = np.zeros(0, np.int64)

    def _evict(self, count: int) -> None:
        """Free the ``count`` least-recently-observed voxels."""
        occupied = np.flatnonzero(self._occupied)
        count = min(count, occupied.size)
        oldest = occupied[np.argpartition(self._stamp[occupied], count - 1)[:count]]
        self._occupied[oldest] = False
        self._merge_pending()
        keep = self._occupied[self._main_slots]
        self._main_keys = self._main_keys[keep]
        self._main_slots = self._main_slots[keep]
        self._free[self._num_free : self._num_free + count] = oldest
        self._num_free += count
        self.evicted_total += count


def voxel_groups(cells: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Group points by voxel: exactly ``np.unique(keys, return_inverse=True, return_counts=True)`` of the
    voxel keys ``x << 42 | y << 21 | z``, sorting a key compacted to the cells' bounding box (same order,
    fewer distinct high bits: a faster sort).

    Args:
        cells: [3, N] int64 voxel indices (rows x, y, z) offset to [0, 2**21), N >= 1.
    Returns:
        (keys [M] int64 sorted unique voxel keys, inverse [N] int64 index into keys, counts [M] int64).
    """
    x, y, z = cells
    lo = [int(c.min()) for c in cells]
    span = [int(c.max()) - low + 1 for c, low in zip(cells, lo, strict=True)]
    if span[0] * span[1] * span[2] < 1 << 62:
        order_key = ((x - lo[0]) * span[1] + (y - lo[1])) * span[2] + (z - lo[2])
    else:  # cells spread over most of the key range: the full key (same order)
        order_key = (x << (2 * _KEY_BITS)) | (y << _KEY_BITS) | z
    order = np.argsort(order_key, kind="stable")
    ordered = order_key[order]
    first = np.empty(ordered.shape[0], bool)
    first[0] = True
    np.not_equal(ordered[1:], ordered[:-1], out=first[1:])
    starts = np.flatnonzero(first)
    inverse = np.empty(ordered.shape[0], np.int64)
    inverse[order] = np.cumsum(first) - 1
    counts = np.diff(np.append(starts, ordered.shape[0]))
    pick = order[starts]
    keys = (x[pick] << (2 * _KEY_BITS)) | (y[pick] << _KEY_BITS) | z[pick]
    return keys, inverse, counts
