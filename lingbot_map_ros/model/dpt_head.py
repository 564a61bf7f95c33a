"""DPT depth head (`depth_head.`, VGGT's DPTHead with 2 output channels): depth = exp(c0), conf = 1 + exp(c1).

Consumes the patch tokens of the 4 aggregator outputs `[S, P, 2C]`. Per level: shared `norm` -> token map
`[2C, h, w]` -> `projects.k` (1x1) -> + UV position embedding -> `resize_layers.k` (x4, x2, x1, /2) ->
`scratch.layer{k}_rn` (3x3 to `features`). Fusion `refinenet4..1` up to 8x the patch grid, `output_conv1`,
bilinear resize to (H, W), + UV embedding, `output_conv2`. Frames run in chunks (8) to bound activations.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from lingbot_map_ros.model.dpt_layers import FeatureFusionBlock, uv_position_embedding


class DPTHead(nn.Module):
    """Args: dim_in (2C), patch_size, features (256), out_channels per level, head_features (32)."""

    def __init__(
        self,
        dim_in: int,
        patch_size: int,
        features: int,
        out_channels: tuple[int, int, int, int],
        head_features: int = 32,
        frames_chunk: int = 8,
    ) -> None:
        super().__init__()
        self.patch_size = patch_size
        self.frames_chunk = frames_chunk
        self._position_cache: dict[tuple, torch.Tensor] = {}
        self.norm = nn.LayerNorm(dim_in)
        self.projects = nn.ModuleList(nn.Conv2d(dim_in, oc, kernel_size=1) for oc in out_channels)
        self.resize_layers = nn.ModuleList(
            [
                nn.ConvTranspose2d(out_channels[0], out_channels[0], kernel_size=4, stride=4),
                nn.ConvTranspose2d(out_channels[1], out_channels[1], kernel_size=2, stride=2),
                nn.Identity(),
                nn.Conv2d(out_channels[3], out_channels[3], kernel_size=3, stride=2, padding=1),
            ]
        )
        self.scratch = nn.Module()
        for level, channels in enumerate(out_channels, start=1):
            setattr(self.scratch, f"layer{level}_rn", nn.Conv2d(channels, features, 3, padding=1, bias=False))
        self.scratch.refinenet1 = FeatureFusionBlock(features)
        self.scratch.refinenet2 = FeatureFusionBlock(features)
        self.scratch.refinenet3 = FeatureFusionBlock(features)
        self.scratch.refinenet4 = FeatureFusionBlock(features, has_residual=False)
        self.scratch.output_conv1 = nn.Conv2d(features, features // 2, kernel_size=3, padding=1)
        self.scratch.output_conv2 = nn.Sequential(
            nn.Conv2d(features // 2, head_features, kernel_size=3, padding=1),
            nn.ReLU(),
            nn.Conv2d(head_features, 2, kernel_size=1),
        )

    def forward(
        self,
        layers: list[torch.Tensor],
        image_hw: tuple[int, int],
        patch_start: int,
        frames_chunk: int | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """layers: 4 x `[S, P, 2C]` -> (depth `[S, H, W]`, conf `[S, H, W]`) in the head's dtype.
        `frames_chunk`: frames per pass (default `self.frames_chunk`; a batched step's graph passes B)."""
        frames = layers[0].shape[0]
        step = frames_chunk or self.frames_chunk
        depth, conf = [], []
        for start in range(0, frames, step):
            chunk = [layer[start : start + step, patch_start:] for layer in layers]
            d, c = self._forward_chunk(chunk, image_hw)
            depth.append(d)
            conf.append(c)
        return torch.cat(depth), torch.cat(conf)

    def _with_position(self, x: torch.Tensor, image_hw: tuple[int, int]) -> torch.Tensor:
        height, width = image_hw
        key = (x.shape[1], x.shape[2], x.shape[3], height, width, x.device, x.dtype)
        embed = self._position_cache.get(key)
        if embed is None:
            embed = uv_position_embedding(x.shape[1], x.shape[2], x.shape[3], width / height)
            embed = self._position_cache[key] = embed.to(device=x.device, dtype=x.dtype)
        return x + embed

    def _forward_chunk(
        self, layers: list[torch.Tensor], image_hw: tuple[int, int]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        height, width = image_hw
        grid_h, grid_w = height // self.patch_size, width // self.patch_size
        features = []
        for level, tokens in enumerate(layers):
            x = self.norm(tokens)
            x = x.permute(0, 2, 1).reshape(x.shape[0], x.shape[-1], grid_h, grid_w)
            x = self._with_position(self.projects[level](x), image_hw)
            features.append(self.resize_layers[level](x))
        s = self.scratch
        l1, l2, l3, l4 = (getattr(s, f"layer{i}_rn")(f) for i, f in enumerate(features, start=1))
        out = s.refinenet4(l4, size=l3.shape[2:])
        out = s.refinenet3(out, l3, size=l2.shape[2:])
        out = s.refinenet2(out, l2, size=l1.shape[2:])
        out = s.refinenet1(out, l1)
        out = s.output_conv1(out)
        out = F.interpolate(out, size=(height, width), mode="bilinear", align_corners=True)
        out = s.output_conv2(self._with_position(out, image_hw))
        return out[:, 0].exp(), 1 + out[:, 1].exp()
