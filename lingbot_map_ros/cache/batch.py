"""Batched steps of several streams over one :class:`~lingbot_map_ros.cache.shared_pool.SharedKVPool`.

``begin_batch(pool, caches, keyframes)`` opens one step per stream (each planned by its own layout, exactly
as a single-stream ``begin_step``) and describes the batch as a :class:`BatchPlan`: per stream (= request,
in batch order) its query rows and its visible keys as a token range of the shared pool. Both backends
execute that one description, planned once for all layers:

* torch — when the requests are alike (same query count, same special-stream state) and their key ranges
  equally spaced in the pool (the usual case: N cameras of one resolution get N consecutive regions of one
  size and step in lockstep; issue 33), ONE ``TorchAttention`` call over strided views ``[B, H, keys, D]``
  of the pool (the regions' same offsets, B as the batch dimension); otherwise a loop over the requests,
  each one ``TorchAttention`` call over its range (the single-stream kernel policy per stream, so on CPU a
  stream's output in the loop is bit-identical to its single-stream step's);
* flashinfer — ONE ``BatchPrefillWithPagedKVCacheWrapper`` call per layer with one request per stream
  (page size 1, the page list of each request = its visible tokens; cache/flashinfer_batch.py).

``BatchCacheStep.attend(layer, q, k, v)`` takes the streams' tokens concatenated in batch order
(``[sum T_i, H, D]``), writes each stream's K/V into its own region, attends, and returns ``[sum T_i, H, D]``.
``end_batch`` commits (keyframe) or rolls back (non-keyframe) each stream on its own.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from lingbot_map_ros.cache.backends import TorchAttention, check_backend
from lingbot_map_ros.cache.batch_plan import BatchBackend, BatchPlan, BatchRequest
from lingbot_map_ros.cache.config import KVCacheConfig
from lingbot_map_ros.cache.flashinfer_batch import FlashInferBatchAttention
from lingbot_map_ros.cache.paged_kv_cache import CacheStep
from lingbot_map_ros.cache.shared_pool import PooledKVCache, SharedKVPool


class TorchBatchAttention:
    """The torch backend over a batch: one call over equally spaced alike requests, else one single-stream
    ``TorchAttention`` per request, in a loop."""

    name = "torch"
    #: False once cuDNN refused the strided views of one call (it then ran the slower flash kernel): from then
    #: on alike requests go through the loop too, where each request keeps cuDNN.
    one_call = True

    def __init__(self, config: KVCacheConfig) -> None:
        self._config = config
        self._requests: list[tuple[BatchRequest, TorchAttention]] = []
        self.spacing: int | None = None  # pool tokens between consecutive requests' keys (one call), or None

    def plan(self, plan: BatchPlan) -> None:
        self._requests = []
        for request in plan.requests:
            attention = TorchAttention(self._config)
            attention.plan(
                request.key_start,
                request.key_stop,
                request.num_queries,
                request.frames_start,
                request.specials_capped,
            )
            self._requests.append((request, attention))
        self.spacing = equal_spacing(plan.requests)

    def run(self, q: torch.Tensor, k_pool: torch.Tensor, v_pool: torch.Tensor) -> torch.Tensor:
        if self.spacing is not None and TorchBatchAttention.one_call:
            out = self._run_strided(q, k_pool, v_pool, self.spacing)
            if self._requests[0][1].frames_kernel == "flash":  # a correct result, but cuDNN refused the views
                TorchBatchAttention.one_call = False
            return out
        outputs = [
            attention.run(q[r.query_start : r.query_stop], k_pool, v_pool) for r, attention in self._requests
        ]
        return outputs[0] if len(outputs) == 1 else torch.cat(outputs)

    def _run_strided(
        self, q: torch.Tensor, k_pool: torch.Tensor, v_pool: torch.Tensor, spacing: int
    ) -> torch.Tensor:
        """All requests in one call: q ``[B*T, H, D]`` as ``[B, H, T, D]``, request i's keys the first
        request's range shifted by ``i * spacing`` pool tokens (strided views, no copy)."""
        batch = len(self._requests)
        tokens, heads, dim = q.shape[0] // batch, q.shape[1], q.shape[2]
        qh = q.view(batch, tokens, heads, dim).transpose(1, 2)

        def views(start: int, stop: int) -> tuple[torch.Tensor, torch.Tensor]:
            return tuple(  # type: ignore[return-value]
                pool.as_strided(
                    (batch, heads, stop - start, dim),
                    (spacing * pool.stride(0), pool.stride(1), pool.stride(0), pool.stride(2)),
                    pool.storage_offset() + start * pool.stride(0),
                )
                for pool in (k_pool, v_pool)
            )

        out = self._requests[0][1].attend_views(qh, views)  # [B, H, T, D]
        return out.transpose(1, 2).reshape(batch * tokens, heads, dim)


def equal_spacing(requests: Sequence[BatchRequest]) -> int | None:
    """Pool tokens between consecutive requests when two or more requests are alike (query count, key count,
    special-stream split, cap) and their keys equally spaced (request i's = request 0's + i x spacing,
    spacing > 0); else None (one attention call per request)."""
    if len(requests) < 2:
        return None
    first = requests[0]
    spacing = requests[1].key_start - first.key_start
    if spacing <= 0:
        return None
    for i, r in enumerate(requests):
        shift = i * spacing
        alike = (r.num_queries, r.specials_capped) == (first.num_queries, first.specials_capped)
        shifted = (r.key_start, r.frames_start, r.key_stop) == (
            first.key_start + shift,
            first.frames_start + shift,
            first.key_stop + shift,
        )
        if not (alike and shifted):
            return None
    return spacing


class BatchCacheStep:
    """The open steps of B streams of one pool, attended together layer by layer (made by begin_batch)."""

    def __init__(
        self,
        pool: SharedKVPool,
        caches: Sequence[PooledKVCache],
        steps: Sequence[CacheStep],
        plan: BatchPlan,
        backend: BatchBackend,
    ) -> None:
        self.pool = pool
        self.caches = tuple(caches)
        self.steps = tuple(steps)
        self.plan = plan
        self._backend = backend

    @property
    def num_tokens(self) -> int:
        return self.plan.num_queries

    def attend(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """Write every stream's new K/V into its region, then attend the batch: ``[sum T_i, H, D]`` each."""
        if not isinstance(q, torch.Tensor) or q.shape != k.shape or q.dtype != k.dtype:
            raise ValueError(f"q must be a tensor of k's shape and dtype {tuple(k.shape)}, {k.dtype}")
        self.write(layer, k, v)
        return self._backend.run(q, self.pool.k[layer], self.pool.v[layer])

    def write(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> None:
        """Store every stream's new K/V (rows of its request) for ``layer`` without attending."""
        if k.shape[0] != self.num_tokens or v.shape[0] != self.num_tokens:
            raise ValueError(
                f"k and v must have {self.num_tokens} tokens (the batch), "
                f"got {tuple(k.shape)}, {tuple(v.shape)}"
            )
        for request, step in zip(self.plan.requests, self.steps, strict=True):
            rows = slice(request.query_start, request.query_stop)
            step.write(layer, k[rows], v[rows])


def begin_batch(
    pool: SharedKVPool,
    caches: Sequence[PooledKVCache],
    keyframes: Sequence[bool],
    num_frames: Sequence[int] | None = None,
    backend: BatchBackend | None = None,
) -> BatchCacheStep:
    """Open one step per cache (distinct caches of ``pool``) and plan the batch once for all layers.

    ``num_frames`` per stream defaults to 1 (streaming steps). ``backend``: a batch backend to reuse (its
    plan is replaced); default the pool's own (made on the first batch). On an error every step opened
    here is closed.
    """
    if not caches or len(caches) != len(keyframes):
        raise ValueError(
            f"need one keyframe flag per cache, got {len(caches)} caches, {len(keyframes)} flags"
        )
    if len({id(c) for c in caches}) != len(caches):
        raise ValueError("a cache appears twice in one batch")
    for cache in caches:
        if not isinstance(cache, PooledKVCache) or cache.pool is not pool:
            raise ValueError("every cache of a batch must be a PooledKVCache of this pool")
    frames = [1] * len(caches) if num_frames is None else list(num_frames)
    steps: list[CacheStep] = []
    try:
        for cache, keyframe, count in zip(caches, keyframes, frames, strict=True):
            steps.append(cache.begin_step(count, keyframe, plan_backend=False))
    except BaseException:
        for cache, step in zip(caches, steps, strict=False):
            cache.abort_step(step)
        raise
    requests, query = [], 0
    for cache, step in zip(caches, steps, strict=True):
        base, tokens = cache.region.start, step.num_tokens
        plan = step.plan
        frames_start = max(plan.visible_start, min(cache.layout.frame_base, plan.visible_stop))
        requests.append(
            BatchRequest(
                query_start=query,
                query_stop=query + tokens,
                key_start=base + plan.visible_start,
                frames_start=base + frames_start,
                key_stop=base + plan.visible_stop,
                specials_capped=cache.specials_capped(step._committed),
            )
        )
        query += tokens
    batch_plan = BatchPlan(tuple(requests))
    if backend is None:
        if pool.batch_backend is None:
            pool.batch_backend = make_batch_backend(pool.backend_name, _pool_config(pool))
        backend = pool.batch_backend
    backend.plan(batch_plan)
    return BatchCacheStep(pool, caches, steps, batch_plan, backend)


def _pool_config(pool: SharedKVPool) -> KVCacheConfig:
    """The head geometry, dtype and device of ``pool``'s batch backend."""
    return KVCacheConfig(
        num_layers=pool.num_layers,
        num_heads=pool.num_heads,
        head_dim=pool.head_dim,
        dtype=pool.dtype,
        device=pool.device,
    )


def make_batch_backend(name: str, config: KVCacheConfig) -> BatchBackend:
    """The batch backend ``name`` ("auto", "torch" or "flashinfer") of a shared pool, one request per stream
    (``auto``: torch, as for a single stream, ``backends.make_backend``)."""
    check_backend(name)
    if name == "flashinfer":
        return FlashInferBatchAttention(config)
    return TorchBatchAttention(config)


def end_batch(step: BatchCacheStep) -> None:
    """Close every stream's step: keyframes commit, non-keyframes roll back (each stream on its own)."""
    errors = []
    for cache, cache_step in zip(step.caches, step.steps, strict=True):
        try:
            cache.end_step(cache_step)
        except RuntimeError as error:  # a keyframe ended before every layer attended: that cache reset
            errors.append(error)
    if errors:
        raise errors[0]
