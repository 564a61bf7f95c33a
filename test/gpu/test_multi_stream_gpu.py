"""Batched streams on CUDA: FlashInfer's one call per layer over the shared pool vs the single-stream path.

Skipped without CUDA (and the FlashInfer checks without the flashinfer package). Run on the H200:
``python3 -m pytest -q -m gpu --noconftest test/gpu/test_multi_stream_gpu.py``.
"""

from __future__ import annotations

import dataclasses
import importlib.util

import pytest
import torch

from lingbot_map_ros.cache import KVCacheConfig, PagedKVCache
from lingbot_map_ros.cache.batch import begin_batch, end_batch
from lingbot_map_ros.cache.shared_pool import PooledKVCache, SharedKVPool
from lingbot_map_ros.model import LingBotMap, ModelConfig, PrecisionPolicy, StreamConfig

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]
needs_flashinfer = pytest.mark.skipif(
    importlib.util.find_spec("flashinfer") is None, reason="needs the flashinfer package"
)

TOKENS = 1005  # 518x378: 999 patches + 6 specials
LAYERS = 2


def _config() -> KVCacheConfig:
    return KVCacheConfig(
        num_layers=LAYERS, patches_per_frame=999, scale_frames=8, sliding_window=64, max_window=128,
        max_special_frames=8 + 128 + 60, dtype=torch.bfloat16, device=torch.device("cuda"),
    )  # fmt: skip


def _feed(caches: list[PagedKVCache], frames: int, gen: torch.Generator) -> None:
    """The same random keyframes into every cache (anchor phase first)."""
    for index in range(frames):
        count = 8 if index == 0 else 1
        kv = torch.randn(
            2, LAYERS, count * TOKENS, 16, 64, generator=gen, device="cuda", dtype=torch.bfloat16
        )
        for cache in caches:
            step = cache.begin_step(count, keyframe=True)
            for layer in range(LAYERS):
                step.write(layer, kv[0, layer], kv[1, layer])
            cache.end_step(step)


@needs_flashinfer
@pytest.mark.parametrize("keyframe", [True, False])
def test_flashinfer_batch_equals_single_stream_torch(keyframe: bool) -> None:
    """3 streams at different depths (window filling, full, special stream capped) in one pool: one
    FlashInfer call per layer; every pool token outside the batch's visible sets is NaN."""
    gen = torch.Generator(device="cuda").manual_seed(0)
    pool = SharedKVPool.for_config(_config(), backend="flashinfer")
    pooled = [PooledKVCache(pool, _config()) for _ in range(3)]
    refs = [PagedKVCache(_config(), backend="torch") for _ in range(3)]
    for cache, ref, frames in zip(pooled, refs, (20, 80, 300), strict=True):
        _feed([cache, ref], frames, gen)
    step = begin_batch(pool, pooled, [keyframe] * 3)
    visible = torch.zeros(pool.capacity, dtype=torch.bool, device="cuda")
    for request in step.plan.requests:
        visible[request.key_start : request.key_stop] = True
    pool.k[:, ~visible] = float("nan")
    pool.v[:, ~visible] = float("nan")
    ref_steps = [ref.begin_step(1, keyframe) for ref in refs]
    for layer in range(LAYERS):
        q, k, v = torch.randn(3, 3 * TOKENS, 16, 64, generator=gen, device="cuda", dtype=torch.bfloat16)
        out = step.attend(layer, q, k, v)
        for i, ref_step in enumerate(ref_steps):
            rows = slice(i * TOKENS, (i + 1) * TOKENS)
            expected = ref_step.attend(layer, q[rows], k[rows], v[rows]).float()
            error = (out[rows].float() - expected).norm() / expected.norm()
            assert torch.isfinite(out[rows]).all() and error < 1e-2, (i, float(error))
    end_batch(step)
    for ref, ref_step in zip(refs, ref_steps, strict=True):
        ref.end_step(ref_step)
    for cache, ref in zip(pooled, refs, strict=True):
        assert cache.stats().frames_stored == ref.stats().frames_stored


@pytest.mark.parametrize("backend", ["torch", pytest.param("flashinfer", marks=needs_flashinfer)])
def test_model_step_batch_on_cuda_matches_single_streams(backend: str) -> None:
    """The tiny preset in bf16 on CUDA: step_batch over 3 pooled streams vs 3 streams of their own."""
    torch.manual_seed(0)
    device = torch.device("cuda")
    model = LingBotMap(ModelConfig.preset("tiny")).to(device).eval()
    model.set_precision(PrecisionPolicy.for_device(device))
    config = StreamConfig(
        scale_frames=3, sliding_window=4, max_window=8, max_special_frames=64, camera_history=32,
        backend=backend, cuda_graphs=False,
    )  # fmt: skip
    pool = model.new_pool(backend)
    batched = [model.new_stream(config, pool) for _ in range(3)]
    single = [model.new_stream(dataclasses.replace(config, backend="torch")) for _ in range(3)]
    frames = torch.rand(3, 12, 3, 378, 518, generator=torch.Generator().manual_seed(1)).to(device)
    for i in range(3):
        model.step(frames[i, :3], batched[i])
        model.step(frames[i, :3], single[i])
    worst_pose, worst_depth = 0.0, 0.0
    for t in range(3, 12):
        keyframes = [(t + i) % 2 == 0 for i in range(3)]
        outs = model.step_batch(frames[:, t], batched, keyframes)
        for i in range(3):
            expected = model.step(frames[i, t : t + 1], single[i], keyframe=keyframes[i])
            worst_pose = max(worst_pose, float((outs[i].pose_enc - expected.pose_enc).abs().max()))
            rel = (outs[i].depth - expected.depth).abs() / expected.depth.abs().clamp_min(1e-3)
            worst_depth = max(worst_depth, float(rel.median()))
    assert worst_pose < 5e-2 and worst_depth < 2e-2, (worst_pose, worst_depth)


@pytest.mark.parametrize("frames", [20, 80, 300])
def test_torch_batch_of_lockstep_streams_in_one_call(frames: int) -> None:
    """3 streams fed the same keyframes (window filling / full with the special stream growing: cuDNN +
    flash merged / special stream capped: one cuDNN call) attend in ONE call over strided views of the pool
    (cache/batch.py, issue 33), equal to their own single-stream caches."""
    gen = torch.Generator(device="cuda").manual_seed(0)
    pool = SharedKVPool.for_config(_config(), backend="torch")
    pooled = [PooledKVCache(pool, _config(), backend="torch") for _ in range(3)]
    refs = [PagedKVCache(_config(), backend="torch") for _ in range(3)]
    _feed(pooled + refs, frames, gen)
    step = begin_batch(pool, pooled, [True] * 3)
    assert pool.batch_backend.spacing == pooled[0].region.tokens
    ref_steps = [ref.begin_step(1, True) for ref in refs]
    for layer in range(LAYERS):
        q, k, v = torch.randn(3, 3 * TOKENS, 16, 64, generator=gen, device="cuda", dtype=torch.bfloat16)
        out = step.attend(layer, q, k, v)
        for i, ref_step in enumerate(ref_steps):
            rows = slice(i * TOKENS, (i + 1) * TOKENS)
            expected = ref_step.attend(layer, q[rows], k[rows], v[rows]).float()
            error = (out[rows].float() - expected).norm() / expected.norm()
            assert torch.isfinite(out[rows]).all() and error < 1e-2, (i, float(error))
    end_batch(step)
