"""Pre-norm transformer block: `x + ls1(attn(norm1(x)))`, then `x + ls2(mlp(norm2(x)))`."""

from __future__ import annotations

import torch
from torch import nn

from lingbot_map_ros.model.layers.attention import AttendFn, Attention, RotateFn
from lingbot_map_ros.model.layers.layer_scale import LayerScale
from lingbot_map_ros.model.layers.mlp import Mlp


class Block(nn.Module):
    """One transformer block (state-dict layout of DINOv2 / VGGT blocks).

    Args:
        dim: channel width C.
        num_heads: attention heads.
        mlp_ratio: MLP hidden width = `mlp_ratio * dim`.
        qk_norm: per-head LayerNorm on q and k.
        norm_eps: eps of `norm1`, `norm2` (1e-6 in DINOv2, 1e-5 in the aggregator and camera head).
        init_values: LayerScale initial value (irrelevant once weights are loaded).
    """

    def __init__(
        self,
        dim: int,
        num_heads: int,
        mlp_ratio: float = 4.0,
        qk_norm: bool = False,
        norm_eps: float = 1e-5,
        init_values: float = 0.01,
    ) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=norm_eps)
        self.attn = Attention(dim, num_heads, qk_norm=qk_norm, norm_eps=1e-5)
        self.ls1 = LayerScale(dim, init_values)
        self.norm2 = nn.LayerNorm(dim, eps=norm_eps)
        self.mlp = Mlp(dim, int(dim * mlp_ratio))
        self.ls2 = LayerScale(dim, init_values)

    def forward(
        self, x: torch.Tensor, rotate: RotateFn | None = None, attend: AttendFn | None = None
    ) -> torch.Tensor:
        """x `[B, N, C]` -> `[B, N, C]`; `rotate`/`attend` as in `Attention.forward`."""
        x = x + self.ls1(self.attn(self.norm1(x), rotate=rotate, attend=attend))
        return x + self.ls2(self.mlp(self.norm2(x)))

    def attention_inputs(
        self, x: torch.Tensor, rotate: RotateFn | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """`forward` up to the attention: x `[B, N, C]` -> q, k, v `[B, H, N, D]` (CUDA-graph segments)."""
        return self.attn.heads(self.norm1(x), rotate)

    def finish(self, x: torch.Tensor, attended: torch.Tensor) -> torch.Tensor:
        """`forward` after the attention: residual input x `[B, N, C]`, attention output `[B, H, N, D]`."""
        x = x + self.ls1(self.attn.project(attended))
        return x + self.ls2(self.mlp(self.norm2(x)))
