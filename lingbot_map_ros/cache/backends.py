"""Attention backends over one layer's K/V pool (see docs/cache.md).

A backend is planned once per step with the visible token range ``[start, stop)`` of the pool (the same
range in every layer) and then run per layer. Pools are ``[pool_tokens, num_heads, head_dim]`` (NHD,
token-major); queries are ``[T, num_heads, head_dim]``. Attention is non-causal with scale
``1/sqrt(head_dim)``.
"""

from __future__ import annotations

from typing import Protocol

import torch
import torch.nn.functional as F

from lingbot_map_ros.cache.config import KVCacheConfig

BACKENDS = ("auto", "torch", "flashinfer")


class AttentionBackend(Protocol):
    """What :class:`~lingbot_map_ros.cache.paged_kv_cache.PagedKVCache` needs from a backend."""

    name: str

    def plan(self, start: int, stop: int, num_queries: int) -> None:
        """Fix the visible pool tokens ``[start, stop)`` and the query count for all layers of one step."""

    def run(self, q: torch.Tensor, k_pool: torch.Tensor, v_pool: torch.Tensor) -> torch.Tensor:
        """Attention of ``q`` ``[T, H, D]`` over the planned keys of one layer's pools; ``[T, H, D]``."""


class TorchAttention:
    """``scaled_dot_product_attention`` over a view of the pool: no gather, no concatenation.

    On CUDA the cuDNN kernel is preferred (fastest measured for this shape: 1,005 queries x ~75k keys,
    16 x 64, bf16, ../shared/gpu/README.md); on CPU torch picks its own kernel, float32 inputs in float32
    math.
    """

    name = "torch"

    def __init__(self, config: KVCacheConfig) -> None:
        self._range = (0, 0)
        self._cuda_backends: list | None = None
        if config.device.type == "cuda":
            from torch.nn.attention import SDPBackend

            self._cuda_backends = [
                SDPBackend.CUDNN_ATTENTION,
                SDPBackend.FLASH_ATTENTION,
                SDPBackend.EFFICIENT_ATTENTION,
                SDPBackend.MATH,
            ]

    def plan(self, start: int, stop: int, num_queries: int) -> None:
        self._range = (start, stop)

    def run(self, q: torch.Tensor, k_pool: torch.Tensor, v_pool: torch.Tensor) -> torch.Tensor:
        start, stop = self._range
        qh = q.transpose(0, 1).unsqueeze(0)
        kh = k_pool[start:stop].transpose(0, 1).unsqueeze(0)
        vh = v_pool[start:stop].transpose(0, 1).unsqueeze(0)
        if self._cuda_backends is None:
            out = F.scaled_dot_product_attention(qh, kh, vh)
        else:
            from torch.nn.attention import sdpa_kernel

            with sdpa_kernel(self._cuda_backends, set_priority=True):
                out = F.scaled_dot_product_attention(qh, kh, vh)
        return out[0].transpose(0, 1).contiguous()


def make_backend(name: str, config: KVCacheConfig, pool_tokens: int) -> AttentionBackend:
    """Build the backend ``name`` ("auto", "torch" or "flashinfer") for ``config``.

    ``auto`` picks torch SDPA everywhere: on CPU it is the only backend; on CUDA the visible keys are one
    contiguous slab, where cuDNN SDPA beats FlashInfer's paged kernels (docs/cache.md, docs/benchmarks.md).
    """
    if name not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {name!r}")
    if name == "flashinfer":
        from lingbot_map_ros.cache.flashinfer_backend import FlashInferAttention

        return FlashInferAttention(config, pool_tokens)
    return TorchAttention(config)
