"""DINOv2 ViT with register tokens (`dinov2_vitl14_reg` in the released model): the per-frame backbone.

Layout (state-dict names under `aggregator.patch_embed.`): `patch_embed.proj` (Conv2d 3 -> C, kernel =
stride = patch), `cls_token` [1,1,C], `register_tokens` [1,R,C], `pos_embed` [1, 1 + G*G, C] learned on a
G x G grid (G = 518/14 = 37), `mask_token` [1,C] (training only, kept for the checkpoint), `blocks.N`
pre-norm blocks (LayerNorm eps 1e-6, no q/k norm, no RoPE), final `norm`.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from lingbot_map_ros.model.layers import Block

RunBlock = Callable[[Block, torch.Tensor], torch.Tensor]
"""Runs one backbone block on tokens `[N, T, C]`."""


class PatchEmbed(nn.Module):
    """Non-overlapping patch projection: images `[N, 3, H, W]` -> tokens `[N, (H/p)(W/p), C]` (row-major)."""

    def __init__(self, patch_size: int, embed_dim: int) -> None:
        super().__init__()
        self.proj = nn.Conv2d(3, embed_dim, kernel_size=patch_size, stride=patch_size)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.proj(images).flatten(2).transpose(1, 2)


class DinoVisionTransformer(nn.Module):
    """DINOv2 backbone; `forward` returns the normalised patch tokens (`x_norm_patchtokens`).

    Args:
        img_size: training image size (518); fixes the learned position grid (img_size / patch_size)^2.
        patch_size: 14.
        embed_dim, depth, num_heads, mlp_ratio: ViT-L/14 = 1024, 24, 16, 4.
        num_register_tokens: 4.
    """

    def __init__(
        self,
        img_size: int,
        patch_size: int,
        embed_dim: int,
        depth: int,
        num_heads: int,
        mlp_ratio: float = 4.0,
        num_register_tokens: int = 4,
    ) -> None:
        super().__init__()
        self.patch_size = patch_size
        grid = img_size // patch_size
        self.patch_embed = PatchEmbed(patch_size, embed_dim)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, embed_dim))
        self.pos_embed = nn.Parameter(torch.zeros(1, 1 + grid * grid, embed_dim))
        self.register_tokens = nn.Parameter(torch.zeros(1, num_register_tokens, embed_dim))
        self.mask_token = nn.Parameter(torch.zeros(1, embed_dim))
        self.blocks = nn.ModuleList(
            Block(embed_dim, num_heads, mlp_ratio, qk_norm=False, norm_eps=1e-6, init_values=1.0)
            for _ in range(depth)
        )
        self.norm = nn.LayerNorm(embed_dim, eps=1e-6)
        self.num_register_tokens = num_register_tokens

    def interpolate_pos_encoding(self, grid_h: int, grid_w: int) -> torch.Tensor:
        """Position embedding for a grid_h x grid_w patch grid, `[1, 1 + grid_h*grid_w, C]`.

        The learned G x G grid is resampled bicubic with antialiasing (in float32) unless the grid is G x G.
        """
        pos_embed = self.pos_embed
        learned = pos_embed.shape[1] - 1
        side = math.isqrt(learned)
        if grid_h * grid_w == learned and grid_h == grid_w:
            return pos_embed
        dim = pos_embed.shape[-1]
        patch_pos = pos_embed[:, 1:].float().reshape(1, side, side, dim).permute(0, 3, 1, 2)
        patch_pos = F.interpolate(patch_pos, size=(grid_h, grid_w), mode="bicubic", antialias=True)
        patch_pos = patch_pos.permute(0, 2, 3, 1).reshape(1, grid_h * grid_w, dim)
        return torch.cat((pos_embed[:, :1].float(), patch_pos), dim=1).to(pos_embed.dtype)

    def forward(self, images: torch.Tensor, run_block: RunBlock | None = None) -> torch.Tensor:
        """images `[N, 3, H, W]` (ImageNet-normalised) -> patch tokens `[N, (H/p)(W/p), C]`.

        `run_block(block, x)` replaces `block(x)` (the CUDA-graph path passes a compiled region)."""
        batch, _, height, width = images.shape
        grid_h, grid_w = height // self.patch_size, width // self.patch_size
        x = self.patch_embed(images)
        x = torch.cat((self.cls_token.expand(batch, -1, -1).to(x.dtype), x), dim=1)
        x = x + self.interpolate_pos_encoding(grid_h, grid_w).to(x.dtype)
        registers = self.register_tokens.expand(batch, -1, -1).to(x.dtype)
        x = torch.cat((x[:, :1], registers, x[:, 1:]), dim=1)
        for block in self.blocks:
            x = block(x) if run_block is None else run_block(block, x)
        return self.norm(x)[:, 1 + self.num_register_tokens :]
