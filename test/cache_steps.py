"""The one helper that drives `PagedKVCache` steps in the cache tests (trace, long run, GPU)."""

from __future__ import annotations

import torch

from lingbot_map_ros.cache import CacheStep, PagedKVCache


def run_step(
    cache: PagedKVCache,
    num_frames: int,
    keyframe: bool = True,
    *,
    attend: bool = True,
    generator: torch.Generator | None = None,
) -> tuple[CacheStep, list[torch.Tensor]]:
    """One step of random q/k/v ``[T, H, D]`` (cache dtype and device, from ``generator``) on every layer.

    ``attend``: attend each layer (its outputs are returned, checked finite and of q's shape), else only write
    the new frames' K/V (fast-forward). Returns the ended step (``visible_tokens``, ``plan``) and the outputs.
    """
    config = cache.config
    step = cache.begin_step(num_frames, keyframe)
    shape = (3, num_frames * config.tokens_per_frame, config.num_heads, config.head_dim)
    outputs = []
    for layer in range(config.num_layers):
        q, k, v = torch.randn(shape, generator=generator, device=config.device, dtype=config.dtype).unbind(0)
        if attend:
            out = step.attend(layer, q, k, v)
            assert out.shape == q.shape and torch.isfinite(out).all()
            outputs.append(out)
        else:
            step.write(layer, k, v)
    cache.end_step(step)
    return step, outputs
