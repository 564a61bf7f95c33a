"""Relocalisation without a pose hint (docs/loop_closure.md "Lost and found").

While a camera is lost (engine/health.py), every `every_n_frames`-th frame is searched against the **whole**
keyframe map of the loop closer (its `DescriptorIndex`, no recent-keyframe exclusion, `top_k` candidates) and
each candidate goes through the closer's own verification (`closer.verify`: the same two-frame pass and
thresholds as a loop). A verified candidate ``old`` places the frame in the map at ``old.pose ∘ relative``,
i.e. the stream's correction ``T_map_stream = old.pose ∘ relative ∘ stream_pose⁻¹``.

Aliasing (two identical rooms): a frame whose verified candidates disagree about where it is (beyond
`translation_tolerance` x the keyframe's median depth, or `rotation_tolerance_deg`) is ambiguous and resets
the count; a relocalisation needs `agree` consecutive searched frames with verified, mutually consistent
corrections. It then sets the closer's correction (the jump of ``map -> odom`` / ``map -> camera``) and ties
the new segment into the pose graph: the last frame becomes a keyframe with a loop edge to its match and no
stream edge from the keyframes before the loss.

A hint (`/initialpose`) keeps only candidates within `radius` of the hinted camera position; when
`place_after` searched frames verify nothing, the hint itself becomes the correction (`placed`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..geometry import Sim3, rotation_angle
from ..health import HealthReport, TrackingHealth, Verdict
from ..result import FrameResult
from .closer import LoopCloser, LoopEvent
from .keyframes import Keyframe
from .similarity import compose, from_pose, inverse
from .verify import Verification


@dataclass(frozen=True)
class RelocaliseConfig:
    """Rate, search breadth and agreement of relocalisation (module doc)."""

    every_n_frames: int = 1
    top_k: int = 6
    min_similarity: float | None = None  # None: the loop closer's
    agree: int = 2
    translation_tolerance: float = 0.2
    rotation_tolerance_deg: float = 5.0

    def __post_init__(self) -> None:
        if self.every_n_frames < 1 or self.top_k < 1 or self.agree < 1:
            raise ValueError("relocalise: every_n_frames, top_k and agree must be >= 1")


@dataclass(frozen=True)
class Match:
    """One verified candidate: the map keyframe, its verdict and the stream correction it implies."""

    old: Keyframe
    verification: Verification
    correction: Sim3


@dataclass(frozen=True)
class Relocalisation:
    """A committed relocalisation: the new correction (T_map_stream), the jump from the old one
    (``new ∘ old⁻¹``), the keyframe it added (None when `placed` by a hint) and its match."""

    correction: Sim3
    jump: Sim3
    keyframe: int | None
    match: int | None
    placed: bool = False


@dataclass
class Hint:
    """A pose hint: the camera's pose in the map, the search radius (map units), and after how many
    searched frames without a verified match the hint is taken as it is."""

    camera: Sim3
    radius: float
    place_after: int


@dataclass
class RelocaliseStats:
    searches: int = 0
    verified: int = 0
    ambiguous: int = 0
    relocalised: int = 0
    placed: int = 0


class Relocaliser:
    """Searches the closer's keyframe map while lost (module doc). Runs where the closer runs (its lock)."""

    def __init__(self, closer: LoopCloser, config: RelocaliseConfig | None = None) -> None:
        self.closer = closer
        self.config = config or RelocaliseConfig()
        self.stats = RelocaliseStats()
        self._hint: Hint | None = None
        self.reset()

    def reset(self) -> None:
        """Forget a partial agreement (the camera is no longer lost, or a new loss starts)."""
        self._pending: list[Match] = []
        self._seen = 0
        self._searched = 0

    def hint(self, camera: Sim3, radius: float, place_after: int) -> None:
        """Narrow the search to `radius` around `camera` (map); place there after `place_after` misses."""
        self._hint = Hint(camera, radius, place_after)
        self._searched = 0

    def search(self, result: FrameResult, stamp_s: float, extend: bool = True) -> Relocalisation | None:
        """One lost frame (stream pose, depth, confidence, image): a relocalisation when this frame completes
        `agree` consistent verified frames (or a hint's patience ran out), else None. `extend` false
        (localization mode): only the correction changes, the map and graph stay as loaded."""
        self._seen += 1
        if (self._seen - 1) % self.config.every_n_frames or result.depth is None or result.depth_conf is None:
            return None
        closer = self.closer
        if not len(closer.map):
            return None
        query = closer.keyframe_of(result, stamp_s)
        self.stats.searches += 1
        self._searched += 1
        matches = self._matches(query)
        if matches and not all(self._consistent(matches[0], m, query) for m in matches[1:]):
            self.stats.ambiguous += 1
            matches = []
        if not matches:
            self._pending = []
            hint = self._hint
            if hint is not None and self._searched >= hint.place_after:
                return self._place(hint, query)
            return None
        best = matches[0]
        if self._pending and not self._consistent(self._pending[-1], best, query):
            self._pending = []
        self._pending.append(best)
        if len(self._pending) < self.config.agree:
            return None
        return self._commit(best, query, extend)

    # ------------------------------------------------------------------------------------------------
    def _matches(self, query: Keyframe) -> list[Match]:
        closer, cfg = self.closer, self.config
        floor = closer.config.min_similarity if cfg.min_similarity is None else cfg.min_similarity
        candidates = closer.index.query(query.descriptor, 0, cfg.top_k, floor)
        matches = []
        for candidate in candidates:
            old = closer.map.keyframes.get(candidate.key)
            if old is None or not self._near_hint(old):
                continue
            verdict = closer.verify(old, query)
            if not verdict.accepted:
                continue
            self.stats.verified += 1
            placed = compose(old.pose, verdict.relative)
            matches.append(Match(old, verdict, compose(placed, inverse(query.stream_pose))))
        return matches

    def _near_hint(self, keyframe: Keyframe) -> bool:
        hint = self._hint
        if hint is None:
            return True
        return float(np.linalg.norm(keyframe.pose.translation - hint.camera.translation)) <= hint.radius

    def _consistent(self, a: Match, b: Match, query: Keyframe) -> bool:
        """Whether two matches put the query at the same place (module doc's tolerances)."""
        pa, pb = compose(a.correction, query.stream_pose), compose(b.correction, query.stream_pose)
        reach = self.config.translation_tolerance * min(
            a.old.median_depth * a.old.pose.scale, b.old.median_depth * b.old.pose.scale
        )
        turn = np.degrees(rotation_angle(pa.rotation.T @ pb.rotation))
        return (
            float(np.linalg.norm(pa.translation - pb.translation)) <= reach
            and turn <= self.config.rotation_tolerance_deg
        )

    def _commit(self, match: Match, query: Keyframe, extend: bool) -> Relocalisation:
        closer = self.closer
        jump = compose(match.correction, inverse(closer.correction))
        closer.correction = match.correction
        self.stats.relocalised += 1
        self._hint = None
        self.reset()
        if not extend:
            return Relocalisation(match.correction, jump, None, match.old.key)
        query.pose = compose(match.correction, query.stream_pose)
        closer.join_relocalised(query, match.old, match.verification.relative)
        return Relocalisation(match.correction, jump, query.key, match.old.key)

    def _place(self, hint: Hint, query: Keyframe) -> Relocalisation:
        closer = self.closer
        before = closer.correction
        closer.correction = compose(hint.camera, inverse(query.stream_pose))
        closer.start_segment()
        self.stats.placed += 1
        self._hint = None
        self.reset()
        return Relocalisation(
            closer.correction, compose(closer.correction, inverse(before)), None, None, True
        )


class LostAndFound:
    """One camera's tracking health and relocalisation together: `frame` per result gives the health
    report; while lost it searches (`Relocaliser`); only frames whose report `maps` reach the closer, and
    none in localization mode (``health.mapping`` false: a loaded map is never extended).

    `frame` is `health.assess` (the pose path: the health verdict, cheap) then `follow` (where the closer
    runs: the search and the keyframe); `CameraState` calls them on their two threads (the node) or in a row
    (tools/)."""

    def __init__(self, health: TrackingHealth, relocaliser: Relocaliser) -> None:
        self.health, self.relocaliser = health, relocaliser
        self.event: LoopEvent | None = None
        self.last: Relocalisation | None = None
        self.report: HealthReport = health.report()  # the last frame's, after its search

    def frame(
        self,
        result: FrameResult,
        stamp_s: float,
        odometry_step_m: float | None = None,
        stream_step_m: float | None = None,
    ) -> HealthReport:
        """Health of `result`; a relocalisation (kept in `last`) when this lost frame completed one; the
        keyframe goes to the closer only when the frame maps."""
        verdict = self.health.assess(result, odometry_step_m, stream_step_m)
        self.follow(result, stamp_s, verdict)
        return self.report

    def follow(
        self,
        result: FrameResult,
        stamp_s: float,
        verdict: Verdict,
        keyframe: bool = True,
        odometry: np.ndarray | None = None,
    ) -> Relocalisation | None:
        """The closer's part of `frame` (its thread, under its lock): the search of a lost frame while its
        loss is still on (a relocalisation ends it: `health.relocalised()`, kept in `last`), a new segment,
        and the frame to the closer when it maps (`keyframe`: a keyframe result, the only ones the node gives
        it; with the robot's `odometry` pose [4, 4], `LoopCloser.add`); the loop event it caused is kept in
        `event`."""
        closer = self.relocaliser.closer
        self.last, self.event = None, None
        if verdict.lost_started:
            self.relocaliser.reset()
        self.report = verdict.report
        with self.health.lock:  # behind the pose path: a loss that ended meanwhile is not searched for
            search = verdict.search and self.health.current(verdict)
        if search:
            self.last = self.relocaliser.search(result, stamp_s, extend=self.health.mapping)
            if self.last is not None:
                with self.health.lock:
                    if self.health.current(verdict):
                        self.report = self.health.relocalised()
        if verdict.new_segment:  # unconnected to the keyframes before the loss
            closer.start_segment()
        if self.report.maps and keyframe and self.health.mapping:
            self.event = closer.add(result, stamp_s, odometry)
        return self.last

    def place_hint(self, camera_in_map: np.ndarray, radius: float, place_after: int) -> None:
        """`/initialpose`: the camera pose [4, 4] in the map narrows the search (see `Relocaliser.hint`)."""
        self.relocaliser.hint(from_pose(camera_in_map), radius, place_after)
