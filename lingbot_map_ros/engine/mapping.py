"""Map accumulation: a voxel-grid point map with a hard point budget, a bounded trajectory, file writers.

Points and poses are in whatever frame the caller inserts them in: `engine/mapper.py` (the node and `run`)
inserts map-frame points (REP-103/REP-105, metres once the scale is known). numpy only.

`VoxelMap` keeps one point per occupied voxel: the running mean of the positions and colours that fell into it
(weight capped at ``max_weight`` so a voxel follows later, better-constrained observations). Voxels live in
preallocated slot arrays of size ``max_points``; a two-level sorted index (a large ``main`` run plus a
small ``pending`` run merged into it when it grows past ``merge_threshold``) finds a voxel's slot with
``searchsorted``, so an insert costs O(n log n) in the frame's points plus an amortised linear merge. When
every slot is taken the least-recently-observed ``evict_fraction`` of the voxels is dropped at once (budget
policy: evict oldest, the map shows the most recently seen region at full resolution; the voxel size never
changes).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np

from .geometry import pose_from_quat
from .writers import read_ply, read_tum, tum_rows, write_ply, write_tum

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
_KEY_MASK = (1 << _KEY_BITS) - 1


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

    voxel_size: float = 0.02
    conf_threshold: float = 1.5
    pixel_stride: int = 4
    max_points: int = 1_000_000
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
        cap = self.config.max_points
        self._mean = np.zeros((cap, 6), np.float32)  # x, y, z, r, g, b running means per slot
        self._weight = np.zeros(cap, np.float32)
        self._stamp = np.zeros(cap, np.int64)
        self._key = np.zeros(cap, np.int64)
        self._occupied = np.zeros(cap, bool)
        self.clear()

    def clear(self) -> None:
        """Drop every voxel (e.g. after a session reset: the map frame changes)."""
        self._occupied[:] = False
        self._free = np.arange(self.config.max_points - 1, -1, -1, dtype=np.int64)  # stack, pop from the end
        self._num_free = self.config.max_points
        self._main_keys = np.zeros(0, np.int64)
        self._main_slots = np.zeros(0, np.int64)
        self._pending_keys = np.zeros(0, np.int64)
        self._pending_slots = np.zeros(0, np.int64)
        self._clock = 0
        self.evicted_total = 0
        self.dropped_out_of_range = 0

    def __len__(self) -> int:
        return self.config.max_points - self._num_free

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
        cell = np.floor(xyz / np.float32(self.config.voxel_size))
        if not np.abs(cell).max(initial=0.0) < _KEY_OFFSET:  # a NaN or a cell out of the key range (rare)
            ok = np.all(np.abs(cell) < _KEY_OFFSET, axis=1)  # NaN compares False: dropped as well
            self.dropped_out_of_range += int((~ok).sum())
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


class Trajectory:
    """Camera-to-map pose history: a bounded recent window (for ``nav_msgs/Path``) and an optional full log.

    The recent window holds at most ``max_length`` poses. The full log (``keep_full_history``) keeps one
    [timestamp, tx, ty, tz, qx, qy, qz, qw] float64 row per pose (64 bytes) for the TUM file, at most
    ``max_history`` rows: a ring buffer that grows by doubling up to that cap, after which each new pose
    overwrites the oldest one (counted in ``history_dropped`` until ``clear``). So a node mapping for days
    holds at most ``64 * max_history`` bytes (64 MB at the default 1,000,000 poses, ~9 h at 30 Hz).
    """

    _INITIAL_ROWS = 1024

    def __init__(
        self, max_length: int = 1000, keep_full_history: bool = False, max_history: int = 1_000_000
    ) -> None:
        if max_length < 1:
            raise ValueError(f"max_length must be >= 1, got {max_length}")
        if max_history < 1:
            raise ValueError(f"max_history must be >= 1, got {max_history}")
        self.max_length = max_length
        self.keep_full_history = keep_full_history
        self.max_history = max_history
        self._recent: deque[tuple[float, np.ndarray]] = deque(maxlen=max_length)
        self.clear()

    def __len__(self) -> int:
        return len(self._recent)

    @property
    def history_length(self) -> int:
        """Poses in the full log (at most ``max_history``)."""
        return self._full_len

    @property
    def history_capacity(self) -> int:
        """Rows allocated for the full log (grows by doubling, never beyond ``max_history``)."""
        return self._full.shape[0]

    def append(self, stamp: float, pose_c2w: np.ndarray) -> None:
        """Add a [4, 4] camera-to-map pose observed at ``stamp`` (seconds)."""
        pose = np.asarray(pose_c2w, dtype=np.float64)
        if pose.shape != (4, 4):
            raise ValueError(f"expected a [4, 4] pose, got {pose.shape}")
        self._recent.append((float(stamp), pose.copy()))
        if self.keep_full_history:
            self._append_row(float(stamp), tum_rows(pose[None])[0])

    def _append_row(self, stamp: float, row: np.ndarray) -> None:
        """Write one TUM row into the ring; grow it (before it ever wraps) or overwrite the oldest row."""
        capacity = self._full.shape[0]
        if self._full_len == capacity and capacity < self.max_history:  # not wrapped yet: start == 0
            grown = np.empty((min(2 * capacity, self.max_history), 8), np.float64)
            grown[:capacity] = self._full
            self._full = grown
            capacity = grown.shape[0]
        slot = (self._full_start + self._full_len) % capacity
        self._full[slot, 0] = stamp
        self._full[slot, 1:] = row
        if self._full_len < capacity:
            self._full_len += 1
        else:
            self._full_start = (self._full_start + 1) % capacity
            self.history_dropped += 1

    def load(self, stamps: np.ndarray, rows: np.ndarray) -> None:
        """Replace the trajectory with saved poses: stamps [M] float64 s, rows [M, 7] tx ty tz qx qy qz qw
        (oldest first; the newest ``max_history`` are kept, the newest ``max_length`` form the window)."""
        stamps, rows = np.asarray(stamps, np.float64), np.asarray(rows, np.float64)
        if rows.ndim != 2 or rows.shape[1] != 7 or stamps.shape != (rows.shape[0],):
            raise ValueError(f"expected stamps [M] and rows [M, 7], got {stamps.shape} and {rows.shape}")
        self.clear()
        for stamp, row in zip(stamps[-self.max_length :], rows[-self.max_length :], strict=True):
            self._recent.append((float(stamp), pose_from_quat(row[:3], row[3:])))
        if self.keep_full_history:
            keep = min(rows.shape[0], self.max_history)
            self._full = np.empty((max(keep, min(self._INITIAL_ROWS, self.max_history)), 8), np.float64)
            self._full[:keep, 0] = stamps[rows.shape[0] - keep :]
            self._full[:keep, 1:] = rows[rows.shape[0] - keep :]
            self._full_len = keep

    def clear(self) -> None:
        """Forget every pose (recent window and full log) and the ``history_dropped`` count."""
        self._recent.clear()
        self._full = np.empty((min(self._INITIAL_ROWS, self.max_history), 8), np.float64)
        self._full_start = 0
        self._full_len = 0
        self.history_dropped = 0

    def stamps(self) -> np.ndarray:
        """[N] float64 timestamps of the recent window."""
        return np.array([s for s, _ in self._recent], dtype=np.float64)

    def poses(self) -> np.ndarray:
        """[N, 4, 4] float64 poses of the recent window (oldest first)."""
        if not self._recent:
            return np.zeros((0, 4, 4))
        return np.stack([p for _, p in self._recent])

    def full_history(self) -> tuple[np.ndarray, np.ndarray]:
        """(stamps [N], rows [N, 7] tx ty tz qx qy qz qw), oldest first: the last ``max_history`` poses since
        ``clear`` (full log; copies)."""
        if not self.keep_full_history:
            raise ValueError("full history is off: construct Trajectory(keep_full_history=True)")
        order = (self._full_start + np.arange(self._full_len)) % self._full.shape[0]
        table = self._full[order]
        return table[:, 0], table[:, 1:]

    def write_tum(self, path: str) -> None:
        """Write the full log if kept, else the recent window, as a TUM file (atomic)."""
        if self.keep_full_history:
            write_tum(path, *self.full_history())
        else:
            write_tum(path, self.stamps(), self.poses())
