"""Consistency gate of a verified loop (issue 30, docs/loop_closure.md "Acceptance"): before a loop edge may
move anything, its measurement is compared with what the graph already knows.

The innovation of a candidate edge ``a⁻¹ ∘ b = m`` is ``e = Log(m⁻¹ ∘ a⁻¹ ∘ b)`` (gtsam's Sim(3) tangent:
rotation [3], translation [3], log scale) at the current poses; its covariance is the relative pose's
marginal (from the graph's joint marginal of a and b, propagated with ``J = [-Ad(r⁻¹), I]``, r = a⁻¹b) plus
the edge's own. ``e' Σ⁻¹ e`` is chi-square with 7 degrees of freedom when the loop is true and the graph's
sigmas cover the drift; a look-alike place (a loop into a twin room) lies far outside (RTAB-Map's
``RGBD/OptimizeMaxError`` checks the same after its optimisation; here it is checked before, so nothing is
spread or optimised for a loop that contradicts the graph).
"""

from __future__ import annotations

import gtsam
import numpy as np

from .pose_graph import Edge, PoseGraph
from .similarity import to_gtsam


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
