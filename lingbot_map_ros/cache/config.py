"""Configuration and diagnostics records of the paged KV cache (see docs/cache.md)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

StageHook = Callable[[str], object]
"""Public instrumentation of a step (benchmarks/stages.py, tests): called with a stage name as it starts.
The cache calls ``"attention"`` before a layer's attention kernel and ``"attention_done"`` after it
(``PagedKVCache.stage_hook``); the model's CUDA-graph path calls ``"graph"``, ``"attention"``, ``"heads"`` and
``"camera"`` (model/graphed.py). Set it on a stream with ``StreamState.stage_hook``; None: no calls."""

#: Frames whose special tokens stay visible by default: the reference keeps every frame's specials, and its
#: RoPE table ends at 1,024 frames, so 1,024 + 8 anchors changes nothing for any stream the reference can run.
DEFAULT_MAX_SPECIAL_FRAMES = 1032

#: Default live window of non-anchor keyframes and default pool capacity (upper bound of the window): the one
#: definition of both defaults (KVCacheConfig, StreamConfig, SessionConfig, the node's parameters, `run`,
#: benchmarks import them).
DEFAULT_SLIDING_WINDOW = 64
DEFAULT_MAX_WINDOW = 128


def check_sliding_window(value: object, max_window: int) -> int:
    """``value`` when it is a live window the cache accepts (an int in ``[1, max_window]``), else ValueError.

    The one range check of the sliding window: the records and the live resize that take a window in
    (``KVCacheConfig``, ``PagedKVCache.set_sliding_window``, ``SessionConfig``, a stream without a cache yet)
    call it; everything between them passes the value on.
    """
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= max_window:
        raise ValueError(f"sliding_window must be an int in [1, max_window={max_window}], got {value!r}")
    return value


@dataclass(frozen=True)
class KVCacheConfig:
    """Geometry of the two-stream cache of the global-attention layers.

    Token layout of one frame (``num_special + patches_per_frame`` tokens): the ``num_special`` special tokens
    (camera, registers, scale) first, then the patch tokens in row-major order.
    """

    num_layers: int = 24
    num_heads: int = 16
    head_dim: int = 64
    patches_per_frame: int = 999
    num_special: int = 6
    scale_frames: int = 8
    #: Live window of non-anchor frames. A cache's ``config`` is replaced on a live resize
    #: (``PagedKVCache.set_sliding_window``), so ``cache.config.sliding_window`` is always the live value.
    sliding_window: int = DEFAULT_SLIDING_WINDOW
    max_window: int = DEFAULT_MAX_WINDOW
    max_special_frames: int = DEFAULT_MAX_SPECIAL_FRAMES
    dtype: torch.dtype = torch.float32
    device: torch.device = torch.device("cpu")
    #: Window frames the pool is allocated for (None: ``sliding_window``). A live window increase past it
    #: re-allocates the pool once for the new window (logged, counted in :class:`KVCacheStats`); the cache's
    #: ``config`` then holds the new value.
    pool_window: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "device", torch.device(self.device))
        for name in ("num_layers", "num_heads", "head_dim", "patches_per_frame", "max_window"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"KVCacheConfig.{name} must be an int >= 1, got {value!r}")
        for name in ("num_special", "scale_frames"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 0:
                raise ValueError(f"KVCacheConfig.{name} must be an int >= 0, got {value!r}")
        check_sliding_window(self.sliding_window, self.max_window)
        if self.pool_window is not None and not self.sliding_window <= self.pool_window <= self.max_window:
            raise ValueError(
                f"KVCacheConfig.pool_window must be in [sliding_window={self.sliding_window}, "
                f"max_window={self.max_window}] or None, got {self.pool_window!r}"
            )
        if self.max_special_frames < self.scale_frames + self.max_window:
            raise ValueError(
                "KVCacheConfig.max_special_frames must be >= scale_frames + max_window "
                f"({self.scale_frames + self.max_window}) so that no cached frame loses its specials, "
                f"got {self.max_special_frames}"
            )
        if self.dtype not in (torch.float32, torch.bfloat16, torch.float16):
            raise ValueError(f"KVCacheConfig.dtype must be float32, bfloat16 or float16, got {self.dtype}")

    @property
    def initial_pool_window(self) -> int:
        """Window frames the pool is allocated for: ``pool_window``, or ``sliding_window`` when None (a live
        cache's ``config`` always sets ``pool_window``, so there it is the pool's window now)."""
        return self.sliding_window if self.pool_window is None else self.pool_window

    @property
    def tokens_per_frame(self) -> int:
        """Tokens of one frame: specials then patches."""
        return self.num_special + self.patches_per_frame


@dataclass(frozen=True)
class KVCacheStats:
    """Snapshot of the cache for /diagnostics (committed state, between steps)."""

    backend: str
    frames_stored: int
    anchor_frames: int
    window_frames: int
    sliding_window: int
    max_window: int
    free_window_slots: int
    evicted_special_frames: int
    special_frames_visible: int
    max_special_frames: int
    visible_tokens: int
    pool_tokens_per_layer: int
    pool_bytes: int
    pool_window: int  # window frames the pool holds now (grows on a live increase past it)
    pool_reallocations: int  # re-allocations of the pool since it was made (live window increases)
