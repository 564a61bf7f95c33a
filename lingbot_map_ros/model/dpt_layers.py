"""Blocks of the DPT depth head: residual conv units, feature fusion, UV sin-cos position embedding."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class ResidualConvUnit(nn.Module):
    """`conv2(relu(conv1(relu(x)))) + relu(x)` on `[N, F, h, w]`.

    The skip adds relu(x), not x: the reference applies an in-place ReLU to its input before the convolutions,
    so the tensor it adds back has already been rectified. Parity depends on reproducing this.
    """

    def __init__(self, features: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(features, features, kernel_size=3, padding=1)
        self.conv2 = nn.Conv2d(features, features, kernel_size=3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(x)
        return self.conv2(F.relu(self.conv1(x))) + x


class FeatureFusionBlock(nn.Module):
    """DPT fusion: `x + resConfUnit1(skip)` -> resConfUnit2 -> bilinear resize (align_corners) -> `out_conv`.

    `has_residual=False` (refinenet4) has no `resConfUnit1` and takes no skip input. Without `size` the
    output is upsampled by 2.
    """

    def __init__(self, features: int, has_residual: bool = True) -> None:
        super().__init__()
        self.out_conv = nn.Conv2d(features, features, kernel_size=1)
        self.resConfUnit1 = ResidualConvUnit(features) if has_residual else None
        self.resConfUnit2 = ResidualConvUnit(features)

    def forward(
        self, x: torch.Tensor, skip: torch.Tensor | None = None, size: tuple[int, int] | None = None
    ) -> torch.Tensor:
        if self.resConfUnit1 is not None:
            if skip is None:
                raise ValueError("this fusion block needs a skip input")
            x = x + self.resConfUnit1(skip)
        x = self.resConfUnit2(x)
        if size is None:
            x = F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=True)
        else:
            x = F.interpolate(x, size=size, mode="bilinear", align_corners=True)
        return self.out_conv(x)


def uv_grid(width: int, height: int, aspect_ratio: float) -> torch.Tensor:
    """View-plane UV grid `[height, width, 2]` float64; pixel centres span +-(w, h)/diagonal (MoGe/VGGT)."""
    diagonal = (aspect_ratio**2 + 1.0) ** 0.5
    half_x = aspect_ratio / diagonal * (width - 1) / width
    half_y = 1.0 / diagonal * (height - 1) / height
    xs = torch.linspace(-half_x, half_x, width, dtype=torch.float64)
    ys = torch.linspace(-half_y, half_y, height, dtype=torch.float64)
    uu, vv = torch.meshgrid(xs, ys, indexing="xy")
    return torch.stack((uu, vv), dim=-1)


def sincos_embed(positions: torch.Tensor, dim: int, omega_0: float = 100.0) -> torch.Tensor:
    """positions `[M]` float64 -> `[M, dim]` = [sin(p w_j), cos(p w_j)], w_j = omega_0^(-2j/dim)."""
    omega = torch.arange(dim // 2, dtype=torch.float64) / (dim / 2.0)
    angles = positions.reshape(-1, 1) * (1.0 / omega_0**omega)[None, :]
    return torch.cat((angles.sin(), angles.cos()), dim=1)


def uv_position_embedding(
    channels: int, height: int, width: int, aspect_ratio: float, ratio: float = 0.1
) -> torch.Tensor:
    """`ratio` * sin-cos embedding of the UV grid, `[channels, height, width]` float32 (u half, v half)."""
    grid = uv_grid(width, height, aspect_ratio).reshape(-1, 2)
    half = channels // 2
    embed = torch.cat((sincos_embed(grid[:, 0], half), sincos_embed(grid[:, 1], half)), dim=-1)
    return (embed.float() * ratio).reshape(height, width, channels).permute(2, 0, 1)
