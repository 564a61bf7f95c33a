"""N streams over one shared KV pool against N independent single-stream caches (CPU, torch, bit-exact).

Random interleavings of batched steps over random subsets of streams, single-stream steps, keyframe and
non-keyframe roll backs, resets, live window resizes (with region growth and moves) and re-creations at
another resolution (a new region): every stream's attention output of every layer, its stats and its
committed K/V equal those of its own single-stream ``PagedKVCache`` fed the same tensors, and an operation
on one stream leaves every other stream's region bytes untouched.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from lingbot_map_ros.cache import KVCacheConfig, PagedKVCache
from lingbot_map_ros.cache.batch import begin_batch, end_batch
from lingbot_map_ros.cache.shared_pool import PooledKVCache, SharedKVPool

LAYERS, HEADS, DIM = 2, 2, 4


def _config(patches: int, window: int = 2) -> KVCacheConfig:
    return KVCacheConfig(
        num_layers=LAYERS, num_heads=HEADS, head_dim=DIM, patches_per_frame=patches, num_special=2,
        scale_frames=2, sliding_window=window, max_window=5, max_special_frames=9,
    )  # fmt: skip


class Streams:
    """The pooled caches and their independent references, fed identical random tensors."""

    def __init__(self, n: int, seed: int) -> None:
        self.pool = SharedKVPool(LAYERS, HEADS, DIM)
        self.gen = torch.Generator().manual_seed(seed)
        self.pooled: list[PooledKVCache] = []
        self.refs: list[PagedKVCache] = []
        for i in range(n):
            self.pooled.append(PooledKVCache(self.pool, _config(3 + i)))
            self.refs.append(PagedKVCache(_config(3 + i)))

    def _tokens(self, cache: PagedKVCache) -> tuple[int, torch.Tensor]:
        frames = cache.config.scale_frames if cache.frames_stored == 0 else 1
        tokens = frames * cache.config.tokens_per_frame
        qkv = torch.randn(3, LAYERS, tokens, HEADS, DIM, generator=self.gen)
        return frames, qkv

    def batch(self, streams: list[int], keyframes: list[bool]) -> None:
        inputs = [self._tokens(self.refs[i]) for i in streams]
        # a first step must be a keyframe (anchor phase)
        keyframes = [kf or self.refs[i].frames_stored == 0 for i, kf in zip(streams, keyframes, strict=True)]
        step = begin_batch(
            self.pool, [self.pooled[i] for i in streams], keyframes, [frames for frames, _ in inputs]
        )
        ref_steps = [
            self.refs[i].begin_step(frames, kf)
            for i, (frames, _), kf in zip(streams, inputs, keyframes, strict=True)
        ]
        for layer in range(LAYERS):
            q, k, v = (torch.cat([qkv[j][layer] for _, qkv in inputs]) for j in range(3))
            out = step.attend(layer, q, k, v)
            expected = torch.cat(
                [
                    s.attend(layer, *(qkv[j][layer] for j in range(3)))
                    for s, (_, qkv) in zip(ref_steps, inputs, strict=True)
                ]
            )
            assert torch.equal(out, expected)
        end_batch(step)
        for i, s in zip(streams, ref_steps, strict=True):
            self.refs[i].end_step(s)

    def single(self, i: int, keyframe: bool) -> None:
        frames, qkv = self._tokens(self.refs[i])
        keyframe = keyframe or self.refs[i].frames_stored == 0
        steps = [c.begin_step(frames, keyframe) for c in (self.pooled[i], self.refs[i])]
        for layer in range(LAYERS):
            outs = [s.attend(layer, qkv[0][layer], qkv[1][layer], qkv[2][layer]) for s in steps]
            assert torch.equal(outs[0], outs[1])
        self.pooled[i].end_step(steps[0])
        self.refs[i].end_step(steps[1])

    def recreate(self, i: int, patches: int) -> None:
        """A resolution change: the stream's cache is replaced (its region freed, a new one allocated)."""
        self.pooled[i].close()
        self.pooled[i] = PooledKVCache(self.pool, _config(patches))
        self.refs[i] = PagedKVCache(_config(patches))

    def others_bytes(self, i: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
        return [(c.k_pool.clone(), c.v_pool.clone()) for j, c in enumerate(self.pooled) if j != i]

    def check(self) -> None:
        regions = sorted((c.region.start, c.region.stop) for c in self.pooled)
        assert all(a[1] <= b[0] for a, b in zip(regions, regions[1:], strict=False)), regions
        for pooled, ref in zip(self.pooled, self.refs, strict=True):
            assert pooled.stats() == ref.stats()
            start, stop = ref.layout.visible_range(ref.layout.state)
            assert torch.equal(pooled.k_pool[:, start:stop], ref.k_pool[:, start:stop])
            assert torch.equal(pooled.v_pool[:, start:stop], ref.v_pool[:, start:stop])


OPS = st.one_of(
    st.tuples(
        st.just("batch"),
        st.lists(st.booleans(), min_size=3, max_size=3),
        st.lists(st.booleans(), min_size=3, max_size=3),
    ),
    st.tuples(st.just("single"), st.integers(0, 2), st.booleans()),
    st.tuples(st.just("reset"), st.integers(0, 2)),
    st.tuples(st.just("resize"), st.integers(0, 2), st.integers(1, 5)),
    st.tuples(st.just("recreate"), st.integers(0, 2), st.integers(1, 6)),
)


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 3), ops=st.lists(OPS, min_size=1, max_size=40), seed=st.integers(0, 2**16))
def test_random_interleavings_match_independent_single_stream_caches(n: int, ops: list, seed: int) -> None:
    s = Streams(n, seed)
    for op in ops:
        kind = op[0]
        if kind == "batch":
            streams = [i for i in range(n) if op[1][i]] or [0]
            s.batch(streams, [op[2][i] for i in streams])
            s.check()
            continue
        i = op[1] % n
        before = s.others_bytes(i)
        if kind == "single":
            s.single(i, op[2])
        elif kind == "reset":
            s.pooled[i].reset()
            s.refs[i].reset()
        elif kind == "resize":
            s.pooled[i].set_sliding_window(op[2])
            s.refs[i].set_sliding_window(op[2])
        else:
            s.recreate(i, op[2])
        # the pool may have grown (new tensors): compare the other streams' regions by content
        for (k0, v0), (k1, v1) in zip(before, s.others_bytes(i), strict=True):
            assert torch.equal(k0, k1) and torch.equal(v0, v1)
        s.check()


def test_regions_are_reused_and_the_pool_grows_only_when_nothing_fits() -> None:
    pool = SharedKVPool(LAYERS, HEADS, DIM)
    a, b = PooledKVCache(pool, _config(3)), PooledKVCache(pool, _config(4))
    assert (a.region.start, b.region.start) == (0, a.region.stop)
    capacity = pool.capacity
    a.close()
    c = PooledKVCache(pool, _config(3))  # fits a's freed range
    assert c.region.start == 0 and pool.capacity == capacity and pool.stats().regions == 2
    del c  # garbage collection frees the region too
    assert pool.stats().regions == 1
    b.set_sliding_window(5)  # grows b past its allocation: in place at the end of the pool
    assert b.stats().pool_reallocations == 1 and pool.stats().used_tokens == b.region.tokens


def test_batch_rejects_foreign_and_duplicate_caches() -> None:
    pool = SharedKVPool(LAYERS, HEADS, DIM)
    a = PooledKVCache(pool, _config(3))
    other = PooledKVCache(SharedKVPool(LAYERS, HEADS, DIM), _config(3))
    with pytest.raises(ValueError, match="this pool"):
        begin_batch(pool, [a, other], [True, True])
    with pytest.raises(ValueError, match="twice"):
        begin_batch(pool, [a, a], [True, True])
    with pytest.raises(ValueError, match="differ from the pool"):
        PooledKVCache(pool, KVCacheConfig(num_layers=LAYERS, num_heads=HEADS, head_dim=8))
    assert a.begin_step(2, True)  # no step was left open by the failed batches


def test_a_pool_expecting_n_streams_grows_once_for_all_of_them() -> None:
    pool = SharedKVPool(LAYERS, HEADS, DIM, streams=3)
    caches = [PooledKVCache(pool, _config(3)) for _ in range(3)]
    assert pool.stats().reallocations == 0 and pool.capacity == 3 * caches[0].region.tokens
    assert [c.region.start for c in caches] == [0, caches[0].region.stop, caches[1].region.stop]


def test_a_batch_that_fails_to_begin_leaves_every_stream_as_it_was() -> None:
    pool = SharedKVPool(LAYERS, HEADS, DIM)
    a, b = PooledKVCache(pool, _config(3)), PooledKVCache(pool, _config(3))
    for cache in (a, b):
        step = cache.begin_step(2, True)
        for layer in range(LAYERS):
            step.write(layer, *torch.randn(2, 2 * cache.config.tokens_per_frame, HEADS, DIM))
        cache.end_step(step)
    open_step = b.begin_step(1, True)  # b has a step open: the batch cannot begin it
    with pytest.raises(RuntimeError, match="while a step is open"):
        begin_batch(pool, [a, b], [True, True])
    assert a.frames_stored == 2 and a.begin_step(1, True)  # a's keyframe step was aborted, a not reset
    b.abort_step(open_step)
