"""The uncertainty of the loop closer's pose-graph edges (engine/loop/pose_graph.py `EdgeSigma`): a stream
edge between consecutive keyframes (the stream's drift, a random walk) and a verified loop edge.
"""

from __future__ import annotations

import numpy as np

from ..geometry import Sim3, rotation_angle
from .config import LoopClosureConfig
from .keyframes import Keyframe
from .pose_graph import EdgeSigma


def stream_sigma(step: Sim3, previous: Keyframe, config: LoopClosureConfig) -> EdgeSigma:
    """The stream edge `previous -> next` (`step`, stream units): floor + rate x length per keyframe step; a
    step longer than the keyframe spacing counts as that many steps (drift is a random walk: its variance
    grows with the distance, not its square), so one long jump of the stream cannot absorb a loop's error
    that a walked path would not."""
    length = float(np.linalg.norm(step.translation)) + previous.median_depth * float(
        rotation_angle(step.rotation)
    )
    steps = max(1.0, length / (config.keyframe_translation * previous.median_depth))
    each = length / steps
    root = float(np.sqrt(steps))
    return EdgeSigma(
        root * (config.stream_sigma_floor + config.stream_sigma_rate * each),
        root * (config.stream_sigma_floor * previous.median_depth + config.stream_sigma_rate * each),
        root * (config.stream_sigma_floor + config.stream_sigma_rate * each),
    )


def loop_sigma(old: Keyframe, config: LoopClosureConfig) -> EdgeSigma:
    """A verified loop edge from keyframe `old` (its translation sigma scaled by `old`'s median depth)."""
    return EdgeSigma(
        config.loop_rotation_sigma,
        config.loop_translation_sigma * old.median_depth,
        config.loop_scale_sigma,
    )
