"""`LoopClosureConfig`: every `loop_closure.*` setting with its default and range (docs/loop_closure.md)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..settings import setting
from .pose_graph import GraphConfig
from .verify import VerifyConfig


@dataclass(frozen=True)
class LoopClosureConfig:
    """Keyframe selection, map, place recognition, edge uncertainties, verification and optimisation.

    Attributes:
        enabled: run the loop closer at all.
        keyframe_translation: a new loop keyframe once the camera moved this fraction of the last keyframe's
            median depth (stream units), or turned `keyframe_rotation_deg`.
        point_stride / conf_threshold: pixels kept as a keyframe's points (every n-th row and column, depth
            confidence above the threshold).
        depth_stride: decimation of the network-grid depth kept for verification.
        voxel_size: the derived voxel map's cell (map units).
        exclude_recent: newest keyframes left out of the search (the query's own neighbourhood in time).
        top_k / min_similarity: candidates verified per keyframe (best first), and their cosine floor.
        max_keyframes / merge_size: memory budget: past it the oldest `merge_size` merge into one submap.
        stream_sigma_floor / stream_sigma_rate: a stream edge's sigmas (rotation rad, translation and log
            scale) = floor + rate x the step's length (stream units); translation floor x median depth.
        loop_rotation_sigma / loop_translation_sigma / loop_scale_sigma: a verified loop edge's sigmas
            (translation as a fraction of the keyframe's median depth).
        queue_depth: keyframes waiting for the closer's thread (drop-oldest beyond).
        max_loop_chi2: a verified loop is refused when its innovation against the graph (gate.py: the
            measurement's disagreement with the current poses, whitened by the relative pose's marginal
            covariance plus its own) exceeds this chi-square value (7 degrees of freedom; 24.3: p = 0.001).
        odometry_tolerance_m / odometry_tolerance_fraction: with odometry given to `add`, a loop whose
            keyframes' distance (in metres through the map's stream/odometry length ratio) differs from the
            odometry's by more than tolerance_m + fraction x the odometry path between them is refused.
        consistent_loops: a verified loop is accepted only when this many consecutive keyframes verified
            loops that agree (put the stream within `consistency_translation` x the median depth and
            `consistency_rotation_deg`; gate.LoopStreaks): one keyframe aliasing a look-alike is refused.
            1: every verified loop goes to the gate (before issue 30).
        max_correction_m: a loop or forced optimisation whose correction would jump further than this (map
            units) is undone and counted, never applied.
    """

    enabled: bool = setting(
        True,
        "Loop closure (docs/loop_closure.md): keyframes, place recognition, verification and a Sim(3) pose "
        "graph on a thread of its own; a correction jumps map -> odom (robot modes) or map -> camera.",
    )
    keyframe_translation: float = setting(
        0.1,
        "A new loop keyframe once the camera moved this fraction of the last one's median depth.",
        bounds=(1e-3, 10.0),
    )
    keyframe_rotation_deg: float = setting(10.0, "... or turned this many degrees.", bounds=(0.1, 180.0))
    point_stride: int = 4
    conf_threshold: float = 1.5
    depth_stride: int = 2
    voxel_size: float = 0.05
    exclude_recent: int = setting(
        15,
        "Newest keyframes left out of the place search (the query's own neighbourhood in time).",
        bounds=(1, 10000),
    )
    top_k: int = setting(3, "Candidates verified per keyframe (best first).", bounds=(1, 50))
    min_similarity: float = setting(
        0.8, "Cosine floor of a place candidate's descriptor.", bounds=(-1.0, 1.0)
    )
    max_keyframes: int = setting(
        1000,
        "Memory budget: past it the oldest loop_closure.merge_size keyframes merge into one submap.",
        bounds=(3, 1000000),
    )
    merge_size: int = setting(10, "Keyframes merged into one submap.", bounds=(2, 1000))
    stream_sigma_floor: float = 0.002
    stream_sigma_rate: float = 0.05
    loop_rotation_sigma: float = 0.01
    loop_translation_sigma: float = 0.01
    loop_scale_sigma: float = 0.01
    queue_depth: int = 32
    max_loop_chi2: float = 24.3
    odometry_tolerance_m: float = 0.5
    odometry_tolerance_fraction: float = 0.1
    consistent_loops: int = 2
    consistency_translation: float = 0.2
    consistency_rotation_deg: float = 5.0
    max_correction_m: float = setting(
        50.0,
        "A loop correction that would jump the map further than this (map units, metres with a metric "
        "scale) is refused and counted in /diagnostics, never applied.",
        bounds=(1e-3, 1e6),
    )
    verify: VerifyConfig = field(default_factory=VerifyConfig)
    graph: GraphConfig = field(default_factory=GraphConfig)

    def __post_init__(self) -> None:
        positive = (
            "keyframe_translation",
            "keyframe_rotation_deg",
            "voxel_size",
            "stream_sigma_floor",
            "stream_sigma_rate",
            "loop_rotation_sigma",
            "loop_translation_sigma",
            "loop_scale_sigma",
            "max_loop_chi2",
            "odometry_tolerance_m",
            "odometry_tolerance_fraction",
            "max_correction_m",
            "consistency_translation",
            "consistency_rotation_deg",
        )
        for name in positive:
            if not getattr(self, name) > 0:
                raise ValueError(f"loop_closure.{name} must be > 0, got {getattr(self, name)}")
        for name in ("point_stride", "depth_stride", "top_k", "queue_depth", "consistent_loops"):
            if getattr(self, name) < 1:
                raise ValueError(f"loop_closure.{name} must be >= 1, got {getattr(self, name)}")
        if self.exclude_recent < 1 or self.merge_size < 2 or self.max_keyframes < self.exclude_recent + 2:
            raise ValueError(
                "loop_closure: need exclude_recent >= 1, merge_size >= 2 and "
                "max_keyframes >= exclude_recent + 2"
            )
        if not -1.0 <= self.min_similarity <= 1.0:
            raise ValueError(f"loop_closure.min_similarity must be in [-1, 1], got {self.min_similarity}")
