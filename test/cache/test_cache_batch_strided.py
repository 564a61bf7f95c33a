"""One attention call for a batch of alike streams (cache/batch.py, issue 33) against single-stream caches.

Streams of one resolution stepping in lockstep have equally spaced key ranges in the shared pool: the torch
batch backend then attends all of them in one call over strided views. Checked on CPU against each
stream's own ``PagedKVCache`` fed the same tensors, while the window fills, once it is full and the special
stream grows, for every batch of 2 or 3 of 3 such streams, and for a batch whose streams drifted apart (the
loop over requests).
"""

from __future__ import annotations

import itertools

import pytest
import torch

from lingbot_map_ros.cache import KVCacheConfig, PagedKVCache
from lingbot_map_ros.cache.backends import TorchAttention
from lingbot_map_ros.cache.batch import TorchBatchAttention, begin_batch, end_batch, equal_spacing
from lingbot_map_ros.cache.batch_plan import BatchPlan, BatchRequest
from lingbot_map_ros.cache.shared_pool import PooledKVCache, SharedKVPool

LAYERS, HEADS, DIM, PATCHES = 2, 2, 4, 5
CONFIG = KVCacheConfig(
    num_layers=LAYERS, num_heads=HEADS, head_dim=DIM, patches_per_frame=PATCHES, num_special=2,
    scale_frames=2, sliding_window=2, max_window=4, max_special_frames=12,
)  # fmt: skip


def _step(pool, pooled, refs, streams, keyframes, gen) -> int | None:
    """One batched step of `streams` against their references; returns the backend's spacing."""
    frames = [2 if refs[i].frames_stored == 0 else 1 for i in streams]
    tokens = [f * CONFIG.tokens_per_frame for f in frames]
    qkv = torch.randn(3, LAYERS, sum(tokens), HEADS, DIM, generator=gen)
    step = begin_batch(pool, [pooled[i] for i in streams], keyframes, frames)
    ref_steps = [refs[i].begin_step(f, k) for i, f, k in zip(streams, frames, keyframes, strict=True)]
    bounds = list(itertools.accumulate(tokens, initial=0))
    for layer in range(LAYERS):
        out = step.attend(layer, *qkv[:, layer])
        for j, ref_step in enumerate(ref_steps):
            rows = slice(bounds[j], bounds[j + 1])
            expected = ref_step.attend(layer, *(t[rows] for t in qkv[:, layer]))
            torch.testing.assert_close(out[rows], expected, rtol=1e-6, atol=1e-6)
    end_batch(step)
    for i, ref_step in zip(streams, ref_steps, strict=True):
        refs[i].end_step(ref_step)
    return pool.batch_backend.spacing


def test_lockstep_streams_attend_in_one_call() -> None:
    gen = torch.Generator().manual_seed(0)
    pool = SharedKVPool(LAYERS, HEADS, DIM, backend="torch", streams=3)
    pooled = [PooledKVCache(pool, CONFIG, backend="torch") for _ in range(3)]
    refs = [PagedKVCache(CONFIG, backend="torch") for _ in range(3)]
    region = pooled[1].region.start - pooled[0].region.start
    assert region == pooled[0].region.tokens and pooled[2].region.start == 2 * region
    assert _step(pool, pooled, refs, [0, 1, 2], [True] * 3, gen) == region  # the anchor steps too
    spacings = []
    for t in range(10):  # window fills, then evictions into the special stream (its cap: 12 frames)
        keyframe = t % 3 != 2
        spacings.append(_step(pool, pooled, refs, [0, 1, 2], [keyframe] * 3, gen))
        for subset in ([0, 2], [1, 2]):  # no keyframe: the three stay in lockstep
            spacings.append(_step(pool, pooled, refs, subset, [False, False], gen))
    assert spacings == [region, 2 * region, region] * 10
    _step(pool, pooled, refs, [0], [True], gen)  # stream 0 one keyframe ahead: ranges no longer shifted
    assert _step(pool, pooled, refs, [0, 1, 2], [False] * 3, gen) is None


def test_equal_spacing_needs_alike_shifted_requests() -> None:
    def request(i: int, shift: int, queries: int = 7, capped: bool = False) -> BatchRequest:
        return BatchRequest(i * queries, (i + 1) * queries, 3 + shift, 9 + shift, 40 + shift, capped)

    assert equal_spacing(BatchPlan((request(0, 0),)).requests) is None
    assert equal_spacing((request(0, 0), request(1, 50), request(2, 100))) == 50
    assert equal_spacing((request(0, 0), request(1, 50), request(2, 101))) is None
    assert equal_spacing((request(0, 50), request(1, 0))) is None
    assert equal_spacing((request(0, 0), request(1, 50, capped=True))) is None
    assert equal_spacing((request(0, 0), BatchRequest(7, 15, 53, 59, 90, False))) is None  # 8 queries


def test_a_refused_one_call_falls_back_to_the_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    """When cuDNN refuses the strided views (the call ran on the flash kernel), later batches loop over
    their requests, each keeping cuDNN; every output stays equal to the single-stream caches'."""
    monkeypatch.setattr(TorchBatchAttention, "one_call", True)
    calls: list[int] = []
    attend_views = TorchAttention.attend_views

    def refusing(self, qh, views):
        calls.append(qh.shape[0])
        if qh.shape[0] > 1:
            self.frames_kernel = "flash"
        return attend_views(self, qh, views)

    monkeypatch.setattr(TorchAttention, "attend_views", refusing)
    gen = torch.Generator().manual_seed(1)
    pool = SharedKVPool(LAYERS, HEADS, DIM, backend="torch", streams=2)
    pooled = [PooledKVCache(pool, CONFIG, backend="torch") for _ in range(2)]
    refs = [PagedKVCache(CONFIG, backend="torch") for _ in range(2)]
    _step(pool, pooled, refs, [0, 1], [True, True], gen)
    assert calls[0] == 2 and not TorchBatchAttention.one_call
    calls.clear()
    _step(pool, pooled, refs, [0, 1], [True, True], gen)
    assert calls == [1] * (4 * LAYERS)  # per layer: the two requests, then the two references
