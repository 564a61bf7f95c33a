"""`StepNetwork`: what the steps built outside `LingBotMap` use of the network (a leaf of model/).

The CUDA-graph replay (graphed.py) and the batched step (batched_step.py) run the network's parts
themselves; `LingBotMap` (lingbot_map.py), which imports both, implements this protocol, so neither needs
to import it back.
"""

from __future__ import annotations

import contextlib
from typing import Protocol

import torch

from lingbot_map_ros.model.aggregator import Aggregator
from lingbot_map_ros.model.camera_head import CameraHead
from lingbot_map_ros.model.config import ModelConfig, PrecisionPolicy
from lingbot_map_ros.model.dpt_head import DPTHead


class StepNetwork(Protocol):
    """The network's parts, precision and input checks (implemented by `LingBotMap`)."""

    config: ModelConfig
    precision: PrecisionPolicy
    aggregator: Aggregator
    camera_head: CameraHead
    depth_head: DPTHead

    @property
    def device(self) -> torch.device: ...

    def autocast(self) -> contextlib.AbstractContextManager:
        """Autocast to the aggregator's dtype (a null context in fp32)."""

    def check_images(self, images: torch.Tensor, anchor_frames: int | None = None) -> None:
        """Raise ValueError unless `images` is `[S, 3, H, W]` float on the model's device, H and W patch
        multiples, S = `anchor_frames` (an anchor step) or 1 (a streaming step, `anchor_frames` None)."""
