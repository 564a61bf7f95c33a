"""A Sim(3) pose graph over keyframes in gtsam: stream edges between consecutive keyframes, verified loop
edges under a robust (Cauchy) kernel, Gauss-Newton (Levenberg-Marquardt when a step overshoots) with a time
bound, warm-started from the previous solution with the new loop's correction spread (`spread`)
(docs/loop_closure.md, "Optimisation time").

Nodes are keyframe poses in the map (`Sim3`: camera -> map, scale = the stream's local unit there). An edge
measures ``a⁻¹ ∘ b``. gtsam's Sim(3) tangent is (rotation [3], translation [3], log scale [1]); translations
are in node a's local units. Sigmas come with each edge (the caller knows step lengths and depths).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from ..geometry import Sim3
from ..settings import setting
from .gtsam_import import gtsam
from .similarity import between, compose, interpolate, inverse, to_gtsam


@dataclass(frozen=True)
class EdgeSigma:
    """Standard deviations of one edge: rotation (rad), translation (node a's units), log scale."""

    rotation: float
    translation: float
    scale: float

    def vector(self) -> np.ndarray:
        return np.array([self.rotation] * 3 + [self.translation] * 3 + [self.scale], np.float64)


@dataclass(frozen=True)
class Edge:
    """``a⁻¹ ∘ b`` measured as `measured`; `loop` edges carry the robust kernel."""

    a: int
    b: int
    measured: Sim3
    sigma: EdgeSigma
    loop: bool = False


@dataclass(frozen=True)
class GraphConfig:
    """`loop_closure.*` of the optimiser: Cauchy kernel width (whitened units), iteration and time bounds,
    the relative error decrease under which a pass stops (1e-3: from the closer's warm start two
    Gauss-Newton steps end within 1e-5 of the batch optimum, benchmarks/pose_graph.py), and the robust
    weight under which a loop edge counts as an outlier after a pass (removed)."""

    cauchy_k: float = 3.0
    max_iterations: int = 50
    max_time_ms: float = setting(
        200.0, "Time bound of one pose-graph optimisation (on the closer's thread).", bounds=(1.0, 60000.0)
    )
    relative_tolerance: float = 1e-3
    outlier_weight: float = 0.1


@dataclass(frozen=True)
class GraphState:
    """What `PoseGraph.snapshot` keeps so that `restore` undoes a failed or refused change (a transaction)."""

    poses: dict[int, Sim3]
    edges: list[Edge]
    fixed: int | None


@dataclass(frozen=True)
class OptimizeResult:
    """One pass: new node poses, iterations, wall ms, final error, loop edges dropped as outliers, whether the
    time bound stopped it."""

    poses: dict[int, Sim3]
    iterations: int
    time_ms: float
    error: float
    outliers: tuple[Edge, ...]
    timed_out: bool


class PoseGraph:
    """Keyframe nodes and their edges (not thread-safe: the loop closer's thread owns it)."""

    def __init__(self, config: GraphConfig | None = None) -> None:
        self.config = config or GraphConfig()
        self.poses: dict[int, Sim3] = {}
        self.edges: list[Edge] = []
        self.fixed: int | None = None
        # gtsam's copy, grown with each node and edge (rebuilt only when edges leave or nodes merge)
        self._graph: gtsam.NonlinearFactorGraph | None = gtsam.NonlinearFactorGraph()
        self._values = gtsam.Values()
        self._cauchy = gtsam.noiseModel.mEstimator.Cauchy.Create(self.config.cauchy_k)

    def add_node(self, key: int, pose: Sim3) -> None:
        """A keyframe's initial pose (the first node added is held fixed: it anchors the map)."""
        if self.fixed is None:
            self.fixed = key
        self.poses[key] = pose
        self._values.insert(key, to_gtsam(pose))
        if self._graph is not None and key == self.fixed:
            self._graph.add(self.prior_factor())

    def load(self, poses: dict[int, Sim3], edges: list[Edge], fixed: int) -> None:
        """Replace the whole graph (a restored session; `persist.check_loop` validated it)."""
        self.poses, self.edges, self.fixed = dict(poses), list(edges), fixed
        self._build()

    def set_pose(self, key: int, pose: Sim3) -> None:
        """Move a node's current estimate (an initial guess before `optimize`)."""
        self.poses[key] = pose
        self._values.update(key, to_gtsam(pose))

    def add_edge(self, edge: Edge) -> None:
        if edge.a not in self.poses or edge.b not in self.poses:
            raise KeyError(f"edge {edge.a} -> {edge.b} names a node not in the graph")
        self.edges.append(edge)
        if self._graph is not None:
            self._graph.add(self.edge_factor(edge))

    def snapshot(self) -> GraphState:
        """The graph as it is now (poses and edges are immutable values: copies of the containers suffice)."""
        return GraphState(dict(self.poses), list(self.edges), self.fixed)

    def restore(self, state: GraphState) -> None:
        """Back to a `snapshot` (gtsam's copy is rebuilt: whatever a failed pass left in it is gone)."""
        self.poses, self.edges, self.fixed = dict(state.poses), list(state.edges), state.fixed
        self._build()

    def factor_graph(self) -> gtsam.NonlinearFactorGraph:
        """gtsam's factor graph of the current nodes and edges (built if an edit invalidated it)."""
        if self._graph is None:
            self._build()
        return self._graph

    def values(self) -> gtsam.Values:
        """gtsam's values at the current poses."""
        if self._graph is None:
            self._build()
        return self._values

    @property
    def loop_edges(self) -> list[Edge]:
        return [e for e in self.edges if e.loop]

    def optimize(self) -> OptimizeResult:
        """Gauss-Newton from the current poses (the closer starts it near the solution), falling back to
        Levenberg-Marquardt from the best values when a step raises the error; at most `max_iterations` /
        `max_time_ms`. The poses are updated; loop edges whose robust weight ends below `outlier_weight` are
        removed and returned."""
        start = time.perf_counter()
        if self._graph is None:
            self._build()
        graph, values = self._graph, self._values
        ordering = gtsam.Ordering.ColamdNonlinearFactorGraph(graph)  # once per pass, not per iteration
        params = gtsam.GaussNewtonParams()
        params.setLinearSolverType("SEQUENTIAL_CHOLESKY")  # fastest of Cholesky/QR x sequential/multifrontal
        params.setOrdering(ordering)
        optimizer = gtsam.GaussNewtonOptimizer(graph, values, params)
        best, error, iterations, timed_out, damped = values, graph.error(values), 0, False, False
        while iterations < self.config.max_iterations:
            optimizer.iterate()
            iterations += 1
            new_error = optimizer.error()
            if new_error > error and not damped:  # a Gauss-Newton step overshot: damp from the best values
                damped = True
                lm_params = gtsam.LevenbergMarquardtParams()
                lm_params.setLinearSolverType("SEQUENTIAL_CHOLESKY")
                lm_params.setOrdering(ordering)
                optimizer = gtsam.LevenbergMarquardtOptimizer(graph, best, lm_params)
                continue
            converged = error - new_error <= self.config.relative_tolerance * max(error, 1e-12)
            if new_error <= error:
                best, error = gtsam.Values(optimizer.values()), new_error
            if converged:
                break
            if (time.perf_counter() - start) * 1e3 > self.config.max_time_ms:
                timed_out = True
                break
        self._values = best
        self.poses = self._poses_from(self._values)
        outliers = tuple(e for e in self.loop_edges if self.loop_weight(e) < self.config.outlier_weight)
        if outliers:
            self.edges = [e for e in self.edges if e not in outliers]
            self._graph = None
        return OptimizeResult(
            dict(self.poses),
            iterations,
            (time.perf_counter() - start) * 1e3,
            float(error),
            outliers,
            timed_out,
        )

    def spread(self, target: Sim3, key: int, since: int | None, rigid: bool = False) -> None:
        """Initial guess before `optimize` after a loop: move node `key` to `target` and spread that
        correction over the nodes after `since` (all when None) in proportion to the path length (as
        ORB-SLAM's loop correction does), so the robust kernel starts near the solution and two
        Gauss-Newton steps converge. `rigid`: every node after `since` takes all of it (a relocalisation:
        the nodes since a restored map's end are one rigid piece)."""
        keys = [k for k in self.poses if since is None or k > since]
        fix = compose(target, inverse(self.poses[key]))
        steps = [0.0] + [
            float(np.linalg.norm(between(self.poses[a], self.poses[b]).translation)) + 1e-9
            for a, b in zip(keys, keys[1:], strict=False)
        ]
        travelled = np.ones(len(keys)) if rigid else np.cumsum(steps) / max(sum(steps), 1e-9)
        for k, alpha in zip(keys, travelled, strict=True):
            self.set_pose(k, compose(interpolate(Sim3.identity(), fix, float(alpha)), self.poses[k]))

    def _poses_from(self, values: gtsam.Values) -> dict[int, Sim3]:
        """Node poses out of gtsam's values (batched: per-key `from_gtsam` costs ~14 ms at 1,000 nodes)."""
        keys = list(self.poses)
        matrices = np.empty((len(keys), 4, 4))
        for i, key in enumerate(keys):
            matrices[i] = values.atSimilarity3(key).matrix()  # [[R, t_g], [0, 1/s]]
        scales = 1.0 / matrices[:, 3, 3]
        translations = matrices[:, :3, 3] * scales[:, None]
        return {
            key: Sim3(matrices[i, :3, :3], translations[i], float(scales[i])) for i, key in enumerate(keys)
        }

    def loop_weight(self, edge: Edge) -> float:
        """Cauchy weight of an edge at the current poses: 1 / (1 + (r / k)²), r its whitened residual."""
        measured = between(edge.measured, between(self.poses[edge.a], self.poses[edge.b]))
        residual = np.asarray(gtsam.Similarity3.Logmap(to_gtsam(measured))) / edge.sigma.vector()
        return float(1.0 / (1.0 + (np.linalg.norm(residual) / self.config.cauchy_k) ** 2))

    def error(self, values: gtsam.Values) -> float:
        """The graph's total (robust) error at `values` (e.g. another optimiser's estimate)."""
        if self._graph is None:
            self._build()
        return float(self._graph.error(values))

    def prior_factor(self) -> gtsam.NonlinearFactor:
        """The factor that holds the first node where it is."""
        return gtsam.PriorFactorSimilarity3(
            self.fixed, to_gtsam(self.poses[self.fixed]), gtsam.noiseModel.Isotropic.Sigma(7, 1e-6)
        )

    def edge_factor(self, edge: Edge) -> gtsam.NonlinearFactor:
        """gtsam's factor of an edge (Cauchy-robust on loop edges)."""
        noise = gtsam.noiseModel.Diagonal.Sigmas(edge.sigma.vector())
        if edge.loop:
            noise = gtsam.noiseModel.Robust.Create(self._cauchy, noise)
        return gtsam.BetweenFactorSimilarity3(edge.a, edge.b, to_gtsam(edge.measured), noise)

    def _build(self) -> None:
        """gtsam's factor graph and values from scratch (after edges left or nodes merged)."""
        self._graph, self._values = gtsam.NonlinearFactorGraph(), gtsam.Values()
        for key, pose in self.poses.items():
            self._values.insert(key, to_gtsam(pose))
        if self.fixed is not None and self.fixed in self.poses:
            self._graph.add(self.prior_factor())
        for edge in self.edges:
            self._graph.add(self.edge_factor(edge))

    def merge(self, anchor: int, keys: tuple[int, ...]) -> None:
        """Fold nodes `keys` into `anchor` (a submap): their edges are re-expressed on the anchor at the
        current poses (``a⁻¹b = m`` with b folded becomes ``a⁻¹·anchor = m ∘ b⁻¹·anchor``); edges inside the
        group vanish; the nodes leave."""
        folded = set(keys)
        into = {k: between(self.poses[k], self.poses[anchor]) for k in folded}  # k⁻¹ ∘ anchor
        edges = []
        for edge in self.edges:
            a, b, measured = edge.a, edge.b, edge.measured
            if b in folded:
                b, measured = anchor, compose(measured, into[b])
            if a in folded:
                a, measured = anchor, compose(inverse(into[a]), measured)
            if a != b:
                edges.append(Edge(a, b, measured, edge.sigma, edge.loop))
        self.edges = edges
        for key in folded:
            self.poses.pop(key, None)
        self._graph = None
