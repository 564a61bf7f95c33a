"""FlashInfer execution of a :class:`~lingbot_map_ros.cache.batch_plan.BatchPlan`: one prefill per layer.

The shared pool ``[capacity, H, D]`` is read as a paged cache of page size 1 (``[capacity, 1, H, D]``, NHD);
request i (stream i of the batch) has query rows ``qo_indptr[i]:qo_indptr[i+1]`` and pages = its visible
tokens ``[key_start, key_stop)`` (a slice of one device ``arange``). Planned once per batched step, run per
layer. flashinfer is imported here only (not installed on CPU machines).
"""

from __future__ import annotations

import torch

from lingbot_map_ros.cache.batch_plan import BatchPlan
from lingbot_map_ros.cache.config import KVCacheConfig
from lingbot_map_ros.cache.flashinfer_backend import PagedPrefill


class FlashInferBatchAttention(PagedPrefill):
    """``BatchPrefillWithPagedKVCacheWrapper`` with one request per stream over the shared pool."""

    def __init__(self, config: KVCacheConfig, kernel: str = "auto") -> None:
        super().__init__(config, kernel)
        self._page_ids = torch.arange(0, dtype=torch.int32, device=config.device)

    def plan(self, plan: BatchPlan) -> None:
        stop = max(r.key_stop for r in plan.requests)
        if self._page_ids.numel() < stop:  # grows with the shared pool, never per step in steady state
            self._page_ids = torch.arange(stop, dtype=torch.int32, device=self._config.device)
        pages = torch.cat([self._page_ids[r.key_start : r.key_stop] for r in plan.requests])
        qo_indptr = [0] + [r.query_stop for r in plan.requests]
        kv_indptr = [0]
        for r in plan.requests:
            kv_indptr.append(kv_indptr[-1] + r.num_keys)
        self._plan_requests(qo_indptr, kv_indptr, pages, torch.ones(len(plan.requests), dtype=torch.int32))
