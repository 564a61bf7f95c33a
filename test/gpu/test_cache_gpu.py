"""FlashInfer vs torch backends on CUDA at 518x378 token counts (999 patches + 6 specials), window 64 + 8
anchors.

Skipped without CUDA (and the FlashInfer checks without the flashinfer package). Run on the H200:
``python3 -m pytest -q -m gpu test/gpu/test_cache_gpu.py``.
"""

from __future__ import annotations

import importlib.util

import pytest
import torch
import torch.nn.functional as F
from cache_steps import run_step

from lingbot_map_ros.cache import KVCacheConfig, PagedKVCache

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]
needs_flashinfer = pytest.mark.skipif(
    importlib.util.find_spec("flashinfer") is None, reason="needs the flashinfer package"
)

TOKENS = 1005
FRAMES = 400  # streamed keyframes: window slots reused out of order, special stream capped and reshuffled


def _config() -> KVCacheConfig:
    return KVCacheConfig(
        num_layers=2,
        patches_per_frame=999,
        scale_frames=8,
        sliding_window=64,
        max_window=128,
        max_special_frames=8 + 128 + 60,
        dtype=torch.bfloat16,
        device=torch.device("cuda"),
    )


def _stream(caches: list[PagedKVCache], frames: int, seed: int) -> None:
    """Fast-forward identical random frames into every cache (anchor phase, then keyframes)."""
    for cache in caches:
        gen = torch.Generator(device="cuda").manual_seed(seed)
        for index in range(frames):
            run_step(cache, cache.config.scale_frames if index == 0 else 1, attend=False, generator=gen)


def _dense_fp32(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Reference in float32 (float64 inputs stay float64): q ``[T, H, D]``, k/v ``[N, H, D]`` -> ``[T, H,
    D]``."""
    dtype = torch.float64 if q.dtype == torch.float64 else torch.float32
    out = F.scaled_dot_product_attention(*(x.to(dtype).transpose(0, 1) for x in (q, k, v)))
    return out.transpose(0, 1)


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.double() - b.double()).norm() / b.double().norm())


@needs_flashinfer
@pytest.mark.parametrize("keyframe", [True, False])
def test_flashinfer_matches_torch_and_fp32_reference(keyframe):
    config = _config()
    caches = [PagedKVCache(config, backend="torch"), PagedKVCache(config, backend="flashinfer")]
    _stream(caches, FRAMES, seed=1)
    stats = caches[0].stats()
    assert stats.window_frames == 64 and stats.special_frames_visible == config.max_special_frames
    gen = torch.Generator(device="cuda").manual_seed(2)
    qkv = torch.randn(
        (3, config.num_layers, TOKENS, 16, 64), generator=gen, device="cuda", dtype=torch.bfloat16
    )
    steps = [cache.begin_step(1, keyframe=keyframe) for cache in caches]
    assert caches[0].backend.fused  # special stream at its cap: the key count is steady, one fused cuDNN call
    assert (
        steps[0].visible_tokens
        == steps[1].visible_tokens
        == 72 * TOKENS + (config.max_special_frames - 72) * 6 + (0 if keyframe else TOKENS)
    )
    for layer in range(config.num_layers):
        q, k, v = qkv[:, layer]
        out_torch, out_fi = (step.attend(layer, q, k, v) for step in steps)
        plan = steps[0].plan
        visible = slice(plan.visible_start, plan.visible_stop)
        reference = _dense_fp32(q, caches[0].k_pool[layer, visible], caches[0].v_pool[layer, visible])
        assert out_fi.dtype == torch.bfloat16 and out_fi.shape == q.shape
        assert _rel(out_fi, out_torch) <= 1e-2
        assert _rel(out_fi, reference) <= 1e-2 and _rel(out_torch, reference) <= 1e-2
    for cache, step in zip(caches, steps, strict=True):
        cache.end_step(step)
    assert torch.equal(caches[0].k_pool, caches[1].k_pool)


@needs_flashinfer
def test_flashinfer_shuffled_pages_and_no_reads_outside_the_page_list():
    from lingbot_map_ros.cache.flashinfer_backend import FlashInferAttention

    config = _config()
    cache = PagedKVCache(config, backend="torch")
    _stream([cache], 200, seed=3)
    gen = torch.Generator(device="cuda").manual_seed(4)
    step = cache.begin_step(1, keyframe=False)
    q, k, v = torch.randn((3, TOKENS, 16, 64), generator=gen, device="cuda", dtype=torch.bfloat16)
    step.write(0, k, v)
    plan = step.plan
    k_pool, v_pool = cache.k_pool[0], cache.v_pool[0]
    out_torch = cache.backend.run(q, k_pool, v_pool)
    # Poison every pool token outside the visible range: a kernel that reads padding or stray pages fails.
    outside = torch.ones(k_pool.shape[0], dtype=torch.bool, device="cuda")
    outside[plan.visible_start : plan.visible_stop] = False
    k_pool[outside] = float("nan")
    v_pool[outside] = float("nan")
    backend = FlashInferAttention(config, cache.layout.pool_tokens)
    pages = torch.arange(plan.visible_start, plan.visible_stop, dtype=torch.int32, device="cuda")
    shuffled = pages[torch.randperm(pages.numel(), generator=gen, device="cuda")]
    backend.plan_pages(shuffled, TOKENS)
    out_shuffled = backend.run(q, k_pool, v_pool)
    assert torch.isfinite(out_shuffled).all()
    assert _rel(out_shuffled, out_torch) <= 1e-2
    # Scattered pages: a random subset of the visible tokens, in random order, vs the dense fp32 reference.
    subset = shuffled[: pages.numel() // 2]
    backend.plan_pages(subset, TOKENS)
    out_subset = backend.run(q, k_pool, v_pool)
    reference = _dense_fp32(q, k_pool[subset.long()], v_pool[subset.long()])
    assert _rel(out_subset, reference) <= 1e-2
    cache.end_step(step)


def test_torch_backend_on_cuda_matches_fp32_reference_and_keeps_its_pool():
    config = _config()
    cache = PagedKVCache(config, backend="auto")
    assert cache.stats().backend == "torch"
    assert cache.backend.frames_kernel == "cudnn"
    pointers = (cache.k_pool.data_ptr(), cache.v_pool.data_ptr())
    _stream([cache], 150, seed=5)
    gen = torch.Generator(device="cuda").manual_seed(6)
    q, k, v = torch.randn((3, TOKENS, 16, 64), generator=gen, device="cuda", dtype=torch.bfloat16)
    step = cache.begin_step(1, keyframe=True)
    out = step.attend(0, q, k, v)
    visible = slice(step.plan.visible_start, step.plan.visible_stop)
    assert _rel(out, _dense_fp32(q, cache.k_pool[0, visible], cache.v_pool[0, visible])) <= 1e-2
    step.write(1, k, v)
    cache.end_step(step)
    assert (cache.k_pool.data_ptr(), cache.v_pool.data_ptr()) == pointers


@pytest.mark.parametrize("keyframe", [True, False])
def test_torch_split_merge_with_a_large_special_stream(keyframe):
    """Specials outnumber frame keys 9:1 here, so a wrong log-sum-exp merge cannot hide in the error."""
    config = KVCacheConfig(
        num_layers=1,
        patches_per_frame=58,
        scale_frames=2,
        sliding_window=4,
        max_window=4,
        dtype=torch.bfloat16,
        device=torch.device("cuda"),
    )
    cache = PagedKVCache(config, backend="torch")
    gen = torch.Generator(device="cuda").manual_seed(7)
    tokens = config.tokens_per_frame
    step = cache.begin_step(2, keyframe=True)
    q, k, v = torch.randn((3, 2 * tokens, 16, 64), generator=gen, device="cuda", dtype=torch.bfloat16)
    first = step.attend(0, q, k, v)
    assert _rel(first, _dense_fp32(q, k, v)) <= 1e-2
    cache.end_step(step)
    for _ in range(600):
        run_step(cache, 1, attend=False, generator=gen)
    step = cache.begin_step(1, keyframe=keyframe)
    q, k, v = torch.randn((3, tokens, 16, 64), generator=gen, device="cuda", dtype=torch.bfloat16)
    out = step.attend(0, q, k, v)
    assert not cache.backend.fused  # the special stream grew: split path
    plan = step.plan
    assert cache.layout.frame_base - plan.visible_start == (596 + keyframe) * 6
    visible = slice(plan.visible_start, plan.visible_stop)
    assert _rel(out, _dense_fp32(q, cache.k_pool[0, visible], cache.v_pool[0, visible])) <= 1e-2
    cache.end_step(step)


def test_torch_backend_float32_on_cuda_matches_fp64():
    """The parity path on a GPU: float32 cache, one SDPA call (TF32 off), against float64."""
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    config = KVCacheConfig(
        num_layers=1,
        patches_per_frame=28,
        scale_frames=4,
        sliding_window=3,
        max_window=4,
        device=torch.device("cuda"),
    )
    cache = PagedKVCache(config, backend="torch")
    gen = torch.Generator(device="cuda").manual_seed(8)
    for index in range(12):
        num_frames = 4 if index == 0 else 1
        step = cache.begin_step(num_frames, keyframe=index % 2 == 0)
        q, k, v = torch.randn((3, num_frames * 34, 16, 64), generator=gen, device="cuda").unbind(0)
        out = step.attend(0, q, k, v)
        visible = slice(step.plan.visible_start, step.plan.visible_stop)
        reference = _dense_fp32(
            q.double(), cache.k_pool[0, visible].double(), cache.v_pool[0, visible].double()
        )
        assert out.dtype == torch.float32 and _rel(out, reference) <= 1e-5
        cache.end_step(step)
