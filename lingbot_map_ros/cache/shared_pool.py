"""One K/V pool shared by the caches of several streams (cameras), partitioned into per-stream regions.

:class:`SharedKVPool` holds ``k`` and ``v`` ``[num_layers, capacity, H, D]`` (NHD, token-major, the cache
dtype on the cache device). Every stream's :class:`PooledKVCache` owns one contiguous **region** of it,
laid out exactly as a single-stream ``PagedKVCache`` pool (special stream, then frame slots;
cache/layout.py), so a stream's visible keys stay one contiguous token range, now at
``region.start + [visible_start, visible_stop)`` of the shared pool. Anchors, window, special stream, stats,
reset and live window are the stream's own; nothing a stream does writes outside its region, so a stream's
reset, re-anchor or resize never touches another's pages.

Regions are placed first-fit in the gaps between live regions; when no gap fits, the pool grows at its end
(one re-allocation of ``k`` then ``v``, every live region keeps its address; logged at INFO and
counted: a new camera's first frames, or a window increase). A region
that must grow (a live window increase past its allocation) grows in place when the gap after it is free,
else it moves (its tokens are copied; the old range is freed). A cache's region is released when the cache
is closed or garbage-collected (a resolution change makes a new cache). Memory: the sum of the streams'
single-stream pool sizes plus free gaps (docs/cache.md, "Several streams").
"""

from __future__ import annotations

import logging
import weakref
from dataclasses import dataclass

import torch

from lingbot_map_ros.cache.config import KVCacheConfig
from lingbot_map_ros.cache.paged_kv_cache import PagedKVCache

_LOG = logging.getLogger(__name__)


@dataclass
class Region:
    """Pool tokens ``[start, start + tokens)`` owned by one stream's cache."""

    start: int
    tokens: int

    @property
    def stop(self) -> int:
        return self.start + self.tokens


@dataclass(frozen=True)
class SharedPoolStats:
    """The shared pool for /diagnostics: capacity, live regions and re-allocations."""

    capacity_tokens: int
    used_tokens: int
    regions: int
    pool_bytes: int
    reallocations: int


class SharedKVPool:
    """K and V pools ``[num_layers, capacity, num_heads, head_dim]`` shared by several streams' caches.

    Args:
        num_layers, num_heads, head_dim, dtype, device: the geometry every stream's ``KVCacheConfig`` must
            share (the model's global-attention layers).
        backend: attention backend of batched steps over this pool (one of `backends.BACKENDS`;
            cache/batch.py); each stream's own single-stream steps use its cache's backend.
        streams: how many streams are expected: when the pool must grow, it grows by room for the
            streams not placed yet (the size of the region being placed each), so N cameras of one
            resolution cost one allocation, not N growing re-allocations (each copying the pool).
    """

    def __init__(
        self,
        num_layers: int,
        num_heads: int,
        head_dim: int,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str = "cpu",
        backend: str = "auto",
        streams: int = 1,
    ) -> None:
        self.streams = streams
        self.num_layers, self.num_heads, self.head_dim = num_layers, num_heads, head_dim
        self.dtype, self.device = dtype, torch.device(device)
        self.backend_name = backend
        self.batch_backend: object | None = None  # made by cache.batch.begin_batch on the first batch
        self._regions: dict[int, Region] = {}
        self._next_id = 0
        self.reallocations = 0
        self.k = self._empty(0)
        self.v = self._empty(0)

    @classmethod
    def for_config(cls, config: KVCacheConfig, backend: str = "auto") -> SharedKVPool:
        """A pool with the geometry, dtype and device of ``config``."""
        return cls(config.num_layers, config.num_heads, config.head_dim, config.dtype, config.device, backend)

    # ------------------------------------------------------------------------------------------ regions
    @property
    def capacity(self) -> int:
        return self.k.shape[1]

    @property
    def pool_bytes(self) -> int:
        return 2 * self.k.numel() * self.k.element_size()

    def region(self, region_id: int) -> Region:
        return self._regions[region_id]

    def allocate(self, tokens: int) -> int:
        """Reserve ``tokens`` pool tokens (zeroed); returns the region id."""
        start = self._place(tokens)
        region_id = self._next_id
        self._next_id += 1
        self._regions[region_id] = Region(start, tokens)
        self._zero(start, tokens)
        return region_id

    def release(self, region_id: int) -> None:
        """Free a region (its tokens may be reused by another stream)."""
        self._regions.pop(region_id, None)

    def resize(self, region_id: int, tokens: int) -> None:
        """Grow a region to ``tokens``, keeping its first tokens' contents (in place or moved)."""
        region = self._regions[region_id]
        if tokens <= region.tokens:
            return
        others = [r for i, r in self._regions.items() if i != region_id]
        next_start = min((r.start for r in others if r.start >= region.stop), default=None)
        if next_start is None and region.start + tokens > self.capacity:
            self._grow(region.start + tokens)
        if next_start is None or region.start + tokens <= next_start:
            self._zero(region.stop, region.start + tokens - region.stop)
            region.tokens = tokens
            return
        start = self._place(tokens)  # the old range is still reserved: source and target never overlap
        with torch.inference_mode(False):
            for pool in (self.k, self.v):
                pool[:, start : start + region.tokens].copy_(pool[:, region.start : region.stop])
        self._zero(start + region.tokens, tokens - region.tokens)
        self._regions[region_id] = Region(start, tokens)

    def views(self, region_id: int) -> tuple[torch.Tensor, torch.Tensor]:
        """K and V views ``[num_layers, region tokens, H, D]`` of a region (valid until the pool grows)."""
        r = self._regions[region_id]
        return self.k[:, r.start : r.stop], self.v[:, r.start : r.stop]

    def stats(self) -> SharedPoolStats:
        return SharedPoolStats(
            capacity_tokens=self.capacity,
            used_tokens=sum(r.tokens for r in self._regions.values()),
            regions=len(self._regions),
            pool_bytes=self.pool_bytes,
            reallocations=self.reallocations,
        )

    # ------------------------------------------------------------------------------------------ internals
    def _empty(self, tokens: int) -> torch.Tensor:
        # Plain tensors even when made inside the model's inference_mode step: they are written in and
        # outside it (a live window resize runs between steps).
        with torch.inference_mode(False):
            shape = (self.num_layers, tokens, self.num_heads, self.head_dim)
            return torch.zeros(shape, dtype=self.dtype, device=self.device)

    def _zero(self, start: int, tokens: int) -> None:
        with torch.inference_mode(False):
            self.k[:, start : start + tokens].zero_()
            self.v[:, start : start + tokens].zero_()

    def _place(self, tokens: int) -> int:
        """First fit among the gaps between live regions; grows the pool at its end when none fits."""
        position = 0
        for region in sorted(self._regions.values(), key=lambda r: r.start):
            if region.start - position >= tokens:
                return position
            position = max(position, region.stop)
        if position + tokens > self.capacity:
            self._grow(position + tokens * max(1, self.streams - len(self._regions)))
        return position

    def _grow(self, capacity: int) -> None:
        """Re-allocate ``k`` then ``v`` with ``capacity`` tokens; every live region keeps its address."""
        old_bytes, old = self.pool_bytes, self.capacity
        for name in ("k", "v"):
            grown = self._empty(capacity)
            with torch.inference_mode(False):
                grown[:, :old].copy_(getattr(self, name))
            setattr(self, name, grown)
        if old:
            self.reallocations += 1
            _LOG.info(
                "shared KV pool re-allocated: %d -> %d tokens per layer, %.2f GiB -> %.2f GiB",
                old,
                capacity,
                old_bytes / 2**30,
                self.pool_bytes / 2**30,
            )


class PooledKVCache(PagedKVCache):
    """A :class:`PagedKVCache` whose pools are a region of a :class:`SharedKVPool` (same semantics and API).

    ``k_pool``/``v_pool`` are views ``[num_layers, pool_tokens, H, D]`` of the region, taken at each access
    (the shared pool may have grown since). ``close()`` (or garbage collection) frees the region.
    """

    def __init__(self, pool: SharedKVPool, config: KVCacheConfig, backend: str = "auto") -> None:
        if not isinstance(pool, SharedKVPool):
            raise ValueError(f"pool must be a SharedKVPool, got {type(pool).__name__}")
        geometry = (config.num_layers, config.num_heads, config.head_dim, config.dtype, config.device)
        expected = (pool.num_layers, pool.num_heads, pool.head_dim, pool.dtype, pool.device)
        if geometry != expected:
            raise ValueError(
                f"cache (layers, heads, head_dim, dtype, device) {geometry} differ from the pool's {expected}"
            )
        self.pool = pool
        self.region_id = -1
        super().__init__(config, backend)

    def _allocate_pools(self) -> None:
        self.region_id = self.pool.allocate(self.layout.pool_tokens)
        self._finalizer = weakref.finalize(self, self.pool.release, self.region_id)

    def _reallocate_pools(self, old_tokens: int) -> None:
        self.pool.resize(self.region_id, self.layout.pool_tokens)

    def close(self) -> None:
        """Free the region now (the cache is unusable afterwards)."""
        self._finalizer()

    @property
    def region(self) -> Region:
        """This stream's tokens in the shared pool."""
        return self.pool.region(self.region_id)

    @property
    def k_pool(self) -> torch.Tensor:
        return self.pool.views(self.region_id)[0]

    @property
    def v_pool(self) -> torch.Tensor:
        return self.pool.views(self.region_id)[1]

    @property
    def pool_bytes(self) -> int:
        return 2 * self.k_pool.numel() * self.k_pool.element_size()
