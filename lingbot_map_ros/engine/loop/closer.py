"""`LoopCloser`: keyframe map + place recognition + verification + Sim(3) pose graph, for one stream's epoch;
`LoopClosureWorker`: the same on its own thread (never on the pose path). docs/loop_closure.md.

The stream keeps its own frame; the closer keeps ``T_map_stream`` (`correction`, a Sim(3)): a keyframe enters
the map at ``correction ∘ stream pose``; after a verified loop the graph is optimised, the keyframes are moved
(their voxels re-placed) and the correction becomes ``pose_map ∘ pose_stream⁻¹`` of the newest keyframe — the
jump a node publishes as ``map -> odom`` (robot modes) or ``map -> camera`` (bare camera).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

import cv2
import numpy as np

from ..geometry import Sim3, rotation_angle
from ..lanes import Lane
from ..lock_order import OrderedLock
from ..mapping.frames import camera_points
from ..result import FrameResult
from ..stream.preprocess import preprocess_geometry, resize_uint8
from .config import LoopClosureConfig
from .descriptor import Candidate, Describe, DescriptorIndex
from .keyframes import Keyframe, KeyframeMap
from .persist import LoopRestore
from .pose_graph import Edge, EdgeSigma, OptimizeResult, PoseGraph
from .similarity import between, compose, from_pose, inverse, size
from .verify import Verification

_LOG = logging.getLogger(__name__)
#: Sigmas (rotation rad, translation, log scale) of the edge from a restored map's newest keyframe to the
#: first of a new epoch: loose enough that the first loop into the map decides where the epoch lies.
EPOCH_SIGMA = (10.0, 100.0, 10.0)

Verify = Callable[[Keyframe, Keyframe], Verification]


@dataclass(frozen=True)
class LoopEvent:
    """A verified loop and the optimisation it triggered: `correction` is the new T_map_stream, `jump` the
    change it made (``new ∘ old⁻¹``, in the map)."""

    verification: Verification
    optimization: OptimizeResult
    correction: Sim3
    jump: Sim3


@dataclass
class LoopStats:
    """Counters for /diagnostics (`as_dict`)."""

    keyframes: int = 0
    submaps: int = 0
    candidates: int = 0
    verified: int = 0
    rejected: int = 0
    graph_outliers: int = 0
    optimizations: int = 0
    last_optimize_ms: float = 0.0
    last_correction_m: float = 0.0
    last_correction_deg: float = 0.0
    last_correction_scale: float = 1.0

    def as_dict(self) -> dict[str, float]:
        return dict(vars(self))


class LoopCloser:
    """One epoch's loop closure (module doc). Not thread-safe: `LoopClosureWorker` serialises it."""

    def __init__(
        self, config: LoopClosureConfig, image_width: int, describe: Describe, verify: Verify
    ) -> None:
        self.config = config
        self.image_width = image_width
        self.describe, self.verify = describe, verify
        self.clear()

    def clear(self) -> None:
        cfg = self.config
        self.map = KeyframeMap(cfg.voxel_size, cfg.max_keyframes, cfg.merge_size)
        self.graph = PoseGraph(cfg.graph)
        self.index = DescriptorIndex()
        self.correction = Sim3.identity()
        self.stats = LoopStats()
        self.loops: list[tuple[int, int]] = []  # loop edges in the graph (keyframe keys)
        self.accepted: list[tuple[int, int]] = []  # every pair verification accepted
        self._last: Keyframe | None = None
        self.last_loop_key: int | None = None
        self._key_offset = 0  # keys of a restored map's new epoch start past its keys
        self._restored_end: int | None = None  # a restored map's newest key until the first loop into it

    def wants(self, stream_pose: np.ndarray) -> bool:
        """Whether a frame at `stream_pose` [4, 4] would become a loop keyframe (moved or turned enough)."""
        if self._last is None:
            return True
        delta = between(self._last.stream_pose, from_pose(stream_pose))
        return (
            np.linalg.norm(delta.translation) >= self.config.keyframe_translation * self._last.median_depth
            or np.degrees(rotation_angle(delta.rotation)) >= self.config.keyframe_rotation_deg
        )

    def add(self, result: FrameResult, stamp_s: float) -> LoopEvent | None:
        """Take a keyframe result (stream frame: `pose_c2w`, `depth`, ...); returns the loop event it caused.
        Frames that `wants` declines are ignored."""
        if not self.wants(result.pose_c2w):
            return None
        keyframe = self._keyframe(result, stamp_s)
        previous = self._last
        self.map.add(keyframe)
        self.graph.add_node(keyframe.key, keyframe.pose)
        if previous is not None:
            step = between(previous.stream_pose, keyframe.stream_pose)
            self.graph.add_edge(Edge(previous.key, keyframe.key, step, self._stream_sigma(step, previous)))
        elif self._restored_end is not None:  # a new epoch on a restored map: held loosely where it starts
            end = self.graph.poses[self._restored_end]
            self.graph.add_edge(
                Edge(self._restored_end, keyframe.key, between(end, keyframe.pose), EdgeSigma(*EPOCH_SIGMA))
            )
        candidates = self.index.query(
            keyframe.descriptor, self.config.exclude_recent, self.config.top_k, self.config.min_similarity
        )
        self.index.add(keyframe.key, keyframe.descriptor)
        self._last = keyframe
        self.stats.keyframes = len(self.map)
        event = self._close(keyframe, candidates)
        while self.map.over_budget():
            anchor, merged = self.map.merge_oldest()
            self.graph.merge(anchor, merged)
            self.index.remove(set(merged))
            self.stats.submaps, self.stats.keyframes = self.map.submaps, len(self.map)
        return event

    def optimize(self) -> OptimizeResult | None:
        """A forced pass (`~/optimize`): optimise, move the keyframes, update the correction."""
        if self._last is None:
            return None
        return self._optimize()

    def restore(self, saved: LoopRestore) -> None:
        """Swap in a saved keyframe map and graph (`persist.check_loop` validated it; nothing here fails on
        its content). The next keyframe starts a new epoch: no stream edge to the saved ones (a loose
        `EPOCH_SIGMA` edge keeps the graph connected), keys past the saved ones, and the first verified loop
        into the saved map moves the new epoch rigidly before optimising (a relocalisation)."""
        self.clear()
        for keyframe in saved.keyframes:
            self.map.keyframes[keyframe.key] = keyframe
            self.map.voxels.place(keyframe.key, keyframe.map_points(), keyframe.colors)
            self.index.add(keyframe.key, keyframe.descriptor)
        self.map.submaps = saved.submaps
        self.graph.load({kf.key: kf.pose for kf in saved.keyframes}, saved.edges, saved.fixed)
        self.loops = [(e.a, e.b) for e in saved.edges if e.loop]
        self.correction, self.last_loop_key = saved.correction, saved.last_loop_key
        for name, value in saved.counters.items():
            setattr(self.stats, name, value)
        self.stats.keyframes, self.stats.submaps = len(self.map), saved.submaps
        self._restored_end = saved.keyframes[-1].key
        self._key_offset = max(kf.key for kf in saved.keyframes) + 1

    def corrected(self, stream_pose: np.ndarray) -> Sim3:
        """A stream pose [4, 4] in the map now (the correction applied)."""
        return compose(self.correction, from_pose(stream_pose))

    # ------------------------------------------------------------------------------------------------
    def _keyframe(self, result: FrameResult, stamp_s: float) -> Keyframe:
        cfg = self.config
        geometry = preprocess_geometry(result.image_hw, self.image_width)
        image = resize_uint8(result.rgb, geometry)
        (resized_h, resized_w), top, out_h = geometry.resized_hw, geometry.crop_top, geometry.out_hw[0]

        def network(values: np.ndarray) -> np.ndarray:
            grid = cv2.resize(
                np.nan_to_num(values, nan=0.0).astype(np.float32),
                (resized_w, resized_h),
                interpolation=cv2.INTER_NEAREST,
            )
            return grid[top : top + out_h][:: cfg.depth_stride, :: cfg.depth_stride].copy()

        mask = result.depth_conf > cfg.conf_threshold
        cam_xyz, flat = camera_points(result.depth, result.intrinsics, mask, cfg.point_stride)
        stream_pose = from_pose(result.pose_c2w)
        return Keyframe(
            key=int(result.index) + self._key_offset,
            stamp_s=stamp_s,
            stream_pose=stream_pose,
            pose=compose(self.correction, stream_pose),
            points=cam_xyz.astype(np.float32),
            colors=result.rgb.reshape(-1, 3).take(flat, axis=0),
            descriptor=self.describe(image) if result.place_descriptor is None else result.place_descriptor,
            image=image,
            depth=network(result.depth),
            conf=network(result.depth_conf),
            depth_stride=cfg.depth_stride,
        )

    def _stream_sigma(self, step: Sim3, previous: Keyframe) -> EdgeSigma:
        cfg = self.config
        length = float(np.linalg.norm(step.translation)) + previous.median_depth * float(
            rotation_angle(step.rotation)
        )
        return EdgeSigma(
            cfg.stream_sigma_floor + cfg.stream_sigma_rate * length,
            cfg.stream_sigma_floor * previous.median_depth + cfg.stream_sigma_rate * length,
            cfg.stream_sigma_floor + cfg.stream_sigma_rate * length,
        )

    def _close(self, keyframe: Keyframe, candidates: list[Candidate]) -> LoopEvent | None:
        for candidate in candidates:
            old = self.map.keyframes.get(candidate.key)
            if old is None:
                continue
            self.stats.candidates += 1
            verdict = self.verify(old, keyframe)
            if not verdict.accepted:
                self.stats.rejected += 1
                _LOG.debug("loop %d -> %d rejected: %s", old.key, keyframe.key, verdict.reason)
                continue
            self.stats.verified += 1
            cfg = self.config
            sigma = EdgeSigma(
                cfg.loop_rotation_sigma, cfg.loop_translation_sigma * old.median_depth, cfg.loop_scale_sigma
            )
            self.graph.add_edge(Edge(old.key, keyframe.key, verdict.relative, sigma, loop=True))
            self.loops.append((old.key, keyframe.key))
            self.accepted.append((old.key, keyframe.key))
            relocalised = self._restored_end is not None and old.key <= self._restored_end
            since = self._restored_end if relocalised else self.last_loop_key
            self.graph.spread(
                compose(self.graph.poses[old.key], verdict.relative), keyframe.key, since, rigid=relocalised
            )
            if relocalised:
                self._restored_end = None
            before = self.correction
            optimization = self._optimize()
            self.last_loop_key = keyframe.key
            return LoopEvent(
                verdict, optimization, self.correction, compose(self.correction, inverse(before))
            )
        return None

    def _optimize(self) -> OptimizeResult:
        result = self.graph.optimize()
        self.map.move(result.poses)
        self.stats.optimizations += 1
        self.stats.last_optimize_ms = result.time_ms
        self.stats.graph_outliers += len(result.outliers)
        for edge in result.outliers:
            if (edge.a, edge.b) in self.loops:
                self.loops.remove((edge.a, edge.b))
        newest = self._last
        new = compose(self.graph.poses[newest.key], inverse(newest.stream_pose))
        translation, angle, log_scale = size(compose(new, inverse(self.correction)))
        self.correction = new
        self.stats.last_correction_m, self.stats.last_correction_deg = translation, float(np.degrees(angle))
        self.stats.last_correction_scale = float(np.exp(log_scale))
        return result


class LoopClosureWorker:
    """A `LoopCloser` on its own daemon thread: `submit` keyframe results (drop-oldest queue), `on_event`
    gets each `LoopEvent` on that thread; `snapshot()` reads under the closer's lock."""

    def __init__(self, closer: LoopCloser, on_event: Callable[[LoopEvent], None] | None = None) -> None:
        self.closer = closer
        self.on_event = on_event
        self.lock = OrderedLock("loop.worker_lock")
        self._lane: Lane[tuple[str, object, float]] = Lane(closer.config.queue_depth)  # drop-oldest
        self._ready = threading.Condition()  # guards the lane
        self._thread = threading.Thread(target=self._run, name="loop_closure", daemon=True)
        self._thread.start()

    @property
    def dropped(self) -> int:
        """Items dropped from the full queue (the oldest first)."""
        with self._ready:
            return self._lane.dropped

    def submit(self, result: FrameResult, stamp_s: float) -> None:
        """Queue a keyframe result (never blocks: the oldest waiting one is dropped when full)."""
        self._put(("frame", result, stamp_s))

    def request_optimize(self) -> None:
        self._put(("optimize", None, 0.0))

    def clear(self) -> None:
        self._put(("clear", None, 0.0))

    def stop(self, timeout_s: float = 5.0) -> None:
        self._put(("stop", None, 0.0))
        self._thread.join(timeout_s)

    def join_idle(self, timeout_s: float = 30.0) -> None:
        """Wait until everything queued so far was processed (tests, `run`)."""
        done = threading.Event()
        self._put(("mark", done, 0.0))
        done.wait(timeout_s)

    def _put(self, item: tuple[str, object, float]) -> None:
        with self._ready:
            self._lane.push(item)  # a full lane drops its oldest item, counted
            self._ready.notify()

    def _run(self) -> None:
        while True:
            with self._ready:
                self._ready.wait_for(lambda: self._lane.queue)
                kind, payload, stamp_s = self._lane.queue.popleft()
            if kind == "stop":
                return
            try:
                event = None
                with self.lock:
                    if kind == "frame":
                        event = self.closer.add(payload, stamp_s)  # type: ignore[arg-type]
                    elif kind == "optimize":
                        self.closer.optimize()
                    elif kind == "clear":
                        self.closer.clear()
                    elif kind == "mark":
                        payload.set()  # type: ignore[union-attr]
                if event is not None and self.on_event is not None:
                    self.on_event(event)
            except Exception:  # the closer must never take the node down; the map keeps its last poses
                _LOG.exception("loop closure failed on a %s item", kind)
