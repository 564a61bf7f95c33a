"""`Trajectory`: the pose history of a stream, its one store (issue 21): the recent window is `~/path`
(ros/outputs/path.py builds the message from it), the full log is `~/save_map`'s TUM file and a saved
session's trajectory. A loop closure moves both (`correct`). `voxel_map` re-exports it."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

import numpy as np

from ..geometry import invert_rigid, pose_from_quat, quat_xyzw_to_matrix
from .writers import tum_rows, write_tum


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

    def resize(self, max_length: int) -> None:
        """A new recent-window length (live `path.max_length`): the newest ``max_length`` poses stay."""
        if max_length < 1:
            raise ValueError(f"max_length must be >= 1, got {max_length}")
        self.max_length = max_length
        self._recent = deque(self._recent, maxlen=max_length)

    def correct(self, move: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> np.ndarray | None:
        """Loop closure: the poses at stamps s (recent window and full log) become ``move(s, poses)``
        (stamps [N] float64 s, poses [N, 4, 4] float64 -> [N, 4, 4]; one call for each of the two). Returns
        the jump of the newest pose of the window (T_new · T_old⁻¹ [4, 4]), None when it is empty."""
        if not self._recent:
            return None
        moved = move(self.stamps(), self.poses())
        jump = moved[-1] @ invert_rigid(self._recent[-1][1])
        self._recent = deque(zip(self.stamps().tolist(), moved, strict=True), maxlen=self.max_length)
        if self.keep_full_history and self._full_len:
            order = (self._full_start + np.arange(self._full_len)) % self._full.shape[0]
            table = self._full[order]
            poses = np.zeros((len(table), 4, 4))
            poses[:, :3, :3] = quat_xyzw_to_matrix(table[:, 4:])
            poses[:, :3, 3] = table[:, 1:4]
            poses[:, 3, 3] = 1.0
            self._full[order, 1:] = tum_rows(move(table[:, 0], poses))
        return jump

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
