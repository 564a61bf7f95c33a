"""lingbot_map_ros.cache: the two-stream paged KV cache and its attention backends (docs/cache.md).

Contract (docs/architecture.md): ``PagedKVCache(config, backend="auto"|"torch"|"flashinfer")``,
``begin_step(num_frames, keyframe) -> CacheStep``, ``CacheStep.attend(layer, q, k, v)``, ``end_step(step)``,
``frames_stored``, ``reset()``, ``set_sliding_window(n)``, ``stats() -> KVCacheStats``.
"""

from lingbot_map_ros.cache.config import DEFAULT_MAX_SPECIAL_FRAMES, KVCacheConfig, KVCacheStats
from lingbot_map_ros.cache.paged_kv_cache import CacheStep, PagedKVCache

__all__ = ["DEFAULT_MAX_SPECIAL_FRAMES", "CacheStep", "KVCacheConfig", "KVCacheStats", "PagedKVCache"]
