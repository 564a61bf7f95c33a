"""A 100,000-frame stream through a tiny cache: memory and per-step cost stay at their ceiling."""

from __future__ import annotations

import psutil
import torch
from cache_steps import run_step

from lingbot_map_ros.cache import KVCacheConfig, PagedKVCache

FRAMES = 100_000


def test_hundred_thousand_frames_stay_within_the_memory_ceiling():
    torch.set_num_threads(1)
    config = KVCacheConfig(
        num_layers=1,
        num_heads=1,
        head_dim=8,
        patches_per_frame=4,
        num_special=2,
        scale_frames=2,
        sliding_window=4,
        max_window=6,
        max_special_frames=40,
    )
    cache = PagedKVCache(config, backend="torch")
    pool = (cache.k_pool.data_ptr(), cache.v_pool.data_ptr(), cache.pool_bytes)
    tokens = config.tokens_per_frame
    ceiling = (
        40 * 2 + (2 + 6) * 4 + tokens
    )  # specials of 40 frames + the other tokens of anchors + window + new
    process = psutil.Process()
    run_step(cache, 2)
    rss_start, max_visible = 0, 0
    for i in range(FRAMES):
        if i % 25_000 == 12_345:
            cache.set_sliding_window(6 if cache.sliding_window == 4 else 4)
            if i == 12_345:  # the first increase past the pool's window re-allocates it, once
                assert cache.stats().pool_reallocations == 1
                pool = (cache.k_pool.data_ptr(), cache.v_pool.data_ptr(), cache.pool_bytes)
        step, _ = run_step(cache, 1, keyframe=i % 3 != 2)
        max_visible = max(max_visible, step.visible_tokens)
        if i == 10_000:
            rss_start = process.memory_info().rss
    stats = cache.stats()
    assert stats.frames_stored == 2 + sum(1 for i in range(FRAMES) if i % 3 != 2)
    assert stats.special_frames_visible == 40 and stats.evicted_special_frames == 40 - 2 - stats.window_frames
    assert len(cache.layout.state.special_frame) == stats.evicted_special_frames
    assert max_visible == ceiling
    assert (cache.k_pool.data_ptr(), cache.v_pool.data_ptr(), cache.pool_bytes) == pool
    assert stats.pool_reallocations == 1 and stats.pool_window == 6
    assert process.memory_info().rss - rss_start < 16 * 2**20
