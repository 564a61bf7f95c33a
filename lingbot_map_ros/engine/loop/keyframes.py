"""The keyframe map: what a loop closure can move (docs/loop_closure.md).

Per keyframe: its pose in the map (`Sim3`: camera -> map, scale = the stream's local unit there), its points
and colours decimated in its own camera frame (stream units), its global descriptor, and what verification
needs (the network-size image, a decimated depth and confidence with their intrinsics). The map cloud is
derived from the keyframe poses (`KeyframeVoxels`): moving a keyframe subtracts its contribution from the
voxels it filled and adds it where it now lies, so a correction touches only the affected voxels.

Bounded: beyond `max_keyframes` the oldest `merge_size` keyframes are merged into one fixed submap (their
points re-expressed in the first one's camera frame and voxel-decimated; their images, depths and descriptors
dropped); the submap keeps the first keyframe's node, pose, image and descriptor, so the place can still be
recognised and verified, and the submap still moves with its node.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from ..geometry import Sim3
from .similarity import between


@dataclass
class Keyframe:
    """One keyframe (module doc). Shapes: points [N, 3] float32 and colors [N, 3] uint8 in the camera frame
    (optical axes, stream units); descriptor [D] float32 unit norm; image [h, w, 3] uint8 network input (None:
    none to verify with); depth / conf [h', w'] float32: the network grid, every `depth_stride`-th row and
    column; `merged`: the keys of a submap (its own first), empty for a plain keyframe; `odometry`: the
    robot's odometry pose [4, 4] float64 (odom frame, metres) at the keyframe when the caller has one."""

    key: int
    stamp_s: float
    stream_pose: Sim3
    pose: Sim3
    points: np.ndarray
    colors: np.ndarray
    descriptor: np.ndarray
    image: np.ndarray | None
    depth: np.ndarray
    conf: np.ndarray
    depth_stride: int
    merged: tuple[int, ...] = ()
    odometry: np.ndarray | None = None  # [4, 4] the robot's odometry pose (metres) when given to `add`

    @cached_property
    def median_depth(self) -> float:  # the depth never changes once a keyframe exists
        valid = self.depth[np.isfinite(self.depth) & (self.depth > 0)]
        return float(np.median(valid)) if valid.size else 1.0

    def map_points(self) -> np.ndarray:
        """[N, 3] float32 points in the map at the keyframe's current pose."""
        return self.pose.apply_points(self.points.astype(np.float64)).astype(np.float32)


def voxel_keys(xyz: np.ndarray, size: float) -> np.ndarray:
    """int64 key [N] of the voxel of each point (21 bits per axis, ±2²⁰ voxels)."""
    cells = np.floor(np.asarray(xyz, np.float64) / size).astype(np.int64) + (1 << 20)
    cells = np.clip(cells, 0, (1 << 21) - 1)
    return (cells[:, 0] << 42) | (cells[:, 1] << 21) | cells[:, 2]


@dataclass
class _Contribution:
    keys: np.ndarray  # [n] int64 unique, sorted
    sums: np.ndarray  # [n, 6] float64 (xyz, rgb) sums
    counts: np.ndarray  # [n] int64


class KeyframeVoxels:
    """Voxel means of the keyframes' points at their current poses, updated per keyframe (add / remove)."""

    def __init__(self, voxel_size: float) -> None:
        self.voxel_size = voxel_size
        self._keys = np.empty(0, np.int64)
        self._sums = np.empty((0, 6), np.float64)
        self._counts = np.empty(0, np.int64)
        self._parts: dict[int, _Contribution] = {}
        self.updates = 0

    def __len__(self) -> int:
        return len(self._keys)

    def place(self, key: int, xyz: np.ndarray, rgb: np.ndarray) -> None:
        """(Re-)place keyframe `key`'s map points [N, 3] with colours [N, 3]: its old contribution leaves."""
        self.remove(key)
        keys = voxel_keys(xyz, self.voxel_size)
        uniq, inverse, counts = np.unique(keys, return_inverse=True, return_counts=True)
        sums = np.zeros((len(uniq), 6))
        np.add.at(sums, inverse, np.concatenate([xyz, rgb], axis=1).astype(np.float64))
        part = _Contribution(uniq, sums, counts.astype(np.int64))
        self._parts[key] = part
        self._apply(part, +1)
        self.updates += 1

    def remove(self, key: int) -> None:
        part = self._parts.pop(key, None)
        if part is not None:
            self._apply(part, -1)

    def points(self) -> tuple[np.ndarray, np.ndarray]:
        """(xyz [M, 3] float32, rgb [M, 3] uint8): one mean point per occupied voxel."""
        means = self._sums / self._counts[:, None]
        return means[:, :3].astype(np.float32), np.clip(np.rint(means[:, 3:]), 0, 255).astype(np.uint8)

    def _apply(self, part: _Contribution, sign: int) -> None:
        idx = np.searchsorted(self._keys, part.keys)
        if len(self._keys):
            found = (idx < len(self._keys)) & (self._keys[np.minimum(idx, len(self._keys) - 1)] == part.keys)
        else:
            found = np.zeros(len(part.keys), bool)
        self._sums[idx[found]] += sign * part.sums[found]
        self._counts[idx[found]] += sign * part.counts[found]
        if sign > 0 and not found.all():
            keys = np.concatenate([self._keys, part.keys[~found]])
            order = np.argsort(keys, kind="stable")
            self._keys = keys[order]
            self._sums = np.concatenate([self._sums, part.sums[~found]])[order]
            self._counts = np.concatenate([self._counts, part.counts[~found]])[order]
        if sign < 0:
            keep = self._counts > 0
            if not keep.all():
                self._keys, self._sums, self._counts = self._keys[keep], self._sums[keep], self._counts[keep]


#: Keys a submap lists as folded into it (the first ones; a submap of submaps folds many more).
MAX_MERGED_KEYS = 63


@dataclass
class KeyframeMap:
    """Keyframes by key (insertion order = time), their derived voxels, the memory budget (module doc)."""

    voxel_size: float
    max_keyframes: int = 2000
    merge_size: int = 10
    keyframes: dict[int, Keyframe] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.voxels = KeyframeVoxels(self.voxel_size)
        self.submaps = 0

    def __len__(self) -> int:
        return len(self.keyframes)

    def add(self, keyframe: Keyframe) -> None:
        self.keyframes[keyframe.key] = keyframe
        self._place(keyframe)

    def move(self, poses: dict[int, Sim3], min_change: float = 1e-4) -> int:
        """Set new map poses; re-place the points of keyframes that moved more than `min_change` (relative:
        translation / median depth, rotation rad, log scale). Returns how many moved."""
        moved = 0
        for key, pose in poses.items():
            keyframe = self.keyframes.get(key)
            if keyframe is None:
                continue
            delta = between(keyframe.pose, pose)
            change = max(
                np.linalg.norm(delta.translation) / keyframe.median_depth,
                np.linalg.norm(delta.rotation - np.eye(3)),
                abs(np.log(delta.scale)),
            )
            keyframe.pose = pose
            if change > min_change:
                self._place(keyframe)
                moved += 1
        return moved

    def over_budget(self) -> bool:
        return len(self.keyframes) > self.max_keyframes

    def merge_oldest(self, keep_newest: int = 1) -> tuple[int, tuple[int, ...]]:
        """Merge the oldest `merge_size` keyframes that are not submaps yet into one submap (module doc); when
        fewer than two are left, the oldest entries whatever they are (submaps fold into submaps), so every
        entry counts towards the budget and the map stays within it. The newest `keep_newest` (>= 1) are
        never folded: the stream's next edge starts at the newest. Returns (the submap's key, the keys
        merged into it)."""
        keys = list(self.keyframes)[: max(len(self.keyframes) - max(keep_newest, 1), 0)]
        plain = [k for k in keys if not self.keyframes[k].merged]
        chosen = plain if len(plain) >= 2 else keys
        if len(chosen) < 2:
            raise ValueError(
                "keyframe map: fewer than two keyframes may be merged (budget below keep_newest)"
            )
        group = [self.keyframes[k] for k in chosen[: self.merge_size]]
        anchor, rest = group[0], group[1:]
        points, colors = [anchor.points], [anchor.colors]
        for keyframe in rest:
            into_anchor = between(anchor.pose, keyframe.pose)
            points.append(into_anchor.apply_points(keyframe.points.astype(np.float64)).astype(np.float32))
            colors.append(keyframe.colors)
            self.voxels.remove(keyframe.key)
            del self.keyframes[keyframe.key]
        xyz, rgb = np.concatenate(points), np.concatenate(colors)
        _, first = np.unique(
            voxel_keys(xyz, self.voxel_size / max(anchor.pose.scale, 1e-9)), return_index=True
        )
        anchor.points, anchor.colors = xyz[first], rgb[first]
        folded = (anchor.merged[1:] if anchor.merged else ()) + tuple(k.key for k in rest)
        anchor.merged = (anchor.key,) + folded[:MAX_MERGED_KEYS]  # the first keys: bounded (loop.npz)
        self._place(anchor)
        self.submaps += 1
        return anchor.key, tuple(k.key for k in rest)

    def _place(self, keyframe: Keyframe) -> None:
        self.voxels.place(keyframe.key, keyframe.map_points(), keyframe.colors)

    def rebuild_grid(self, grid: object) -> None:
        """Clear an `OccupancyGridBuilder` and cast every keyframe's points from its current camera centre."""
        grid.clear()  # type: ignore[attr-defined]
        for keyframe in self.keyframes.values():
            grid.integrate(keyframe.map_points(), keyframe.pose.translation)  # type: ignore[attr-defined]
