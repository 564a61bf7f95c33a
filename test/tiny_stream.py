"""Shared pieces of the engine tests that stream through the tiny preset on CPU: the model and the frames."""

from __future__ import annotations

import numpy as np
import torch

from lingbot_map_ros.engine.config import SessionConfig
from lingbot_map_ros.engine.stream.session import StreamingSession
from lingbot_map_ros.model import LingBotMap, ModelConfig

#: 42×74 inputs at this width → a 28×56 network input (2×4 patches): a step takes milliseconds.
WIDTH = 56


def tiny_model() -> LingBotMap:
    """The tiny preset with seed-0 synthetic weights, one torch thread (deterministic)."""
    torch.manual_seed(0)
    torch.set_num_threads(1)
    return LingBotMap(ModelConfig.preset("tiny")).eval()


def pan_frames(n: int, hw: tuple[int, int] = (42, 74), seed: int = 0) -> list[np.ndarray]:
    """A smooth horizontal pan over a random texture: n RGB uint8 frames of ``hw``."""
    rng = np.random.default_rng(seed)
    texture = rng.integers(0, 256, size=(hw[0], hw[1] + 2 * n, 3), dtype=np.uint8)
    return [np.ascontiguousarray(texture[:, 2 * i : 2 * i + hw[1]]) for i in range(n)]


def tiny_session(model: LingBotMap, scale_frames: int = 3, **overrides: object) -> StreamingSession:
    """A session over `model` at `WIDTH`, window 4 of 8, 64 stored frames; `overrides` take precedence."""
    params: dict = dict(
        scale_frames=scale_frames, sliding_window=4, max_window=8, image_width=WIDTH, max_stored_frames=64
    )
    params.update(overrides)
    return StreamingSession(model, SessionConfig(**params))
