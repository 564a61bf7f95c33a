"""`LingBotMap.step_batch` on the tiny preset (CPU, fp32): B streams of one shared pool in one pass equal B
separate single-stream runs, per stream (its own frame index, keyframe or not, camera history, window)."""

from __future__ import annotations

import random

import pytest
import torch

from lingbot_map_ros.model import LingBotMap, ModelConfig, StreamConfig, build_model

H, W = 56, 98  # 4 x 7 patches
ATOL = 1e-5


@pytest.fixture(scope="module")
def model() -> LingBotMap:
    torch.manual_seed(0)
    torch.set_num_threads(1)
    return build_model(ModelConfig.preset("tiny"))


def _config(**overrides: object) -> StreamConfig:
    config = dict(scale_frames=3, sliding_window=3, max_window=6, max_special_frames=32, camera_history=8)
    config.update(overrides)
    return StreamConfig(**config)


def _frames(n: int, seed: int, hw: tuple[int, int] = (H, W)) -> torch.Tensor:
    return torch.rand(n, 3, *hw, generator=torch.Generator().manual_seed(seed))


def _close(a, b) -> None:
    torch.testing.assert_close(a.pose_enc, b.pose_enc, atol=ATOL, rtol=0)
    torch.testing.assert_close(a.pose_enc_list, b.pose_enc_list, atol=ATOL, rtol=0)
    torch.testing.assert_close(a.depth, b.depth, atol=ATOL, rtol=ATOL)
    torch.testing.assert_close(a.depth_conf, b.depth_conf, atol=ATOL, rtol=ATOL)


def test_single_step_on_a_pooled_stream_equals_a_stream_of_its_own(model: LingBotMap) -> None:
    pool = model.new_pool()
    pooled, alone = model.new_stream(_config(), pool), model.new_stream(_config())
    frames = _frames(6, 1)
    for state in (pooled, alone):
        model.step(frames[:3], state)
    for i in range(3, 6):
        a = model.step(frames[i : i + 1], pooled, keyframe=i != 4)
        b = model.step(frames[i : i + 1], alone, keyframe=i != 4)
        assert torch.equal(a.pose_enc, b.pose_enc) and torch.equal(a.depth, b.depth)
    assert pool.stats().regions == 1 and pooled.stats().kv_cache == alone.stats().kv_cache


def test_irregular_batches_equal_separate_streams(model: LingBotMap) -> None:
    """3 streams, random subsets per step (different rates), random keyframes, one reset and one window
    change mid-way, one stream at another resolution stepping alone in the same pool."""
    rng = random.Random(0)
    pool = model.new_pool()
    n = 3
    hws = [(H, W), (H, W), (42, 70)]
    batched = [model.new_stream(_config(), pool) for _ in range(n)]
    single = [model.new_stream(_config()) for _ in range(n)]
    frames = [_frames(40, 10 + i, hws[i]) for i in range(n)]
    used = [0] * n

    def next_frames(i: int, count: int) -> torch.Tensor:
        out = frames[i][used[i] : used[i] + count]
        used[i] += count
        return out

    for step in range(14):
        if step == 6:
            for states in (batched, single):
                states[1].reset()
                states[0].set_sliding_window(2)
        ready = [i for i in range(n) if rng.random() < 0.7] or [0]
        streaming = []
        for i in ready:
            if single[i].in_anchor_phase:
                images = next_frames(i, 3)
                _close(model.step(images, batched[i]), model.step(images, single[i]))
            else:
                streaming.append(i)
        for hw in {hws[i] for i in streaming}:
            group = [i for i in streaming if hws[i] == hw]
            keyframes = [rng.random() < 0.6 for _ in group]
            images = torch.cat([next_frames(i, 1) for i in group])
            outs = model.step_batch(images, [batched[i] for i in group], keyframes)
            for j, (i, keyframe) in enumerate(zip(group, keyframes, strict=True)):
                expected = model.step(images[j : j + 1], single[i], keyframe=keyframe)
                _close(outs[j], expected)
                assert batched[i].frames_stored == single[i].frames_stored
                assert batched[i].stats().kv_cache == single[i].stats().kv_cache
                assert batched[i].stats().camera_frames == single[i].stats().camera_frames
    assert min(used) > 6 and pool.stats().regions == n


def test_step_batch_rejects_bad_batches(model: LingBotMap) -> None:
    pool = model.new_pool()
    a, b = model.new_stream(_config(), pool), model.new_stream(_config(), pool)
    frames = _frames(4, 2)
    model.step(frames[:3], a)
    with pytest.raises(ValueError, match="streaming steps only"):
        model.step_batch(frames[:2], [a, b], [True, True])
    model.step(frames[:3], b)
    with pytest.raises(ValueError, match="twice"):
        model.step_batch(frames[:2], [a, a], [True, True])
    own = model.new_stream(_config())
    model.step(frames[:3], own)
    with pytest.raises(ValueError, match="same shared pool"):
        model.step_batch(frames[:2], [a, own], [True, True])
    with pytest.raises(ValueError, match="B = 2"):
        model.step_batch(frames[:3], [a, b], [True, True])
    assert a.frames_stored == b.frames_stored == 3
    outs = model.step_batch(frames[:2], [a, b], [True, False])
    assert len(outs) == 2 and outs[0].pose_enc.shape == (1, 9) and outs[1].depth.shape == (1, H, W)
    assert (a.frames_stored, b.frames_stored) == (4, 3)
