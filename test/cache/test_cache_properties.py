"""Property tests of the paged KV cache against a naive float64 dense reference (CPU, torch backend).

Random sequences of keyframe / non-keyframe / reset / resize operations on small geometries: the visible set
and the attention output of every layer match the reference, a non-keyframe rolls back bit-exactly, and the
pools are re-allocated exactly when a live window increase needs more frame slots than they have (once per
such increase, counted in the stats; the committed K/V survive it: the outputs keep matching).
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from lingbot_map_ros.cache import KVCacheConfig, PagedKVCache
from lingbot_map_ros.cache.backends import merge_partial_attention


@dataclass
class Frame:
    """K/V of one frame: ``[num_layers, tokens_per_frame, H, D]`` float64."""

    k: torch.Tensor
    v: torch.Tensor


@dataclass
class DenseReference:
    """Naive model of the cache semantics (spec §4, docs/cache.md): frames kept whole in Python lists."""

    scale_frames: int
    sliding_window: int
    max_special_frames: int
    num_special: int
    anchors: list[Frame] = field(default_factory=list)
    window: list[Frame] = field(default_factory=list)
    specials: list[Frame] = field(default_factory=list)  # evicted frames, specials only, oldest first
    frames_stored: int = 0

    def reset(self) -> None:
        self.anchors, self.window, self.specials, self.frames_stored = [], [], [], 0

    def _evict_to_window(self) -> None:
        while len(self.window) > self.sliding_window:
            old = self.window.pop(0)
            if self.num_special:
                ns = self.num_special
                self.specials.append(Frame(old.k[:, :ns], old.v[:, :ns]))
        if not self.num_special:
            return
        while (
            self.specials
            and len(self.anchors) + len(self.window) + len(self.specials) > self.max_special_frames
        ):
            self.specials.pop(0)

    def _append(self, frame: Frame) -> None:
        if len(self.anchors) < self.scale_frames:
            self.anchors.append(frame)
        else:
            self.window.append(frame)
        self.frames_stored += 1

    def visible(self, layer: int, new: list[Frame]) -> tuple[torch.Tensor, torch.Tensor]:
        frames = self.specials + self.anchors + self.window + new
        k = torch.cat([f.k[layer] for f in frames]) if frames else None
        v = torch.cat([f.v[layer] for f in frames]) if frames else None
        return k, v

    def step(self, frames: list[Frame], keyframe: bool, q: torch.Tensor) -> tuple[torch.Tensor, int]:
        """One step; ``q`` ``[num_layers, T, H, D]``. Returns (output ``[L, T, H, D]``, visible key count)."""
        first = not self.anchors and not self.window
        if first:
            outputs = [self._attend(q[i], *self._cat(frames, i)) for i in range(q.shape[0])]
            visible = sum(f.k.shape[1] for f in frames)
            if keyframe:
                for f in frames:
                    self._append(f)
                self._evict_to_window()
            return torch.stack(outputs), visible
        if keyframe:
            self._append(frames[0])
            self._evict_to_window()
            new: list[Frame] = []
        else:
            new = frames
        outputs = [self._attend(q[i], *self.visible(i, new)) for i in range(q.shape[0])]
        return torch.stack(outputs), self.visible(0, new)[0].shape[0]

    def resize(self, sliding_window: int) -> None:
        self.sliding_window = sliding_window
        self._evict_to_window()

    @staticmethod
    def _cat(frames: list[Frame], layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.cat([f.k[layer] for f in frames]), torch.cat([f.v[layer] for f in frames])

    @staticmethod
    def _attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """Dense non-causal attention per head: q ``[T, H, D]``, k/v ``[N, H, D]`` float64."""
        scores = torch.einsum("thd,nhd->htn", q, k) / math.sqrt(q.shape[-1])
        return torch.einsum("htn,nhd->thd", scores.softmax(dim=-1), v)


# ----------------------------------------------------------------------------------------- property tests
def _frames(num_frames: int, config: KVCacheConfig, gen: torch.Generator) -> tuple[list[Frame], torch.Tensor]:
    """Random K/V frames (float64) and queries ``[L, T, H, D]``."""
    shape = (config.num_layers, config.tokens_per_frame, config.num_heads, config.head_dim)
    frames = [
        Frame(
            torch.randn(shape, generator=gen, dtype=torch.float64),
            torch.randn(shape, generator=gen, dtype=torch.float64),
        )
        for _ in range(num_frames)
    ]
    q = torch.randn(
        (config.num_layers, num_frames * config.tokens_per_frame, *shape[2:]),
        generator=gen,
        dtype=torch.float64,
    )
    return frames, q


def _committed_kv(cache: PagedKVCache) -> tuple[torch.Tensor, torch.Tensor]:
    start, stop = cache.layout.visible_range(cache.layout.state)
    return cache.k_pool[:, start:stop].clone(), cache.v_pool[:, start:stop].clone()


def _run_step(cache: PagedKVCache, ref: DenseReference, num_frames: int, keyframe: bool, gen) -> None:
    config = cache.config
    frames, q = _frames(num_frames, config, gen)
    state_before = copy.deepcopy(cache.layout.state)
    kv_before = _committed_kv(cache)
    expected, expected_visible = ref.step(frames, keyframe, q)
    step = cache.begin_step(num_frames, keyframe)
    assert step.visible_tokens == expected_visible
    for layer in range(config.num_layers):
        k = torch.cat([f.k[layer] for f in frames]).to(config.dtype)
        v = torch.cat([f.v[layer] for f in frames]).to(config.dtype)
        out = step.attend(layer, q[layer].to(config.dtype), k, v)
        assert out.dtype == config.dtype and out.shape == q[layer].shape
        error = (out.double() - expected[layer]).norm() / expected[layer].norm()
        assert error < TOLERANCE[config.dtype], (layer, float(error))
    cache.end_step(step)
    assert cache.frames_stored == ref.frames_stored
    if not keyframe:
        assert cache.layout.state == state_before
        kv_after = _committed_kv(cache)
        assert torch.equal(kv_after[0], kv_before[0]) and torch.equal(kv_after[1], kv_before[1])


TOLERANCE = {torch.float32: 1e-5, torch.bfloat16: 2e-2}

operations = st.lists(
    st.one_of(
        st.tuples(st.just("keyframe"), st.just(0)),
        st.tuples(st.just("keyframe"), st.just(0)),
        st.tuples(st.just("non_keyframe"), st.just(0)),
        st.tuples(st.just("reset"), st.just(0)),
        st.tuples(st.just("resize"), st.integers(1, 4)),
    ),
    min_size=1,
    max_size=30,
)


@settings(max_examples=60, deadline=None)
@given(
    scale_frames=st.integers(0, 3),
    max_window=st.integers(1, 4),
    window_fraction=st.floats(0, 1),
    num_special=st.integers(0, 2),
    patches=st.integers(1, 3),
    special_slack=st.integers(0, 4),
    first_frames=st.integers(1, 8),
    dtype=st.sampled_from([torch.float32, torch.bfloat16]),
    ops=operations,
    seed=st.integers(0, 2**31 - 1),
)
def test_random_operations_match_dense_reference(
    scale_frames,
    max_window,
    window_fraction,
    num_special,
    patches,
    special_slack,
    first_frames,
    dtype,
    ops,
    seed,
):
    config = KVCacheConfig(
        num_layers=2,
        num_heads=2,
        head_dim=4,
        patches_per_frame=patches,
        num_special=num_special,
        scale_frames=scale_frames,
        sliding_window=1 + round(window_fraction * (max_window - 1)),
        max_window=max_window,
        max_special_frames=scale_frames + max_window + special_slack,
        dtype=dtype,
    )
    cache = PagedKVCache(config, backend="torch")
    pointers = (cache.k_pool.data_ptr(), cache.v_pool.data_ptr(), cache.k_pool.numel())
    grows, pool_window = 0, config.sliding_window
    ref = DenseReference(scale_frames, config.sliding_window, config.max_special_frames, num_special)
    gen = torch.Generator().manual_seed(seed)
    for op, arg in ops:
        empty = cache.layout.state.committed_frames == 0
        if op in ("keyframe", "non_keyframe"):
            num_frames = min(first_frames, cache.layout.num_slots) if empty else 1
            _run_step(cache, ref, num_frames, op == "keyframe", gen)
        elif op == "reset":
            cache.reset()
            ref.reset()
        else:
            window = min(arg, max_window)
            cache.set_sliding_window(window)
            ref.resize(window)
            if window > pool_window:  # the only case where the pools are re-allocated
                grows, pool_window = grows + 1, window
                pointers = (cache.k_pool.data_ptr(), cache.v_pool.data_ptr(), cache.k_pool.numel())
        stats = cache.stats()
        assert stats.anchor_frames == len(ref.anchors) and stats.window_frames == len(ref.window)
        assert stats.evicted_special_frames == (len(ref.specials) if num_special else 0)
        assert stats.special_frames_visible <= config.max_special_frames
        assert (cache.k_pool.data_ptr(), cache.v_pool.data_ptr(), cache.k_pool.numel()) == pointers
        assert stats.pool_reallocations == grows
        assert stats.pool_window == pool_window
        # One owner: the cache's config is the live geometry after resizes and re-allocations.
        assert (cache.config.sliding_window, cache.config.pool_window) == (stats.sliding_window, pool_window)


@settings(max_examples=40, deadline=None)
@given(
    keys_a=st.integers(1, 40),
    keys_b=st.integers(1, 40),
    shift=st.floats(-8, 8),
    seed=st.integers(0, 2**31 - 1),
)
def test_merge_partial_attention_equals_attention_over_the_union(keys_a, keys_b, shift, seed):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(5, 2, 4, generator=gen, dtype=torch.float64)
    k = torch.randn(keys_a + keys_b, 2, 4, generator=gen, dtype=torch.float64)
    k[:keys_a] += shift  # one part dominates the softmax for large |shift|
    v = torch.randn(keys_a + keys_b, 2, 4, generator=gen, dtype=torch.float64)
    partial = []
    for part in (slice(0, keys_a), slice(keys_a, None)):
        scores = torch.einsum("thd,nhd->htn", q, k[part]) / math.sqrt(4)
        out = torch.einsum("htn,nhd->htd", scores.softmax(-1), v[part])
        partial += [out, scores.logsumexp(-1)]
    merged = merge_partial_attention(*partial).transpose(0, 1)
    expected = DenseReference._attend(q, k, v)
    assert float((merged - expected).norm() / expected.norm()) < 1e-5
