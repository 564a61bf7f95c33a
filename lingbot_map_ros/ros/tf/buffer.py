"""A small TF buffer (numpy only, no rclpy): what the node needs of `tf2_ros.Buffer` without tf2_ros.

Edges `parent -> child` arrive as `(parent, child, stamp_s, T_parent_child [4, 4], static)` (`set_transform`)
or as the listener's checked `TfSample`s (`add_sample`: stored as received, O(1) Python work per sample in
the usual in-order case; the [4, 4] matrices are built at lookup, for the two samples around the stamp only).
Dynamic edges keep their last `cache_s` seconds; a lookup at time t interpolates between the two samples
around t (linear translation, slerp rotation, as tf2), and fails rather than extrapolate (except within
`tolerance_s` of the newest or oldest sample). Static edges hold at every time. `lookup(target, source, t)`
returns `T_target_source` along the tree: up from both frames to their common ancestor. `t = 0` means
"latest common time" as in tf2 (each dynamic edge's newest sample).

A frame's chain ends at an edge without data at t, as in tf2's `BufferCore::walkToTopParent` (a parent
lookup that fails is the top of the chain): after `auto`'s switch from `map_to_camera`, the node's old
`camera_link -> map` samples end before `map -> base_link` begins, so neither chain runs through the stale
edge. At t = 0 a loop of newest samples (`map -> base_link -> camera_link -> map`) is cut at its stalest
dynamic edge (tf2 would walk it until its depth limit or use the stale edge's time; docs/robot.md).

Bounded (issue 30): every sample passes the buffer's `TfGraph` (engine/mapping/tf_graph.py) first, which caps
the edges (the least recently sampled dynamic edge is evicted past `max_dynamic_edges`, new static edges past
`max_static_edges` are refused; counted), and an edge keeps at most `MAX_SAMPLES_PER_EDGE` samples.
"""

from __future__ import annotations

import bisect
import threading
from dataclasses import dataclass, field

import numpy as np

from ...engine.face import TfGraph, TransformUnavailable, interpolate_pose, invert_rigid, pose_from_quat
from .wire import TfSample

__all__ = ["TfBuffer", "TransformUnavailable"]  # TransformUnavailable: the engine's, raised here

#: Samples kept per dynamic edge at most (the oldest half goes past it): `cache_s` of a 1 kHz edge.
MAX_SAMPLES_PER_EDGE = 10_000


@dataclass
class _Edge:
    parent: str
    static: bool
    stamps: list[float] = field(default_factory=list)
    poses: list[np.ndarray | TfSample] = field(default_factory=list)  # [4, 4] T_parent_child, or as received


def _matrix(value: np.ndarray | TfSample) -> np.ndarray:
    if isinstance(value, TfSample):
        return pose_from_quat(value.translation, value.rotation)
    return value


class TfBuffer:
    """Thread-safe store of TF edges with interpolation and chains (module doc)."""

    def __init__(self, cache_s: float = 10.0, tolerance_s: float = 0.0, graph: TfGraph | None = None) -> None:
        self.cache_s = cache_s
        self.tolerance_s = tolerance_s
        self.graph = graph if graph is not None else TfGraph()  # the edges' bound and the guard's view
        self._edges: dict[str, _Edge] = {}  # by child frame
        self._lock = threading.Lock()

    def set_transform(self, parent: str, child: str, stamp_s: float, pose: np.ndarray, static: bool) -> None:
        """Add one sample of `parent -> child` (a child has one parent; a new parent replaces the edge)."""
        self._store(parent.lstrip("/"), child.lstrip("/"), stamp_s, np.asarray(pose, np.float64), static)

    def add_sample(self, sample: TfSample, static: bool) -> None:
        """Add one checked sample as received (a unit quaternion); its matrix is built at lookup."""
        self._store(sample.parent, sample.child, sample.stamp_s, sample, static)

    def _store(
        self, parent: str, child: str, stamp_s: float, pose: np.ndarray | TfSample, static: bool
    ) -> None:
        with self._lock:
            stored, evicted = self.graph.admit(parent, child, static)
            if not stored:
                return
            if evicted is not None:
                del self._edges[evicted]
            edge = self._edges.get(child)
            if edge is None or edge.parent != parent or edge.static != static:
                edge = self._edges[child] = _Edge(parent, static)
            if static:
                edge.stamps, edge.poses = [stamp_s], [pose]
                return
            stamps = edge.stamps
            if not stamps or stamp_s > stamps[-1]:  # the usual case: in order, appended
                stamps.append(stamp_s)
                edge.poses.append(pose)
            else:
                i = bisect.bisect_right(stamps, stamp_s)
                if i > 0 and stamps[i - 1] == stamp_s:
                    edge.poses[i - 1] = pose
                else:
                    stamps.insert(i, stamp_s)
                    edge.poses.insert(i, pose)
            if stamps[0] < stamps[-1] - 2.0 * self.cache_s:  # trim in batches: amortised O(1) per sample
                cut = bisect.bisect_left(stamps, stamps[-1] - self.cache_s)
                del stamps[:cut], edge.poses[:cut]
            if len(stamps) > MAX_SAMPLES_PER_EDGE:
                cut = len(stamps) // 2
                del stamps[:cut], edge.poses[:cut]

    def frames(self) -> dict[str, str]:
        """child -> parent of every known edge."""
        with self._lock:
            return {child: edge.parent for child, edge in self._edges.items()}

    def lookup(self, target: str, source: str, stamp_s: float) -> np.ndarray:
        """`T_target_source` [4, 4] at `stamp_s` (0: latest).

        Raises:
            TransformUnavailable: naming the missing edge.
        """
        target, source = target.lstrip("/"), source.lstrip("/")
        with self._lock:
            for at in (stamp_s, None):  # the chains at the stamp; else the whole ones, for the error
                up_source, up_target = self._chain(source, at), self._chain(target, at)
                ancestors = [frame for frame, _ in up_target]
                common = next((frame for frame, _ in up_source if frame in ancestors), None)
                if common is not None:
                    break
            else:
                raise TransformUnavailable(
                    f"'{target}' and '{source}' are not connected in TF (no common parent)",
                    f"{target} -> {source}",
                )
            root_source = self._compose(up_source, common, stamp_s)
            root_target = self._compose(up_target, common, stamp_s)
        return invert_rigid(root_target) @ root_source

    def _chain(self, frame: str, stamp_s: float | None) -> list[tuple[str, _Edge | None]]:
        """[(frame, edge to its parent), (parent, ...), ..., (root, None)]: up to an edge without data at
        `stamp_s` (None: any edge), at 0 a loop cut at its stalest dynamic edge (module doc)."""
        out: list[tuple[str, _Edge | None]] = []
        seen: dict[str, int] = {}
        while frame not in seen:
            seen[frame] = len(out)
            edge = self._edges.get(frame)
            if edge is not None and stamp_s is not None and not self._covers(edge, stamp_s):
                edge = None
            out.append((frame, edge))
            if edge is None:
                return out
            frame = edge.parent
        if stamp_s == 0.0:
            loop = [i for i in range(seen[frame], len(out)) if not out[i][1].static]
            if loop:
                cut = min(loop, key=lambda i: out[i][1].stamps[-1])
                return [*out[:cut], (out[cut][0], None)]
        return out

    def _covers(self, edge: _Edge, stamp_s: float) -> bool:
        """Whether `edge` has data at `stamp_s` (within `tolerance_s` of its oldest kept or newest sample)."""
        if edge.static or stamp_s == 0.0:
            return True
        stamps = edge.stamps
        oldest = bisect.bisect_left(stamps, stamps[-1] - self.cache_s)
        return stamps[oldest] - self.tolerance_s <= stamp_s <= stamps[-1] + self.tolerance_s

    def _compose(self, chain: list[tuple[str, _Edge | None]], stop: str, stamp_s: float) -> np.ndarray:
        """T_stop_frame for the first frame of `chain`."""
        pose = np.eye(4)
        for frame, edge in chain:
            if frame == stop:
                return pose
            pose = self._sample(frame, edge, stamp_s) @ pose
        return pose

    def _sample(self, child: str, edge: _Edge, stamp_s: float) -> np.ndarray:
        name = f"{edge.parent} -> {child}"
        if edge.static or stamp_s == 0.0:
            return _matrix(edge.poses[-1])
        stamps = edge.stamps
        oldest = bisect.bisect_left(stamps, stamps[-1] - self.cache_s)  # older ones wait for the batch trim
        if stamp_s > stamps[-1]:
            if stamp_s - stamps[-1] <= self.tolerance_s:
                return _matrix(edge.poses[-1])
            raise TransformUnavailable(
                f"{name}: no data at {stamp_s:.3f} s yet (newest {stamps[-1]:.3f} s)", name
            )
        if stamp_s < stamps[oldest]:
            if stamps[oldest] - stamp_s <= self.tolerance_s:
                return _matrix(edge.poses[oldest])
            raise TransformUnavailable(
                f"{name}: {stamp_s:.3f} s is older than the buffer (oldest {stamps[oldest]:.3f} s)", name
            )
        i = bisect.bisect_left(stamps, stamp_s)
        if stamps[i] == stamp_s:
            return _matrix(edge.poses[i])
        t0, t1 = stamps[i - 1], stamps[i]
        alpha = (stamp_s - t0) / (t1 - t0)
        return interpolate_pose(_matrix(edge.poses[i - 1]), _matrix(edge.poses[i]), alpha)
