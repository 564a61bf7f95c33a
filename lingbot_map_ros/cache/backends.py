"""Attention backends over one layer's K/V pool (see docs/cache.md).

A backend is planned once per step with the visible token range ``[start, stop)`` of the pool (the same
range in every layer) and then run per layer. Pools are ``[pool_tokens, num_heads, head_dim]`` (NHD,
token-major); queries are ``[T, num_heads, head_dim]``. Attention is non-causal with scale
``1/sqrt(head_dim)``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import torch
import torch.nn.functional as F

from lingbot_map_ros.cache.config import KVCacheConfig

#: Global-attention backend names (the one list: `SessionConfig`, `attention.backend`, `run`, benchmarks).
BACKENDS = ("auto", "torch", "flashinfer")


def check_backend(name: object) -> str:
    """``name`` when it is one of :data:`BACKENDS`, else ValueError: the one check of a backend name."""
    if name not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {name!r}")
    return str(name)


class AttentionBackend(Protocol):
    """What :class:`~lingbot_map_ros.cache.paged_kv_cache.PagedKVCache` needs from a backend."""

    name: str

    def plan(self, start: int, stop: int, num_queries: int, frames_start: int, specials_capped: bool) -> None:
        """Fix the visible pool tokens ``[start, stop)`` and the query count for all layers of one step.

        Tokens ``[start, frames_start)`` are the special stream, ``[frames_start, stop)`` the frame slots.
        ``specials_capped``: the special stream is at ``max_special_frames``, so the key count of a step no
        longer changes from one keyframe to the next.
        """

    def run(self, q: torch.Tensor, k_pool: torch.Tensor, v_pool: torch.Tensor) -> torch.Tensor:
        """Attention of ``q`` ``[T, H, D]`` over the planned keys of one layer's pools; ``[T, H, D]``."""


def merge_partial_attention(
    out_a: torch.Tensor, lse_a: torch.Tensor, out_b: torch.Tensor, lse_b: torch.Tensor
) -> torch.Tensor:
    """Attention over the union of two disjoint key sets from the two partial results.

    out_*: ``[H, T, D]``, lse_* (natural log-sum-exp of the scaled scores): ``[H, T]`` float32. Returns
    ``[H, T, D]`` in out_a's dtype: ``w * out_a + (1 - w) * out_b`` with ``w = sigmoid(lse_a - lse_b)``.
    """
    weight = torch.sigmoid(lse_a.float() - lse_b.float()).unsqueeze(-1)
    return torch.lerp(out_b.float(), out_a.float(), weight).to(out_a.dtype)


class TorchAttention:
    """``scaled_dot_product_attention`` over views of the pool: no gather, no concatenation.

    CPU: one SDPA call over the whole visible range (float32 inputs in float32 math: the parity path).

    CUDA: cuDNN is the fastest kernel for this shape (1,005 queries x ~75k keys, 16 x 64, bf16;
    ../shared/gpu/README.md), but it builds an execution graph for every new key count (~60 ms per step
    measured), and the special stream grows by 6 keys per keyframe until it reaches ``max_special_frames``
    (never, in a session that re-anchors every 320 frames). While the special stream grows, a step is split:
    the frame slots (a count that changes only while the window fills) go through cuDNN, the special stream
    through the flash kernel, and the partial results are merged with their log-sum-exp
    (:func:`merge_partial_attention`). Once the special stream is at its cap the key count is steady and one
    fused cuDNN call attends everything. Measurements: docs/benchmarks.md.
    """

    name = "torch"

    def __init__(self, config: KVCacheConfig) -> None:
        self._range = (0, 0, 0)
        self._cuda_half = config.device.type == "cuda" and config.dtype in (torch.bfloat16, torch.float16)
        self.fused = True
        self.frames_kernel = "cudnn" if self._cuda_half else "sdpa"

    def plan(self, start: int, stop: int, num_queries: int, frames_start: int, specials_capped: bool) -> None:
        frames_start = max(start, min(frames_start, stop))
        self._range = (start, frames_start, stop)
        self.fused = frames_start == start or specials_capped

    def run(self, q: torch.Tensor, k_pool: torch.Tensor, v_pool: torch.Tensor) -> torch.Tensor:
        out = self.attend_views(
            q.transpose(0, 1).unsqueeze(0), lambda a, b: _heads_first(k_pool, v_pool, a, b)
        )
        return out[0].transpose(0, 1).contiguous()

    def attend_views(
        self, qh: torch.Tensor, views: Callable[[int, int], tuple[torch.Tensor, torch.Tensor]]
    ) -> torch.Tensor:
        """The planned attention of ``qh`` ``[N, H, T, D]`` over ``views(a, b)``: K and V ``[N, H, b - a, D]``
        of the planned tokens ``[a, b)`` (N = 1: one stream; N > 1: equally spaced regions of N streams in one
        call, cache/batch.py). Returns ``[N, H, T, D]``."""
        start, frames_start, stop = self._range
        if not self._cuda_half:  # CPU, or float32 on CUDA (parity): one call, torch picks the kernel
            return F.scaled_dot_product_attention(qh, *views(start, stop))
        if self.fused:
            return self._frames_attention(qh, *views(start, stop))[0]
        out, lse = self._frames_attention(qh, *views(frames_start, stop))
        if frames_start > start:
            out_s, lse_s = torch.ops.aten._scaled_dot_product_flash_attention(
                qh, *views(start, frames_start)
            )[:2]
            out = merge_partial_attention(
                out, lse.reshape(out.shape[:-1]), out_s, lse_s.reshape(out.shape[:-1])
            )
        return out

    def _frames_attention(
        self, qh: torch.Tensor, kh: torch.Tensor, vh: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """cuDNN attention with its log-sum-exp; the flash kernel where cuDNN is unavailable."""
        if self.frames_kernel == "cudnn":
            try:
                return torch.ops.aten._scaled_dot_product_cudnn_attention(qh, kh, vh, None, True)[:2]
            except RuntimeError:
                self.frames_kernel = "flash"
        return torch.ops.aten._scaled_dot_product_flash_attention(qh, kh, vh)[:2]


def _heads_first(
    k_pool: torch.Tensor, v_pool: torch.Tensor, start: int, stop: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Views ``[1, H, stop - start, D]`` of pool tokens ``[start, stop)``."""
    return (
        k_pool[start:stop].transpose(0, 1).unsqueeze(0),
        v_pool[start:stop].transpose(0, 1).unsqueeze(0),
    )


def make_backend(name: str, config: KVCacheConfig, pool_tokens: int) -> AttentionBackend:
    """Build the single-stream backend ``name`` ("auto", "torch" or "flashinfer") for ``config`` over a pool
    of ``pool_tokens`` tokens (``PagedKVCache``; the batch backends of a shared pool: ``make_batch_backend``,
    cache/batch.py). ``auto`` picks torch SDPA everywhere: on CPU it is the only backend; on CUDA the visible
    keys are one contiguous slab, where cuDNN SDPA beats FlashInfer's paged kernels (docs/cache.md,
    docs/benchmarks.md).
    """
    check_backend(name)
    if name == "flashinfer":
        from lingbot_map_ros.cache.flashinfer_backend import FlashInferAttention

        return FlashInferAttention(config, pool_tokens)
    return TorchAttention(config)
