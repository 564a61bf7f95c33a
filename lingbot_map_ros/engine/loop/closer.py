"""`LoopCloser`: keyframe map + place recognition + verification + Sim(3) pose graph, for one stream's epoch
(`worker.LoopClosureWorker` runs it on its own thread, never on the pose path). docs/loop_closure.md.

The stream keeps its own frame; the closer keeps ``T_map_stream`` (`correction`, a Sim(3)): a keyframe enters
the map at ``correction ∘ stream pose``; after a verified loop the graph is optimised, the keyframes are moved
(their voxels re-placed) and the correction becomes ``pose_map ∘ pose_stream⁻¹`` of the newest keyframe — the
jump a node publishes as ``map -> odom`` (robot modes) or ``map -> camera`` (bare camera).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from ..geometry import Sim3, rotation_angle
from ..result import FrameResult
from .config import LoopClosureConfig
from .descriptor import Candidate, Describe, DescriptorIndex
from .edges import loop_sigma, stream_sigma
from .gate import LoopStreaks, OdometryScale, innovation_chi2, odometry_disagreement
from .keyframe_build import build_keyframe
from .keyframes import Keyframe, KeyframeMap
from .persist import LoopRestore
from .pose_graph import Edge, EdgeSigma, GraphState, OptimizeResult, PoseGraph
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


@dataclass(frozen=True)
class _Checkpoint:
    """The closer's state before a loop or a forced pass (a transaction; `reject_last_loop`)."""

    graph: GraphState
    correction: Sim3
    loops: list[tuple[int, int]]
    last_loop_key: int | None
    restored_end: int | None
    pair: tuple[int, int] = (-1, -1)  # the loop edge committed after this checkpoint (`reject_last_loop`)


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
    rejected_unconfirmed: int = 0  # verified, but fewer than consistent_loops keyframes in a row agree
    rejected_inconsistent: int = 0  # verified, refused by the chi-square gate (gate.py)
    rejected_odometry: int = 0  # verified, contradicts the robot's odometry between its keyframes
    rejected_correction: int = 0  # the optimised correction jumped more than max_correction_m: undone
    optimize_failures: int = 0  # gtsam raised: graph and closer left as they were
    loops_undone: int = 0  # reject_last_loop
    last_loop_chi2: float = 0.0

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
        self._descriptor_dim: int | None = None
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
        self._before_last_loop: _Checkpoint | None = None  # what `reject_last_loop` restores
        self._odometry_scale = OdometryScale()
        self._streaks = LoopStreaks(cfg.consistency_translation, cfg.consistency_rotation_deg)

    def wants(self, stream_pose: np.ndarray) -> bool:
        """Whether a frame at `stream_pose` [4, 4] would become a loop keyframe (moved or turned enough)."""
        if self._last is None:
            return True
        delta = between(self._last.stream_pose, from_pose(stream_pose))
        return (
            np.linalg.norm(delta.translation) >= self.config.keyframe_translation * self._last.median_depth
            or np.degrees(rotation_angle(delta.rotation)) >= self.config.keyframe_rotation_deg
        )

    def add(
        self, result: FrameResult, stamp_s: float, odometry: np.ndarray | None = None
    ) -> LoopEvent | None:
        """Take a keyframe result (stream frame: `pose_c2w`, `depth`, ...); returns the loop event it caused.
        Frames that `wants` declines are ignored. `odometry` [4, 4] (optional, robot modes): the robot's pose
        in its odometry frame (metres) at this frame; a loop between two keyframes that have one must agree
        with it (`gate.odometry_disagreement`)."""
        if not self.wants(result.pose_c2w):
            return None
        keyframe = self.keyframe_of(result, stamp_s)
        if odometry is not None:
            keyframe.odometry = np.asarray(odometry, np.float64)
            self._odometry_scale.observe(previous_step=self._last, keyframe=keyframe)
        previous = self._last
        self.map.add(keyframe)
        self.graph.add_node(keyframe.key, keyframe.pose)
        if previous is not None:
            step = between(previous.stream_pose, keyframe.stream_pose)
            self.graph.add_edge(
                Edge(previous.key, keyframe.key, step, stream_sigma(step, previous, self.config))
            )
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
        self._streaks.next_keyframe()
        event = self._close(keyframe, candidates)
        keep = min(self.config.exclude_recent, self.config.max_keyframes // 2)
        while self.map.over_budget():  # never folds the newest keyframes (the stream's end)
            anchor, merged = self.map.merge_oldest(keep_newest=keep)
            self.graph.merge(anchor, merged)
            self.index.remove(set(merged))
            if self._before_last_loop is not None and set(self._before_last_loop.pair) & set(merged):
                self._before_last_loop = None  # the last loop's edge was folded: it can no longer be undone
            self.stats.submaps, self.stats.keyframes = self.map.submaps, len(self.map)
        return event

    def optimize(self) -> OptimizeResult | None:
        """A forced pass (`~/optimize`): optimise, move the keyframes, update the correction. A transaction:
        None (counted) when gtsam fails or the correction would jump past `max_correction_m`."""
        if self._last is None:
            return None
        checkpoint = self._checkpoint()
        result = self._optimize()
        if result is None:
            self._rollback(checkpoint)
        return result

    def reject_last_loop(self) -> bool:
        """Remove the last accepted loop edge and put back the map and correction from before it (nodes
        added since follow their stream edges). False when there is none to undo (none yet, already undone,
        or the keyframe budget folded one of its two keyframes into a submap)."""
        before = self._before_last_loop
        if before is None:
            return False
        self._before_last_loop = None
        newer = [k for k in self.graph.poses if k not in before.graph.poses]
        edges = [e for e in self.graph.edges if not (e.loop and (e.a, e.b) == before.pair)]
        poses = {k: p for k, p in before.graph.poses.items() if k in self.graph.poses}
        for edge in edges:  # the newer nodes hang off their predecessors by their stream edges
            if edge.b in newer and edge.a in poses and not edge.loop:
                poses[edge.b] = compose(poses[edge.a], edge.measured)
        self.graph.restore(GraphState(poses, edges, self.graph.fixed))
        self.map.move(poses)
        self.loops = [pair for pair in self.loops if pair != before.pair]
        self.correction, self.last_loop_key = before.correction, before.last_loop_key
        if self._last is not None and self._last.key in poses:
            self.correction = compose(poses[self._last.key], inverse(self._last.stream_pose))
        self._restored_end = before.restored_end
        self.stats.loops_undone += 1
        return True

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

    def descriptor_dim(self, probe: bool = True) -> int | None:
        """Length of this closer's place descriptors (a saved map's must match: `persist.check_loop`): a
        keyframe's, else (`probe`) one description of a blank network-size image; cached. None when not
        known and not probed (a caller off the closer's thread must not run the model)."""
        if self._descriptor_dim is None:
            keyframe = next(iter(self.map.keyframes.values()), None)
            if keyframe is not None:
                self._descriptor_dim = len(keyframe.descriptor)
            elif probe:
                height = max(14, self.image_width * 3 // 4 // 14 * 14)
                self._descriptor_dim = len(self.describe(np.zeros((height, self.image_width, 3), np.uint8)))
        return self._descriptor_dim

    def corrected_pose(self, keyframe: Keyframe) -> Sim3:
        """A keyframe's stream pose under the current correction (where it is before a pending change)."""
        return compose(self.correction, keyframe.stream_pose)

    def start_segment(self) -> None:
        """The stream lost track (engine/health.py): the next keyframe gets no stream edge from the last
        one, only the loose `EPOCH_SIGMA` edge, and the first loop into the keyframes before moves the new
        segment rigidly (as a restored map's new epoch)."""
        if self._last is not None:
            self._restored_end = self._last.key
        self._last = None
        self._streaks.clear()

    def corrected(self, stream_pose: np.ndarray) -> Sim3:
        """A stream pose [4, 4] in the map now (the correction applied)."""
        return compose(self.correction, from_pose(stream_pose))

    def keyframe_of(self, result: FrameResult, stamp_s: float) -> Keyframe:
        """The keyframe `result` would become now (its key, its pose under the current correction); not
        added (`add` adds it; the relocaliser searches with it, engine/loop/relocalise.py)."""
        key = int(result.index) + self._key_offset
        return build_keyframe(
            result, stamp_s, key, self.correction, self.config, self.image_width, self.describe
        )

    def join_relocalised(self, query: Keyframe, old: Keyframe, relative: Sim3) -> None:
        """A relocalised keyframe `query` (its `pose` already in the map) joins the map by a loop edge from
        `old` (`relative`: the verified old -> query Sim(3)); the new segment's stream edges start at it,
        none across the loss (engine/loop/relocalise.py)."""
        self.map.add(query)
        self.graph.add_node(query.key, query.pose)
        self.graph.add_edge(Edge(old.key, query.key, relative, loop_sigma(old, self.config), loop=True))
        self.index.add(query.key, query.descriptor)
        self.loops.append((old.key, query.key))
        self.accepted.append((old.key, query.key))
        self._last, self._restored_end, self.last_loop_key = query, None, query.key
        self.stats.keyframes = len(self.map)

    # ------------------------------------------------------------------------------------------------
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
            implied = compose(
                compose(self.graph.poses[old.key], verdict.relative), inverse(keyframe.stream_pose)
            )
            if self._streaks.observe(implied, keyframe) < self.config.consistent_loops:
                self.stats.rejected_unconfirmed += 1
                _LOG.debug("loop %d -> %d not yet confirmed by consecutive keyframes", old.key, keyframe.key)
                continue
            event = self._accept(old, keyframe, verdict)
            if event is not None:
                return event
        return None

    def _accept(self, old: Keyframe, keyframe: Keyframe, verdict: Verification) -> LoopEvent | None:
        """A verified loop as a transaction (docs/loop_closure.md "Acceptance"): the chi-square gate against
        the graph, then spread + optimise; a gtsam failure, the new edge dropped as an outlier or a jump past
        `max_correction_m` restores everything as it was (counted)."""
        cfg = self.config
        edge = Edge(old.key, keyframe.key, verdict.relative, loop_sigma(old, cfg), loop=True)
        checkpoint = self._checkpoint()
        try:
            chi2 = innovation_chi2(self.graph, edge)
        except Exception as error:  # noqa: BLE001 - gtsam's failures are RuntimeErrors of many kinds
            _LOG.warning("loop %d -> %d: the gate failed (%s); refused", old.key, keyframe.key, error)
            self.stats.optimize_failures += 1
            self._rollback(checkpoint)
            return None
        self.stats.last_loop_chi2 = chi2
        disagreement = odometry_disagreement(old, keyframe, verdict.relative, self._odometry_scale, cfg)
        if disagreement is not None:
            self.stats.rejected_odometry += 1
            _LOG.debug("loop %d -> %d refused: %s", old.key, keyframe.key, disagreement)
            return None
        if chi2 > cfg.max_loop_chi2:
            self.stats.rejected_inconsistent += 1
            _LOG.debug(
                "loop %d -> %d refused: chi2 %.1f > %.1f", old.key, keyframe.key, chi2, cfg.max_loop_chi2
            )
            return None
        self.graph.add_edge(edge)
        self.loops.append((old.key, keyframe.key))
        relocalised = self._restored_end is not None and old.key <= self._restored_end
        since = self._restored_end if relocalised else self.last_loop_key
        self.graph.spread(
            compose(self.graph.poses[old.key], verdict.relative), keyframe.key, since, rigid=relocalised
        )
        before = self.correction
        optimization = self._optimize(edge)
        if optimization is None:
            self._rollback(checkpoint)
            return None
        if relocalised:
            self._restored_end = None
        self.accepted.append((old.key, keyframe.key))
        self.last_loop_key = keyframe.key
        self._before_last_loop = replace(checkpoint, pair=(old.key, keyframe.key))
        return LoopEvent(verdict, optimization, self.correction, compose(self.correction, inverse(before)))

    def _optimize(self, new_edge: Edge | None = None) -> OptimizeResult | None:
        """Optimise; None (counted; the caller rolls back) when gtsam raises, `new_edge` ends an outlier or
        the correction would jump more than `max_correction_m` (or stop being finite)."""
        try:
            result = self.graph.optimize()
        except Exception as error:  # noqa: BLE001 - gtsam raises RuntimeErrors of many kinds
            _LOG.warning("pose-graph optimisation failed (%s): graph and map left as they were", error)
            self.stats.optimize_failures += 1
            return None
        self.stats.optimizations += 1
        self.stats.last_optimize_ms = result.time_ms
        self.stats.graph_outliers += len(result.outliers)
        if new_edge is not None and new_edge in result.outliers:
            return None
        newest = self._last
        new = compose(self.graph.poses[newest.key], inverse(newest.stream_pose))
        translation, angle, log_scale = size(compose(new, inverse(self.correction)))
        translation = float(  # the jump at the camera (the correction's own translation grows with the lever)
            np.linalg.norm(self.graph.poses[newest.key].translation - self.corrected_pose(newest).translation)
        )
        if not (
            np.isfinite([translation, angle, log_scale]).all() and translation <= self.config.max_correction_m
        ):
            _LOG.warning(
                "loop correction of %.3g refused (max_correction_m %g)",
                translation,
                self.config.max_correction_m,
            )
            self.stats.rejected_correction += 1
            return None
        self.map.move(result.poses)
        for edge in result.outliers:
            if (edge.a, edge.b) in self.loops:
                self.loops.remove((edge.a, edge.b))
        self.correction = new
        self.stats.last_correction_m, self.stats.last_correction_deg = translation, float(np.degrees(angle))
        self.stats.last_correction_scale = float(np.exp(log_scale))
        return result

    def _checkpoint(self) -> _Checkpoint:
        return _Checkpoint(
            self.graph.snapshot(), self.correction, list(self.loops), self.last_loop_key, self._restored_end
        )

    def _rollback(self, checkpoint: _Checkpoint) -> None:
        self.graph.restore(checkpoint.graph)
        self.correction, self.loops = checkpoint.correction, list(checkpoint.loops)
        self.last_loop_key, self._restored_end = checkpoint.last_loop_key, checkpoint.restored_end
