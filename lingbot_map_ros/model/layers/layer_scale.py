"""Per-channel residual scaling (`gamma`), as in DINOv2 / VGGT."""

from __future__ import annotations

import torch
from torch import nn


class LayerScale(nn.Module):
    """`x * gamma`; x `[..., dim]`, gamma `[dim]` (state-dict name `gamma`)."""

    def __init__(self, dim: int, init_values: float) -> None:
        super().__init__()
        self.gamma = nn.Parameter(torch.full((dim,), float(init_values)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.gamma
