"""The one loop-closure correction rule (docs/loop_closure.md "The correction"): what a verified loop (or a
forced pass) changes in one camera's map, computed from the closer's keyframes at their optimised poses.

The stream keeps its own frame; the closer gives each keyframe a ``T_map_stream`` correction (Sim(3), model
units): ``C_k = pose_map(k) ∘ pose_stream(k)⁻¹``. A pose of the trajectory stamped t takes the correction of
the newest keyframe stamped <= t (`Corrections`: identity before any loop), so the move of one correction is,
per pose, ``G ∘ C_new(t) ∘ C_old(t)⁻¹ ∘ G⁻¹`` with G the epoch's frame chain (model world -> map,
`FrameChain.sim3`) and C_old what the previous correction applied. The mapper applies the newest keyframe's
correction (`LoopCloser.correction`) to every following stream pose; the map is rebuilt from the keyframes'
points at their optimised poses; the loop edges are drawn between keyframe positions in the map.
`engine/camera_state.py` applies it (`CameraState.apply_correction`): the node, `run`, `batch` and `evaluate`
all correct through it.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from .geometry import Sim3
from .loop import LoopCloser
from .mapping.frames import FrameChain

#: One keyframe's cloud in the map: points [N, 3] float32, colours [N, 3] uint8, camera centre [3] float64.
Cloud = tuple[np.ndarray, np.ndarray, np.ndarray]


class Corrections:
    """The correction each stamp got: keyframe stamps (s, ascending) and their T_map_stream (the newest
    holds for every later stamp, the oldest for earlier ones; identity before any loop)."""

    def __init__(self, stamps: np.ndarray | None = None, values: list[Sim3] | None = None) -> None:
        self.stamps = np.empty(0) if stamps is None else stamps
        self.values = values or []

    def indices(self, stamps_s: np.ndarray) -> np.ndarray:
        """[N] int: which correction each stamp got (-1: identity, before any loop)."""
        if not self.values:
            return np.full(len(stamps_s), -1)
        return np.maximum(np.searchsorted(self.stamps, stamps_s, side="right") - 1, 0)

    def value(self, index: int) -> Sim3:
        return self.values[index] if index >= 0 else Sim3.identity()


@dataclass(frozen=True)
class LoopCorrection:
    """One correction of a camera's map (module doc).

    Attributes:
        correction: T_map_stream (model world) applied to every following stream pose.
        corrections: the correction of each stamp after this one (the next one's "old").
        previous: the corrections applied before this one.
        chain: G, the epoch's frame chain model world -> map.
        clouds: the keyframes' clouds at their optimised poses, in the closer's frame (`map_clouds`: in the
            map).
        edges: the loop edges, (position a [3], position b [3]) of their keyframes in the map.
        size: the closer's last correction (translation in model units, rotation deg, scale).
        jump: T_new · T_old⁻¹ [4, 4] of the last body pose (None before a frame of the stream), once applied.
        map_rebuilt: the map and grid were rebuilt from `clouds` (mapping on and the scale converged).
    """

    correction: Sim3
    corrections: Corrections
    previous: Corrections
    chain: Sim3
    clouds: list[Cloud]
    edges: list[tuple[np.ndarray, np.ndarray]]
    size: tuple[float, float, float]
    jump: np.ndarray | None = None
    map_rebuilt: bool = False
    chain_inverse: Sim3 = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "chain_inverse", self.chain.inverse())

    def map_clouds(self) -> list[Cloud]:
        """`clouds` in the map (through the chain G)."""
        g = self.chain
        return [
            (g.apply_points(xyz.astype(np.float64)).astype(np.float32), rgb, g.apply_points(centre[None])[0])
            for xyz, rgb, centre in self.clouds
        ]

    def move(self, stamps_s: np.ndarray, poses: np.ndarray) -> np.ndarray:
        """Map poses [N, 4, 4] stamped `stamps_s` [N] s, moved by the correction of each stamp (module doc):
        one fix per (new, previous) correction pair of the stamps."""
        pairs = np.stack([self.corrections.indices(stamps_s), self.previous.indices(stamps_s)], axis=1)
        moved = np.array(poses, np.float64, copy=True)
        for i_new, i_old in np.unique(pairs, axis=0).tolist():
            step = self.corrections.value(i_new) @ self.previous.value(i_old).inverse()
            fix = self.chain @ step @ self.chain_inverse
            rows = (pairs[:, 0] == i_new) & (pairs[:, 1] == i_old)
            moved[rows] = fix.apply_pose(poses[rows])
        return moved


def plan_correction(closer: LoopCloser, chain: FrameChain, applied: Corrections) -> LoopCorrection | None:
    """The correction of the closer's keyframes now (call with the closer's lock held), moving a map whose
    poses got `applied`; None before a keyframe."""
    keyframes = sorted(closer.map.keyframes.values(), key=lambda kf: kf.stamp_s)
    if not keyframes:
        return None
    corrections = Corrections(
        np.array([kf.stamp_s for kf in keyframes]), [kf.pose @ kf.stream_pose.inverse() for kf in keyframes]
    )
    g = chain.sim3()
    clouds = [(kf.map_points(), kf.colors, np.asarray(kf.pose.translation, np.float64)) for kf in keyframes]
    positions = {kf.key: _at(g, kf.pose) for kf in keyframes}
    edges = [(positions[a], positions[b]) for a, b in closer.loops if a in positions and b in positions]
    stats = closer.stats
    size = (stats.last_correction_m, stats.last_correction_deg, stats.last_correction_scale)
    return LoopCorrection(closer.correction, corrections, applied, g, clouds, edges, size)


def _at(g: Sim3, pose: Sim3) -> np.ndarray:
    """[3] float64: the position of a keyframe pose (model world) in the map."""
    return g.apply_points(np.asarray(pose.translation, np.float64)[None])[0]


class CorrectionOutputs(Protocol):
    """Where a camera's corrections go besides its engine state (the node's publishers)."""

    def moving_trajectory(self) -> AbstractContextManager[object]:
        """Held while the trajectory moves (taken before the pose lock: the node's `~/path` send lock)."""

    def trajectory_moved(self) -> None:
        """The trajectory moved (pose lock held): `~/path` goes out again."""

    def settle_map(self) -> None:
        """Before the map is rebuilt: the map works queued so far are integrated."""

    def corrected(self, correction: LoopCorrection) -> None:
        """After a correction (the loop edges, `~/loop_closures`)."""


class NoOutputs:
    """`CorrectionOutputs` of a camera without publishers (tools/)."""

    def moving_trajectory(self) -> AbstractContextManager[object]:
        return nullcontext()

    def trajectory_moved(self) -> None:
        pass

    def settle_map(self) -> None:
        pass

    def corrected(self, correction: LoopCorrection) -> None:
        pass
