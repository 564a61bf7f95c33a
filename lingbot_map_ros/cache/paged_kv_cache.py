"""The two-stream paged KV cache of the global-attention layers.

Contract: docs/architecture.md; design: docs/cache.md. Pools ``k_pool`` and ``v_pool``, each
``[num_layers, pool_tokens, H, D]`` in the cache dtype on the cache device, allocated for the configured
window (``KVCacheConfig.pool_window``, default ``sliding_window``); a live window increase past that
re-allocates them once for the new window, between steps (logged, ``KVCacheStats.pool_reallocations``).
:mod:`lingbot_map_ros.cache.layout` decides where every frame lives so that the visible keys of a step are
one contiguous token range of the pool.
"""

from __future__ import annotations

import logging

import torch

from lingbot_map_ros.cache.backends import AttentionBackend, make_backend
from lingbot_map_ros.cache.config import KVCacheConfig, KVCacheStats, StageHook, check_sliding_window
from lingbot_map_ros.cache.layout import CacheLayout, LayoutState, StepPlan, TokenCopy

_LOG = logging.getLogger(__name__)


class CacheStep:
    """One frame step: the visible set, planned once, used by every layer's :meth:`attend`.

    Made by :meth:`PagedKVCache.begin_step`, closed by :meth:`PagedKVCache.end_step`.
    """

    def __init__(self, cache: PagedKVCache, plan: StepPlan, committed: LayoutState) -> None:
        self._cache = cache
        self.plan = plan
        self._committed = committed
        self._attended = [False] * cache.config.num_layers
        self.closed = False

    @property
    def num_frames(self) -> int:
        return self.plan.num_frames

    @property
    def keyframe(self) -> bool:
        return self.plan.keyframe

    @property
    def num_tokens(self) -> int:
        """Query/new-key tokens of this step: ``num_frames * tokens_per_frame``."""
        return self.plan.num_frames * self._cache.config.tokens_per_frame

    @property
    def visible_tokens(self) -> int:
        """Keys every query of this step attends to (new frames included)."""
        return self.plan.visible_tokens

    def attend(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """Store ``k``/``v`` of the new frames for ``layer`` and attend ``q`` over the visible set.

        q, k, v: ``[T, H, D]``, ``T = num_frames * (num_special + patches_per_frame)``, frame-major with each
        frame's special tokens first, in the cache dtype and on the cache device. Returns ``[T, H, D]``.
        """
        cache = self._cache
        cache._check_tokens("q", q, self.num_tokens)
        self.write(layer, k, v)
        hook = cache.stage_hook
        if hook is not None:
            hook("attention")
        out = cache.backend.run(q, cache.k_pool[layer], cache.v_pool[layer])
        if hook is not None:
            hook("attention_done")
        return out

    def write(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> None:
        """Store ``k``/``v`` (``[T, H, D]``) of the new frames for ``layer`` without attending.

        :meth:`attend` is this plus the attention; on its own it fast-forwards a stream (benchmarks, warm-up).
        """
        cache = self._cache
        if self.closed:
            raise RuntimeError("attend()/write() on a step that has ended; call begin_step() for a new one")
        if not isinstance(layer, int) or not 0 <= layer < cache.config.num_layers:
            raise ValueError(f"layer must be an int in [0, {cache.config.num_layers}), got {layer!r}")
        if self._attended[layer]:
            raise RuntimeError(f"layer {layer} already attended in this step")
        cache._check_tokens("k", k, self.num_tokens)
        cache._check_tokens("v", v, self.num_tokens)
        k_pool, v_pool = cache.k_pool[layer], cache.v_pool[layer]
        _apply_copies(k_pool, v_pool, self.plan.copies)
        write = slice(self.plan.write_start, self.plan.write_start + self.num_tokens)
        k_pool[write].copy_(k)
        v_pool[write].copy_(v)
        self._attended[layer] = True

    def layers_attended(self) -> int:
        return sum(self._attended)


class PagedKVCache:
    """Bounded two-stream KV cache: anchors + a sliding window of patch pages + a capped special stream."""

    def __init__(self, config: KVCacheConfig, backend: str = "auto") -> None:
        if not isinstance(config, KVCacheConfig):
            raise ValueError(f"config must be a KVCacheConfig, got {type(config).__name__}")
        self.layout = CacheLayout(config)
        self._allocate_pools()
        self._backend_name = backend
        self.backend: AttentionBackend = make_backend(backend, config, self.layout.pool_tokens)
        self._open_step: CacheStep | None = None
        self.reallocations = 0
        self.stage_hook: StageHook | None = None  # instrumentation (cache/config.py)

    def _allocate_pools(self) -> None:
        """Allocate ``k_pool``/``v_pool`` ``[num_layers, pool_tokens, H, D]`` (zeros) for the layout."""
        config = self.config
        shape = (config.num_layers, self.layout.pool_tokens, config.num_heads, config.head_dim)
        self.k_pool = torch.zeros(shape, dtype=config.dtype, device=config.device)
        self.v_pool = torch.zeros(shape, dtype=config.dtype, device=config.device)

    # --------------------------------------------------------------------------------------- properties
    @property
    def frames_stored(self) -> int:
        """Frames appended since the last reset (= temporal RoPE index of the next frame)."""
        return self.layout.state.frames_stored

    @property
    def config(self) -> KVCacheConfig:
        """The live geometry (``sliding_window`` and ``pool_window`` follow live resizes)."""
        return self.layout.config

    @property
    def sliding_window(self) -> int:
        return self.config.sliding_window

    @property
    def pool_bytes(self) -> int:
        return 2 * self.k_pool.numel() * self.k_pool.element_size()

    # --------------------------------------------------------------------------------------- steps
    def begin_step(self, num_frames: int, keyframe: bool, plan_backend: bool = True) -> CacheStep:
        """Reserve slots for ``num_frames`` new frames, decide the visible set and plan the backend once.

        Keyframe: append, then evict the oldest window frames so the window holds <= ``sliding_window`` frames
        (the new one included), then attend. Non-keyframe: append with eviction deferred; rolled back at
        :meth:`end_step`. On an empty cache (anchor phase) the visible set is exactly the new frames.
        ``plan_backend=False``: a batched step of several streams attends instead (cache/batch.py); this
        step then only writes (:meth:`CacheStep.write`).
        """
        if self._open_step is not None:
            raise RuntimeError("begin_step() while a step is open; call end_step() first")
        if not isinstance(keyframe, bool):
            raise ValueError(f"keyframe must be a bool, got {keyframe!r}")
        plan, committed = self.layout.plan_step(num_frames, keyframe)
        tokens = plan.num_frames * self.config.tokens_per_frame
        if plan_backend:
            capped = self.specials_capped(committed)
            self.backend.plan(plan.visible_start, plan.visible_stop, tokens, self.layout.frame_base, capped)
        step = CacheStep(self, plan, committed)
        self._open_step = step
        return step

    def abort_step(self, step: CacheStep) -> None:
        """Close the open ``step`` before any layer wrote into the pools: the committed state is untouched
        (a batch whose other stream failed to begin, cache/batch.py)."""
        if step is not self._open_step or step.layers_attended():
            raise RuntimeError("abort_step() needs the open step of this cache, before any layer wrote")
        self._open_step = None
        step.closed = True

    def specials_capped(self, state: LayoutState) -> bool:
        """Whether the special stream of ``state`` is at ``max_special_frames`` (steady key count)."""
        return state.committed_frames + len(state.special_frame) >= self.config.max_special_frames

    def end_step(self, step: CacheStep) -> None:
        """Keyframe: commit (deferred evictions done). Non-keyframe: roll back to the state before begin."""
        if step is not self._open_step:
            raise RuntimeError("end_step() with a step that is not the open step of this cache")
        self._open_step = None
        step.closed = True
        if not step.keyframe:
            return
        attended = step.layers_attended()
        if attended != self.config.num_layers:
            self.reset()
            raise RuntimeError(
                f"keyframe step ended after {attended} of {self.config.num_layers} layers attended; "
                "the cache was reset because its pool is only partly updated"
            )
        _apply_copies(self.k_pool, self.v_pool, step.plan.commit_copies, layer_dim=True)
        self.layout.state = step._committed

    def reset(self) -> None:
        """Forget every frame (no reallocation); an open step is abandoned."""
        if self._open_step is not None:
            self._open_step.closed = True
            self._open_step = None
        self.layout.state = LayoutState()

    def set_sliding_window(self, sliding_window: int) -> None:
        """Live resize: shrinking evicts the oldest window frames at once; growing fills with later
        keyframes (and re-allocates the pool once if the new window needs more slots than it has)."""
        if self._open_step is not None:
            raise RuntimeError("set_sliding_window() while a step is open")
        check_sliding_window(sliding_window, self.config.max_window)
        if sliding_window > self.config.initial_pool_window:
            self._grow_pool(sliding_window)
        copies, state = self.layout.plan_resize(sliding_window)
        # The pools may be inference tensors (first allocated inside the model's inference_mode step).
        with torch.inference_mode():
            _apply_copies(self.k_pool, self.v_pool, copies, layer_dim=True)
        self.layout.resize(sliding_window, state)

    def _grow_pool(self, pool_window: int) -> None:
        """Re-allocate both pools with frame slots for a window of ``pool_window`` frames (between steps).

        Existing tokens keep their addresses (the special stream and the frame slots start where they did), so
        the committed state is copied as is. K and V are grown one after the other: the transient extra memory
        is one old pool, not two.
        """
        old_bytes = self.pool_bytes
        old_window, old_tokens = self.config.initial_pool_window, self.layout.pool_tokens
        self.layout.grow(pool_window)
        self._reallocate_pools(old_tokens)
        self.backend = make_backend(self._backend_name, self.config, self.layout.pool_tokens)
        self.reallocations += 1
        _LOG.warning(
            "KV cache pool re-allocated for a window of %d frames (was %d): %.2f GiB -> %.2f GiB "
            "(re-allocation %d)",
            pool_window,
            old_window,
            old_bytes / 2**30,
            self.pool_bytes / 2**30,
            self.reallocations,
        )

    def _reallocate_pools(self, old_tokens: int) -> None:
        """New pools of ``layout.pool_tokens`` tokens holding the first ``old_tokens`` tokens of the old."""
        config = self.config
        shape = (config.num_layers, self.layout.pool_tokens, config.num_heads, config.head_dim)
        for name in ("k_pool", "v_pool"):
            old = getattr(self, name)
            # Same kind of tensor as before: inference tensors when the model's step allocated them.
            with torch.inference_mode(old.is_inference()):
                new = torch.empty(shape, dtype=config.dtype, device=config.device)
                new[:, :old_tokens].copy_(old)
                new[:, old_tokens:].zero_()
                setattr(self, name, new)
                del old

    def stats(self) -> KVCacheStats:
        state, config = self.layout.state, self.config
        start, stop = self.layout.visible_range(state)
        return KVCacheStats(
            backend=self.backend.name,
            frames_stored=state.frames_stored,
            anchor_frames=state.anchors,
            window_frames=state.window_frames,
            sliding_window=self.config.sliding_window,
            max_window=config.max_window,
            free_window_slots=self.config.initial_pool_window - state.window_frames,
            evicted_special_frames=len(state.special_frame),
            special_frames_visible=state.committed_frames + len(state.special_frame),
            max_special_frames=config.max_special_frames,
            visible_tokens=stop - start,
            pool_tokens_per_layer=self.layout.pool_tokens,
            pool_bytes=self.pool_bytes,
            pool_window=self.config.initial_pool_window,
            pool_reallocations=self.reallocations,
        )

    # --------------------------------------------------------------------------------------- validation
    def _check_tokens(self, name: str, tensor: torch.Tensor, num_tokens: int) -> None:
        config = self.config
        expected = (num_tokens, config.num_heads, config.head_dim)
        if not isinstance(tensor, torch.Tensor):
            raise ValueError(
                f"{name} must be a torch.Tensor of shape {expected}, got {type(tensor).__name__}"
            )
        if tuple(tensor.shape) != expected:
            raise ValueError(
                f"{name} must have shape [T, H, D] = {expected} (T = num_frames x {config.tokens_per_frame} "
                f"tokens), got {tuple(tensor.shape)}"
            )
        if tensor.dtype != config.dtype:
            raise ValueError(f"{name} must have dtype {config.dtype} (the cache dtype), got {tensor.dtype}")
        if tensor.device.type != config.device.type or (
            config.device.index is not None and tensor.device.index != config.device.index
        ):
            raise ValueError(f"{name} must be on device {config.device}, got {tensor.device}")


def _apply_copies(
    k_pool: torch.Tensor,
    v_pool: torch.Tensor,
    copies: tuple[TokenCopy, ...] | list[TokenCopy],
    layer_dim: bool = False,
) -> None:
    """Run token copies in order on one layer's pools ``[N, H, D]`` or, with ``layer_dim``, on all layers."""
    for c in copies:
        if layer_dim:
            k_pool[:, c.dst : c.dst + c.length].copy_(k_pool[:, c.src : c.src + c.length])
            v_pool[:, c.dst : c.dst + c.length].copy_(v_pool[:, c.src : c.src + c.length])
        else:
            k_pool[c.dst : c.dst + c.length].copy_(k_pool[c.src : c.src + c.length])
            v_pool[c.dst : c.dst + c.length].copy_(v_pool[c.src : c.src + c.length])
