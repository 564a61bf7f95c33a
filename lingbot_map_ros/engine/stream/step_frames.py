"""Streaming frames between their admission by a `StreamingSession` and their decoding.

`StreamingFrame`: taken in by `StreamingSession.batched.begin_frame`, its model step still to run (by a
caller that batches several sessions' steps, engine/stream/multi_stream.py). `InFlightFrame`: its step
launched, its outputs still on the way to the host (the one-deep pipeline of
`StreamingSession.push_overlapped`, and a `finish_frame`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from lingbot_map_ros.model import StreamState

from .model_steps import LaunchedStep


@dataclass(frozen=True)
class StreamingFrame:
    """A plain streaming frame taken in by `StreamingSession.batched.begin_frame`, waiting for its model step.

    A caller that batches the steps of several sessions (engine/stream/multi_stream.py) runs ``images``
    ([1, 3, h, w] on the model device) through the model with ``state`` (the session's ``StreamState``) and
    ``keyframe``, then hands the output to `StreamingSession.batched.finish_frame`.
    """

    rgb: np.ndarray
    meta: object
    image_net: np.ndarray
    keyframe: bool
    images: torch.Tensor
    state: StreamState


@dataclass(frozen=True)
class InFlightFrame:
    """A streaming frame whose model step is launched: ``rgb`` [H, W, 3] uint8 (original), ``meta``,
    ``image_net`` [h, w, 3] uint8 (network input), ``keyframe``, and its ``launched`` step."""

    rgb: np.ndarray
    meta: object
    image_net: np.ndarray
    keyframe: bool
    launched: LaunchedStep
