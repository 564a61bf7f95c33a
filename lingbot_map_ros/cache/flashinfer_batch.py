"""FlashInfer execution of a :class:`~lingbot_map_ros.cache.batch.BatchPlan`: one paged prefill per layer.

The shared pool ``[capacity, H, D]`` is read as a paged cache of page size 1 (``[capacity, 1, H, D]``, NHD);
request i (stream i of the batch) has query rows ``qo_indptr[i]:qo_indptr[i+1]`` and pages = its visible
tokens ``[key_start, key_stop)`` (a slice of one device ``arange``). Planned once per batched step, run per
layer. flashinfer is imported here only (not installed on CPU machines).
"""

from __future__ import annotations

import math

import torch

from lingbot_map_ros.cache.batch import BatchPlan
from lingbot_map_ros.cache.config import KVCacheConfig
from lingbot_map_ros.cache.flashinfer_backend import WORKSPACE_BYTES


class FlashInferBatchAttention:
    """``BatchPrefillWithPagedKVCacheWrapper`` with one request per stream over the shared pool."""

    name = "flashinfer"

    def __init__(self, config: KVCacheConfig, kernel: str = "auto") -> None:
        if config.device.type != "cuda":
            raise ValueError(f"backend 'flashinfer' needs a CUDA device, got {config.device}")
        if config.dtype not in (torch.bfloat16, torch.float16):
            raise ValueError(f"backend 'flashinfer' needs dtype bfloat16 or float16, got {config.dtype}")
        try:
            import flashinfer
        except ImportError as error:
            raise ValueError(
                "backend 'flashinfer' requested but the flashinfer package is not installed"
            ) from error
        self._config = config
        workspace = torch.empty(WORKSPACE_BYTES, dtype=torch.uint8, device=config.device)
        self._wrapper = flashinfer.BatchPrefillWithPagedKVCacheWrapper(
            workspace, kv_layout="NHD", backend=kernel
        )
        self._page_ids = torch.arange(0, dtype=torch.int32, device=config.device)

    def plan(self, plan: BatchPlan) -> None:
        config = self._config
        stop = max(r.key_stop for r in plan.requests)
        if self._page_ids.numel() < stop:  # grows with the shared pool, never per step in steady state
            self._page_ids = torch.arange(stop, dtype=torch.int32, device=config.device)
        pages = torch.cat([self._page_ids[r.key_start : r.key_stop] for r in plan.requests])
        qo_indptr = [0] + [r.query_stop for r in plan.requests]
        kv_indptr = [0]
        for r in plan.requests:
            kv_indptr.append(kv_indptr[-1] + r.num_keys)
        self._wrapper.plan(
            torch.tensor(qo_indptr, dtype=torch.int32),
            torch.tensor(kv_indptr, dtype=torch.int32),
            pages,
            torch.ones(len(plan.requests), dtype=torch.int32),
            num_qo_heads=config.num_heads,
            num_kv_heads=config.num_heads,
            head_dim_qk=config.head_dim,
            page_size=1,
            causal=False,
            pos_encoding_mode="NONE",
            sm_scale=1.0 / math.sqrt(config.head_dim),
            q_data_type=config.dtype,
            kv_data_type=config.dtype,
        )

    def run(self, q: torch.Tensor, k_pool: torch.Tensor, v_pool: torch.Tensor) -> torch.Tensor:
        shape = (k_pool.shape[0], 1, k_pool.shape[1], k_pool.shape[2])
        return self._wrapper.run(q.contiguous(), (k_pool.view(shape), v_pool.view(shape)))
