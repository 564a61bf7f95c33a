"""Issue 13 on CUDA (tiny preset, CUDA graphs): the overlapped push and the pool growth on the GPU.

Skipped without CUDA. Run on the H200: ``python3 -m pytest -q -m gpu --noconftest test/gpu/test_perf_gpu.py``.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from lingbot_map_ros.engine.config import SessionConfig
from lingbot_map_ros.engine.stream.session import StreamingSession
from lingbot_map_ros.model import ModelConfig, build_model

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]
S0 = 3


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return build_model(ModelConfig.preset("tiny"), device="cuda")


def _frames(n: int, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, (84, 112, 3), dtype=np.uint8) for _ in range(n)]


def _session(model, **overrides) -> StreamingSession:
    config = dict(scale_frames=S0, sliding_window=4, max_window=8, image_width=112, max_stored_frames=24)
    config.update(overrides)
    return StreamingSession(model, SessionConfig(**config, keyframe_interval=2))


def test_overlapped_push_on_cuda_equals_push_bit_exactly(model) -> None:
    sync, overlapped = _session(model), _session(model)
    assert overlapped.warm_up((84, 112)) > 0
    expected, got = [], []
    for i, frame in enumerate(_frames(50)):  # graphs captured, a re-anchor at 24 stored frames
        expected += sync.push(frame, meta=i)
        got += overlapped.push_overlapped(frame, meta=i)
    got += overlapped.flush()
    assert [r.index for r in got] == [r.index for r in expected] == list(range(50))
    for a, b in zip(got, expected, strict=True):
        assert np.array_equal(a.pose_c2w, b.pose_c2w) and np.array_equal(a.depth, b.depth)
        assert np.array_equal(a.depth_conf, b.depth_conf)
    assert overlapped.stats().reanchors_total == sync.stats().reanchors_total >= 1


def test_live_window_increase_reallocates_the_pool_once_on_cuda(model) -> None:
    grown, roomy = _session(model, sliding_window=2), _session(model, sliding_window=6)
    frames = _frames(20, seed=1)
    for i, frame in enumerate(frames):
        if i == S0:
            roomy.set_sliding_window(2)  # same window, but its pool was made for 6
        if i == 10:
            grown.set_sliding_window(6)
            roomy.set_sliding_window(6)
        a, b = grown.push(frame), roomy.push(frame)
        for ra, rb in zip(a, b, strict=True):
            np.testing.assert_allclose(ra.pose_c2w, rb.pose_c2w, rtol=0, atol=1e-6)
            np.testing.assert_allclose(ra.depth, rb.depth, rtol=1e-6)
    kv = grown.stats().cache.kv_cache
    assert (kv.pool_reallocations, kv.pool_window, kv.window_frames) == (1, 6, 6)
    assert roomy.stats().cache.kv_cache.pool_reallocations == 0


def test_depth_every_n_on_cuda_graphs_keeps_the_poses(model) -> None:
    """Issue 22: skipping the depth head's graph (`depth_every_n` 2) leaves the poses bit-identical up to the
    first re-anchor and the depths of the frames that have one; the overlapped path follows the schedule."""
    every, skipping = _session(model), _session(model, depth_every_n=2)
    assert skipping.warm_up((84, 112)) > 0
    want, got = [], []
    for i, frame in enumerate(_frames(50, seed=2)):  # a re-anchor at 24 stored frames
        want += every.push(frame, meta=i)
        got += skipping.push_overlapped(frame, meta=i)
    got += skipping.flush()
    assert [r.index for r in got] == [r.index for r in want] == list(range(50))
    assert any(r.depth is None for r in got) and skipping.stats().reanchors_total >= 1
    for a, b in zip(want, got, strict=True):
        if b.segment == 0:
            assert np.array_equal(a.pose_c2w, b.pose_c2w)
        if b.depth is not None and b.segment == 0:
            assert np.array_equal(a.depth, b.depth)
