"""The engine's seams: what `StreamingSession` needs from a model (`StreamingModel`) and what it hands out
besides frame results (`SessionStats`, `AnchorState`, `NonFiniteOutputError`); docs/architecture.md."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import torch

from lingbot_map_ros.cache.shared_pool import SharedKVPool
from lingbot_map_ros.model import ModelConfig, StepOutput, StreamConfig, StreamState, StreamStats

from .geometry import Sim3


class NonFiniteOutputError(RuntimeError):
    """The model returned NaN or infinite poses or depth for a step; the frame is dropped."""


class StreamingModel(Protocol):
    """What the session needs from a model: `LingBotMap` (model/ contract), or a test double around one."""

    config: ModelConfig

    @property
    def device(self) -> torch.device:
        """Where the model's parameters are (the images go there unless ``SessionConfig.device`` says)."""

    def new_stream(self, config: StreamConfig | None = None, pool: SharedKVPool | None = None) -> StreamState:
        """Fresh caches for one stream (its KV cache in ``pool`` when given: several streams batched)."""

    def step(
        self, images: torch.Tensor, state: StreamState, keyframe: bool = True, depth: bool = True
    ) -> StepOutput:
        """Run ``images`` ``[S, 3, H, W]`` (float in [0, 1]) through the stream ``state`` (``depth`` False:
        without the depth head, its outputs None). Only what the engine passes: `LingBotMap.step` also takes
        ``keep_tokens`` (the parity tool's, on the model itself)."""


@dataclass
class SessionCounters:
    """A session's counters over all its epochs (the `SessionStats` fields of the same names)."""

    frames_total: int = 0
    reanchors_total: int = 0
    resets_total: int = 0
    last_reset_reason: str | None = None
    recoveries_total: int = 0
    last_error: str | None = None


@dataclass(frozen=True)
class SessionStats:
    """`StreamingSession.stats()`: counters, stream state and per-stage timings, for diagnostics and reports.

    ``phase`` 1 = anchor phase, 2 = streaming; ``input_hw`` / ``network_hw`` (H, W) of the original images and
    of the network input (None before the first frame); ``timings_ms`` per stage ``last``/``mean``/``max``/
    ``count`` (`timing.StageTimer.summary`); ``gpu_memory_gib`` (allocated, peak_allocated, reserved) on CUDA.
    """

    epoch: int
    frames: int
    frames_total: int
    keyframes: int
    phase: int
    pending_anchor_frames: int
    segment: int
    reanchors_total: int
    resets_total: int
    last_reset_reason: str | None
    recoveries_total: int
    last_error: str | None
    frames_stored: int
    max_stored_frames: int
    sliding_window: int
    keyframe_interval: int
    input_hw: tuple[int, int] | None
    network_hw: tuple[int, int] | None
    alignment_scale: float
    cache: StreamStats
    timings_ms: dict[str, dict[str, float]]
    gpu_memory_gib: dict[str, float] | None = None

    def as_dict(self) -> dict[str, object]:
        """Plain nested dict (JSON, /diagnostics); ``gpu_memory_gib`` only where there is one."""
        values = dataclasses.asdict(self)
        if values["gpu_memory_gib"] is None:
            del values["gpu_memory_gib"]
        return values


@dataclass(frozen=True)
class AnchorState:
    """The anchors of the current model stream: what a saved session replays to come back into its map frame.

    Attributes:
        images: [S0, h, w, 3] uint8 network inputs, oldest first (the anchor phase's frames, or after a
            re-anchor the keyframes it re-ran).
        metas: their ``push`` metas.
        source_hw: (H, W) of the original images.
        alignment: Sim(3) from the model stream's world frame into the session's map frame.
    """

    images: np.ndarray
    metas: tuple[object, ...]
    source_hw: tuple[int, int]
    alignment: Sim3
