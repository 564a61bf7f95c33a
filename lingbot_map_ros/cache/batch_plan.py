"""The description of one batched step that every batch backend executes: `BatchRequest` (one stream's
query rows and visible key range of the shared pool), `BatchPlan` (the requests in batch order) and the
`BatchBackend` protocol. A leaf of cache/: cache/batch.py plans it, cache/flashinfer_batch.py and
`TorchBatchAttention` (cache/batch.py) execute it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch


@dataclass(frozen=True)
class BatchRequest:
    """One stream's share of a batched step.

    Query rows ``[query_start, query_stop)`` of the batch attend over shared-pool tokens
    ``[key_start, key_stop)``; ``[key_start, frames_start)`` is the stream's special stream, the rest its
    frame slots. ``specials_capped``: its special stream is at ``max_special_frames`` (steady key count).
    """

    query_start: int
    query_stop: int
    key_start: int
    frames_start: int
    key_stop: int
    specials_capped: bool

    @property
    def num_queries(self) -> int:
        return self.query_stop - self.query_start

    @property
    def num_keys(self) -> int:
        return self.key_stop - self.key_start


@dataclass(frozen=True)
class BatchPlan:
    """The requests of one batched step, in batch order (shared by all layers)."""

    requests: tuple[BatchRequest, ...]

    @property
    def num_queries(self) -> int:
        return self.requests[-1].query_stop if self.requests else 0


class BatchBackend(Protocol):
    """Executes a :class:`BatchPlan` over one layer of the shared pool."""

    name: str

    def plan(self, plan: BatchPlan) -> None: ...

    def run(self, q: torch.Tensor, k_pool: torch.Tensor, v_pool: torch.Tensor) -> torch.Tensor:
        """q ``[sum T_i, H, D]``; pools ``[capacity, H, D]`` -> ``[sum T_i, H, D]``."""
