"""A Sim(3) pose graph over keyframes in gtsam: stream edges between consecutive keyframes, verified loop
edges under a robust (Cauchy) kernel, Levenberg-Marquardt with a time bound (docs/loop_closure.md).

Nodes are keyframe poses in the map (`Sim3`: camera -> map, scale = the stream's local unit there). An edge
measures ``a⁻¹ ∘ b``. gtsam's Sim(3) tangent is (rotation [3], translation [3], log scale [1]); translations
are in node a's local units. Sigmas come with each edge (the caller knows step lengths and depths).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import gtsam
import numpy as np

from ..geometry import Sim3
from .similarity import between, compose, from_gtsam, inverse, to_gtsam


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
    and the robust weight under which a loop edge counts as an outlier after a pass (removed)."""

    cauchy_k: float = 3.0
    max_iterations: int = 50
    max_time_ms: float = 200.0
    relative_tolerance: float = 1e-6
    outlier_weight: float = 0.1


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

    def add_node(self, key: int, pose: Sim3) -> None:
        """A keyframe's initial pose (the first node added is held fixed: it anchors the map)."""
        if self.fixed is None:
            self.fixed = key
        self.poses[key] = pose

    def add_edge(self, edge: Edge) -> None:
        if edge.a not in self.poses or edge.b not in self.poses:
            raise KeyError(f"edge {edge.a} -> {edge.b} names a node not in the graph")
        self.edges.append(edge)

    @property
    def loop_edges(self) -> list[Edge]:
        return [e for e in self.edges if e.loop]

    def optimize(self) -> OptimizeResult:
        """Levenberg-Marquardt from the current poses, at most `max_iterations` / `max_time_ms`; the poses are
        updated; loop edges whose robust weight ends below `outlier_weight` are removed and returned."""
        start = time.perf_counter()
        graph, values = self._build()
        params = gtsam.LevenbergMarquardtParams()
        params.setMaxIterations(self.config.max_iterations)
        params.setRelativeErrorTol(self.config.relative_tolerance)
        optimizer = gtsam.LevenbergMarquardtOptimizer(graph, values, params)
        error, iterations, timed_out = graph.error(values), 0, False
        while iterations < self.config.max_iterations:
            optimizer.iterate()
            iterations += 1
            new_error = optimizer.error()
            converged = error - new_error <= self.config.relative_tolerance * max(error, 1e-12)
            error = new_error
            if converged:
                break
            if (time.perf_counter() - start) * 1e3 > self.config.max_time_ms:
                timed_out = True
                break
        result = optimizer.values()
        self.poses = {key: from_gtsam(result.atSimilarity3(key)) for key in self.poses}
        outliers = tuple(e for e in self.loop_edges if self.loop_weight(e) < self.config.outlier_weight)
        if outliers:
            self.edges = [e for e in self.edges if e not in outliers]
        return OptimizeResult(
            dict(self.poses),
            iterations,
            (time.perf_counter() - start) * 1e3,
            float(error),
            outliers,
            timed_out,
        )

    def loop_weight(self, edge: Edge) -> float:
        """Cauchy weight of an edge at the current poses: 1 / (1 + (r / k)²), r its whitened residual."""
        measured = between(edge.measured, between(self.poses[edge.a], self.poses[edge.b]))
        residual = np.asarray(gtsam.Similarity3.Logmap(to_gtsam(measured))) / edge.sigma.vector()
        return float(1.0 / (1.0 + (np.linalg.norm(residual) / self.config.cauchy_k) ** 2))

    def _build(self) -> tuple[gtsam.NonlinearFactorGraph, gtsam.Values]:
        graph, values = gtsam.NonlinearFactorGraph(), gtsam.Values()
        for key, pose in self.poses.items():
            values.insert(key, to_gtsam(pose))
        if self.fixed is not None and self.fixed in self.poses:
            prior = gtsam.noiseModel.Isotropic.Sigma(7, 1e-6)
            graph.add(gtsam.PriorFactorSimilarity3(self.fixed, to_gtsam(self.poses[self.fixed]), prior))
        cauchy = gtsam.noiseModel.mEstimator.Cauchy.Create(self.config.cauchy_k)
        for edge in self.edges:
            noise = gtsam.noiseModel.Diagonal.Sigmas(edge.sigma.vector())
            if edge.loop:
                noise = gtsam.noiseModel.Robust.Create(cauchy, noise)
            graph.add(gtsam.BetweenFactorSimilarity3(edge.a, edge.b, to_gtsam(edge.measured), noise))
        return graph, values

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
