"""FlashInfer backend: ``BatchPrefillWithPagedKVCacheWrapper`` over the pool, planned once per step.

The pool ``[pool_tokens, H, D]`` is read as a paged cache of page size 1 (``[pool_tokens, 1, H, D]``, NHD), so
the page table lists exactly the visible tokens: no page is padded and nothing outside the visible set is
attended. The page table of the cache's contiguous visible range is a slice of a device ``arange`` made once;
:meth:`FlashInferAttention.plan_pages` takes any page list (used by the tests with shuffled orders).
flashinfer is imported here only, when this backend is built (it is not installed on CPU machines).
"""

from __future__ import annotations

import math

import torch

from lingbot_map_ros.cache.config import KVCacheConfig

WORKSPACE_BYTES = 128 * 1024 * 1024


class PagedPrefill:
    """A ``BatchPrefillWithPagedKVCacheWrapper`` over a page-size-1 view of a pool ``[tokens, H, D]`` (NHD):
    the checks, the plan of a set of requests and the run shared by the single-stream and the batched backend.
    """

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

    def _plan_requests(
        self, qo_indptr: list[int], kv_indptr: list[int], pages: torch.Tensor, last_page_len: torch.Tensor
    ) -> None:
        """Plan request i: query rows ``qo_indptr[i]:qo_indptr[i+1]`` over the pages
        ``pages[kv_indptr[i]:kv_indptr[i+1]]`` (int32 pool token ids on the device; page size 1)."""
        config = self._config
        self._wrapper.plan(
            torch.tensor(qo_indptr, dtype=torch.int32),
            torch.tensor(kv_indptr, dtype=torch.int32),
            pages,
            last_page_len,
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


class FlashInferAttention(PagedPrefill):
    """Paged prefill attention of one query block over a page-size-1 view of the pool."""

    def __init__(self, config: KVCacheConfig, pool_tokens: int, kernel: str = "auto") -> None:
        super().__init__(config, kernel)
        self._page_ids = torch.arange(pool_tokens, dtype=torch.int32, device=config.device)
        self._last_page_len = torch.ones(1, dtype=torch.int32)

    def plan(self, start: int, stop: int, num_queries: int, frames_start: int, specials_capped: bool) -> None:
        self.plan_pages(self._page_ids[start:stop], num_queries)

    def plan_pages(self, pages: torch.Tensor, num_queries: int) -> None:
        """Plan attention of ``num_queries`` queries over the pool tokens ``pages`` (int32, any order)."""
        if pages.dtype != torch.int32 or pages.ndim != 1 or pages.numel() == 0:
            raise ValueError(
                f"pages must be a non-empty 1-D int32 tensor, got {pages.dtype} {tuple(pages.shape)}"
            )
        pages = pages.to(self._config.device)
        self._plan_requests([0, num_queries], [0, pages.numel()], pages, self._last_page_len)
