"""Two-layer perceptron with exact GELU (`fc1` -> GELU -> `fc2`), as in DINOv2 / VGGT."""

from __future__ import annotations

import torch
from torch import nn


class Mlp(nn.Module):
    """`fc2(gelu(fc1(x)))`; x `[..., in_features]` -> `[..., out_features]`, dtype of the weights."""

    def __init__(self, in_features: int, hidden_features: int, out_features: int | None = None) -> None:
        super().__init__()
        self.fc1 = nn.Linear(in_features, hidden_features)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden_features, out_features or in_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.fc1(x)))
