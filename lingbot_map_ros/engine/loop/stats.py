"""`LoopStats`: the loop closer's counters for /diagnostics (docs/loop_closure.md "Acceptance")."""

from __future__ import annotations

from dataclasses import dataclass


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
