"""Multi-head self-attention with optional per-head q/k LayerNorm, rotary embedding and pluggable attend.

The same module serves the DINOv2 backbone (no q/k norm, no RoPE), the aggregator's frame blocks
(q/k norm + 2D RoPE, attention within each frame), the global blocks (q/k norm + 3D video RoPE, attention
through the paged KV cache) and the camera-head trunk (attention through the camera history).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

RotateFn = Callable[[torch.Tensor], torch.Tensor]
"""Rotary embedding applied to q and k: `[B, H, N, D] -> [B, H, N, D]`."""

AttendFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
"""Attention of q over (k, v) and whatever the caller caches: q/k/v `[B, H, N, D]` -> `[B, H, N, D]`."""


def full_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Unmasked softmax attention with scale `1/sqrt(D)`; q/k/v `[B, H, N, D]` -> `[B, H, N, D]`."""
    return F.scaled_dot_product_attention(q, k, v)


class Attention(nn.Module):
    """`qkv` Linear -> (q_norm, k_norm) -> rotate -> attend -> `proj` Linear.

    Args:
        dim: channel width C (= num_heads * head_dim).
        num_heads: H.
        qk_norm: per-head LayerNorm(head_dim) on q and k (`q_norm`, `k_norm`), eps `norm_eps`.
    """

    def __init__(self, dim: int, num_heads: int, qk_norm: bool = False, norm_eps: float = 1e-5) -> None:
        super().__init__()
        if dim % num_heads:
            raise ValueError(f"dim {dim} must be a multiple of num_heads {num_heads}")
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        self.qkv = nn.Linear(dim, 3 * dim, bias=True)
        self.q_norm: nn.Module = nn.LayerNorm(self.head_dim, eps=norm_eps) if qk_norm else nn.Identity()
        self.k_norm: nn.Module = nn.LayerNorm(self.head_dim, eps=norm_eps) if qk_norm else nn.Identity()
        self.proj = nn.Linear(dim, dim, bias=True)

    def forward(
        self, x: torch.Tensor, rotate: RotateFn | None = None, attend: AttendFn | None = None
    ) -> torch.Tensor:
        """x `[B, N, C]` -> `[B, N, C]`. `attend` defaults to full attention among the N tokens."""
        q, k, v = self.heads(x, rotate)
        return self.project((attend or full_attention)(q, k, v))

    def heads(
        self, x: torch.Tensor, rotate: RotateFn | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """First half of `forward`: x `[B, N, C]` -> q, k, v `[B, H, N, D]` (normed and rotated)."""
        batch, tokens, _ = x.shape
        qkv = self.qkv(x).reshape(batch, tokens, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        q, k = self.q_norm(q), self.k_norm(k)
        if rotate is not None:
            q, k = rotate(q), rotate(k)
        return q, k, v

    def project(self, out: torch.Tensor) -> torch.Tensor:
        """Second half of `forward`: attention output `[B, H, N, D]` -> `proj` -> `[B, N, C]`."""
        batch, _, tokens, _ = out.shape
        return self.proj(out.transpose(1, 2).reshape(batch, tokens, self.num_heads * self.head_dim))
