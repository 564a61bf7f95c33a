"""Consistency gate of a verified loop (issue 30, docs/loop_closure.md "Acceptance"): before a loop edge may
move anything, its measurement is compared with what the graph already knows.

The innovation of a candidate edge ``a⁻¹ ∘ b = m`` is ``e = Log(m⁻¹ ∘ a⁻¹ ∘ b)`` (gtsam's Sim(3) tangent:
rotation [3], translation [3], log scale) at the current poses; its covariance is the relative pose's
marginal (from the graph's joint marginal of a and b, propagated with ``J = [-Ad(r⁻¹), I]``, r = a⁻¹b) plus
the edge's own. ``e' Σ⁻¹ e`` is chi-square with 7 degrees of freedom when the loop is true and the graph's
sigmas cover the drift; a look-alike place (a loop into a twin room) lies far outside (RTAB-Map's
``RGBD/OptimizeMaxError`` checks the same after its optimisation; here it is checked before, so nothing is
spread or optimised for a loop that contradicts the graph).

With the robot's odometry (robot modes, `LoopCloser.add(..., odometry=...)`), a loop must also agree with
it: the distance of its two keyframes the loop measures, in metres through the ratio of the stream's keyframe
steps to the odometry's (`OdometryScale`), must be the odometry's within a tolerance that grows with the
odometry path between them (odometry drifts too). A look-alike room metres away fails it however the graph
is drifted.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from ..geometry import Sim3, rotation_angle
from .gtsam_import import gtsam
from .keyframes import Keyframe
from .pose_graph import Edge, PoseGraph
from .similarity import between, compose, to_gtsam


def innovation_chi2(graph: PoseGraph, edge: Edge) -> float:
    """Squared Mahalanobis distance (module doc) of `edge` (not yet in `graph`) at the graph's current poses.
    Raises what gtsam raises on a degenerate graph (the caller counts it and refuses the loop)."""
    marginals = gtsam.Marginals(graph.factor_graph(), graph.values())
    joint = marginals.jointMarginalCovariance(gtsam.KeyVector([edge.a, edge.b]))
    cov_ab = np.block(
        [
            [joint.at(edge.a, edge.a), joint.at(edge.a, edge.b)],
            [joint.at(edge.b, edge.a), joint.at(edge.b, edge.b)],
        ]
    )
    a, b = to_gtsam(graph.poses[edge.a]), to_gtsam(graph.poses[edge.b])
    relative = a.between(b)
    jacobian = np.hstack([-relative.inverse().AdjointMap(), np.eye(7)])
    cov = jacobian @ cov_ab @ jacobian.T + np.diag(edge.sigma.vector() ** 2)
    error = np.asarray(gtsam.Similarity3.Logmap(to_gtsam(edge.measured).between(relative)), np.float64)
    chi2 = float(error @ np.linalg.solve(cov, error))
    return chi2 if np.isfinite(chi2) else float("inf")


class OdometryTolerance(Protocol):
    odometry_tolerance_m: float
    odometry_tolerance_fraction: float


@dataclass
class OdometryScale:
    """Stream units per odometry metre from consecutive keyframes that both carry odometry (sums of step
    lengths), and each keyframe's odometry path length so far (metres)."""

    stream_length: float = 0.0
    odometry_length: float = 0.0
    travelled: dict[int, float] = field(default_factory=dict)

    def observe(self, previous_step: Keyframe | None, keyframe: Keyframe) -> None:
        step_m = 0.0
        if previous_step is not None and previous_step.odometry is not None:
            step_m = float(np.linalg.norm(keyframe.odometry[:3, 3] - previous_step.odometry[:3, 3]))
            stream = between(previous_step.stream_pose, keyframe.stream_pose).translation
            self.stream_length += float(np.linalg.norm(stream))
            self.odometry_length += step_m
        base = self.travelled.get(previous_step.key, 0.0) if previous_step is not None else 0.0
        self.travelled[keyframe.key] = base + step_m
        if len(self.travelled) > 100_000:  # bounded: the oldest keys leave (their loops are long closed)
            for key in list(self.travelled)[:50_000]:
                del self.travelled[key]

    @property
    def units_per_m(self) -> float | None:
        return self.stream_length / self.odometry_length if self.odometry_length > 1e-6 else None


def odometry_disagreement(
    old: Keyframe, new: Keyframe, relative: Sim3, scale: OdometryScale, tolerance: OdometryTolerance
) -> str | None:
    """Why a loop `old -> new` measuring `relative` (``old⁻¹ ∘ new``, old's local units) contradicts the
    robot's odometry (module doc), or None (agrees, or either keyframe has no odometry yet)."""
    units_per_m = scale.units_per_m
    if old.odometry is None or new.odometry is None or units_per_m is None:
        return None
    odometry_m = float(np.linalg.norm(new.odometry[:3, 3] - old.odometry[:3, 3]))
    loop_m = float(np.linalg.norm(relative.translation)) / units_per_m  # old's stream units -> metres
    path_m = abs(scale.travelled.get(new.key, 0.0) - scale.travelled.get(old.key, 0.0))
    bound = tolerance.odometry_tolerance_m + tolerance.odometry_tolerance_fraction * path_m
    if abs(loop_m - odometry_m) <= bound:
        return None
    return (
        f"the loop puts its keyframes {loop_m:.2f} m apart, the odometry {odometry_m:.2f} m "
        f"(bound {bound:.2f} m)"
    )


@dataclass
class LoopStreaks:
    """Temporal consistency of loops (ORB-SLAM's consistent groups, RTAB-Map's loop hypotheses over several
    frames): a verified loop is a hypothesis ``C = pose_map(old) ∘ relative ∘ stream(new)⁻¹`` (T_map_stream,
    where it puts the stream). Its streak is 1 + the longest streak of a hypothesis of the previous keyframe
    that agrees with it (both put the new keyframe within `translation` x its median depth (in the map) and
    `rotation_deg` of each other), else 1; a keyframe without a verified loop ends every streak. The closer
    accepts a loop only from a streak of `consistent_loops` (`LoopClosureConfig`): one keyframe that aliases
    a look-alike place is refused, a real revisit (seen from consecutive keyframes) closes."""

    translation: float = 0.2
    rotation_deg: float = 5.0
    _previous: list[tuple[Sim3, int]] = field(default_factory=list)
    _current: list[tuple[Sim3, int]] = field(default_factory=list)

    def next_keyframe(self) -> None:
        """A new keyframe: the last one's hypotheses become the previous ones (none: the streaks end)."""
        self._previous, self._current = self._current, []

    def clear(self) -> None:
        self._previous, self._current = [], []

    def observe(self, correction: Sim3, keyframe: Keyframe) -> int:
        """The streak of this keyframe's verified loop implying `correction` (T_map_stream), recorded."""
        here = compose(correction, keyframe.stream_pose)
        longest = 0
        for previous, streak in self._previous:
            there = compose(previous, keyframe.stream_pose)
            apart = float(np.linalg.norm(here.translation - there.translation))
            turned = float(np.degrees(rotation_angle(here.rotation.T @ there.rotation)))
            if apart <= self.translation * here.scale * keyframe.median_depth and turned <= self.rotation_deg:
                longest = max(longest, streak)
        self._current.append((correction, longest + 1))
        return longest + 1
