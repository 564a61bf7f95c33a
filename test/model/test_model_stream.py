"""Streaming API of `LingBotMap` on the tiny preset: shapes, keyframe rollback, reset, caps, long streams."""

from __future__ import annotations

import pytest
import torch

from lingbot_map_ros.model import LingBotMap, ModelConfig, PrecisionPolicy, StreamConfig, build_model

H, W = 56, 98  # 4 x 7 patches, as the parity fixtures


@pytest.fixture(scope="module")
def model() -> LingBotMap:
    torch.manual_seed(0)
    torch.set_num_threads(1)
    return build_model(ModelConfig.preset("tiny"))


@pytest.fixture(scope="module")
def frames() -> torch.Tensor:
    return torch.rand(12, 3, H, W, generator=torch.Generator().manual_seed(1))


def _stream(model: LingBotMap, **overrides):
    config = dict(scale_frames=3, sliding_window=4, max_window=4, max_special_frames=32, camera_history=64)
    config.update(overrides)
    return model.new_stream(StreamConfig(**config))


def test_step_outputs(model: LingBotMap, frames: torch.Tensor) -> None:
    state = _stream(model)
    out = model.step(frames[:3], state)
    assert out.pose_enc.shape == (3, 9) and out.pose_enc_list.shape == (3, 4, 9)
    assert out.pose_enc_raw_list.shape == (3, 4, 9)
    assert out.depth.shape == (3, H, W) and out.depth_conf.shape == (3, H, W)
    for tensor in (out.pose_enc, out.pose_enc_list, out.depth, out.depth_conf):
        assert tensor.dtype == torch.float32 and torch.isfinite(tensor).all()
    assert (out.depth > 0).all() and (out.depth_conf >= 1).all()
    assert torch.equal(out.pose_enc, out.pose_enc_list[:, -1])
    assert (out.pose_enc[:, 7:] >= 0).all()  # FoV is ReLU-activated
    assert out.aggregated_tokens is None
    assert state.frames_stored == 3 and state.stats().camera_frames == 3
    out = model.step(frames[3:4], state, keep_tokens=True)
    assert out.pose_enc.shape == (1, 9) and len(out.aggregated_tokens) == 4
    assert out.aggregated_tokens[0].shape == (1, 6 + 28, 2 * model.config.embed_dim)
    assert state.frames_stored == 4


def test_bad_inputs_are_value_errors(model: LingBotMap, frames: torch.Tensor) -> None:
    state = _stream(model)
    with pytest.raises(ValueError, match="anchor step takes S = 3"):
        model.step(frames[:2], state)
    with pytest.raises(ValueError, match="anchor step must be a keyframe"):
        model.step(frames[:3], state, keyframe=False)
    with pytest.raises(ValueError, match=r"\[S, 3, H, W\]"):
        model.step(frames[0], state)
    with pytest.raises(ValueError, match="multiples of 14"):
        model.step(frames[:3, :, :50], state)
    with pytest.raises(ValueError, match="floating point"):
        model.step((frames[:3] * 255).to(torch.uint8), state)
    model.step(frames[:3], state)
    with pytest.raises(ValueError, match="streaming step takes S = 1"):
        model.step(frames[3:5], state)
    with pytest.raises(ValueError, match="fixed at"):
        model.step(torch.rand(1, 3, 28, 42), state)
    state.reset()
    assert model.step(torch.rand(3, 3, 28, 42), state).depth.shape == (3, 28, 42)


def _run(model: LingBotMap, frames: torch.Tensor, schedule: list[bool], **overrides):
    state = _stream(model, **overrides)
    outs = [model.step(frames[:3], state)]
    for i, keyframe in enumerate(schedule):
        outs.append(model.step(frames[3 + i : 4 + i], state, keyframe=keyframe))
    return outs, state


def test_non_keyframe_is_rolled_back(model: LingBotMap, frames: torch.Tensor) -> None:
    with_skip, state_a = _run(model, frames, [True, False, True, True])
    without, state_b = _run(model, frames[[0, 1, 2, 3, 5, 6]], [True, True, True])
    for a, b in ((with_skip[3], without[2]), (with_skip[4], without[3])):
        torch.testing.assert_close(a.pose_enc_list, b.pose_enc_list, rtol=0, atol=1e-6)
        torch.testing.assert_close(a.depth, b.depth, rtol=0, atol=1e-6)
    assert state_a.frames_stored == state_b.frames_stored == 6
    assert state_a.stats().kv_cache == state_b.stats().kv_cache
    assert state_a.camera.stored == state_b.camera.stored == 6


def test_non_keyframe_sees_what_the_next_keyframe_sees(model: LingBotMap, frames: torch.Tensor) -> None:
    """Window not full: a non-keyframe has the next keyframe's RoPE index and visible set."""
    skipped, _ = _run(model, frames, [True, False])
    kept, _ = _run(model, frames, [True, True])
    torch.testing.assert_close(skipped[2].pose_enc_list, kept[2].pose_enc_list, rtol=0, atol=1e-6)
    torch.testing.assert_close(skipped[2].depth_conf, kept[2].depth_conf, rtol=0, atol=1e-6)


def test_reset_reproduces_the_stream(model: LingBotMap, frames: torch.Tensor) -> None:
    first, state = _run(model, frames, [True, False, True])
    state.reset()
    assert state.frames_stored == 0 and state.camera.stored == 0
    again = [model.step(frames[:3], state)]
    again += [model.step(frames[3 + i : 4 + i], state, keyframe=k) for i, k in enumerate([True, False, True])]
    for a, b in zip(first, again, strict=True):
        assert torch.equal(a.pose_enc_list, b.pose_enc_list) and torch.equal(a.depth, b.depth)


def test_sliding_window_matters_and_resizes(model: LingBotMap, frames: torch.Tensor) -> None:
    wide, _ = _run(model, frames, [True] * 6, sliding_window=4)
    narrow, state = _run(model, frames, [True] * 6, sliding_window=1)
    assert torch.equal(wide[1].pose_enc, narrow[1].pose_enc)  # 1 window frame: same visible set
    assert not torch.allclose(wide[-1].pose_enc, narrow[-1].pose_enc, atol=1e-5)
    assert state.stats().kv_cache.window_frames == 1
    state.set_sliding_window(3)
    model.step(frames[10:11], state)
    assert state.stats().kv_cache.window_frames == 2
    with pytest.raises(ValueError):
        state.set_sliding_window(5)


def test_camera_history_cap(model: LingBotMap, frames: torch.Tensor) -> None:
    """Under the cap the capped head equals the unbounded one; past it the history stays at the cap."""
    capped, state = _run(model, frames, [True] * 9, camera_history=5)
    full, _ = _run(model, frames, [True] * 9, camera_history=64)
    for a, b in zip(capped[:3], full[:3], strict=True):  # 3 anchors + 2 keyframes fit
        assert torch.equal(a.pose_enc_list, b.pose_enc_list)
    assert not torch.allclose(capped[-1].pose_enc, full[-1].pose_enc, atol=1e-6)
    assert state.camera.stored == 5 and state.frames_stored == 12
    assert all(torch.isfinite(o.pose_enc).all() for o in capped)
    with pytest.raises(ValueError, match="camera_history"):
        StreamConfig(scale_frames=8, camera_history=8)


def test_bf16_aggregator_policy() -> None:
    torch.manual_seed(0)
    reference = build_model(ModelConfig.preset("tiny"))
    reduced = build_model(
        ModelConfig.preset("tiny"),
        dict(reference.state_dict()),
        precision=PrecisionPolicy(aggregator_dtype=torch.bfloat16),
    )
    assert reduced.aggregator.camera_token.dtype == torch.bfloat16
    assert reduced.camera_head.embed_pose.weight.dtype == torch.float32
    images = torch.rand(3, 3, H, W, generator=torch.Generator().manual_seed(2))
    state = _stream(reduced)
    out = reduced.step(images, state)
    assert state.kv_cache.config.dtype == torch.bfloat16
    expected = reference.step(images, _stream(reference))
    assert out.depth.dtype == torch.float32
    rel = ((out.depth - expected.depth).norm() / expected.depth.norm()).item()
    assert rel < 5e-2, rel


def test_stream_past_1024_frames(model: LingBotMap) -> None:
    """The reference crashes at temporal index 1,024; the model keeps going with bounded caches."""
    state = _stream(
        model, scale_frames=2, sliding_window=2, max_window=2, max_special_frames=8, camera_history=8
    )
    images = torch.rand(2, 3, 28, 28, generator=torch.Generator().manual_seed(3))
    model.step(images, state)
    pool = state.kv_cache.k_pool.data_ptr(), state.camera.k.data_ptr()
    for i in range(1080):
        out = model.step(images[i % 2 : i % 2 + 1], state, keyframe=i % 40 != 39)
    assert state.frames_stored > 1024
    assert torch.isfinite(out.pose_enc).all() and torch.isfinite(out.depth).all()
    assert (state.kv_cache.k_pool.data_ptr(), state.camera.k.data_ptr()) == pool  # nothing reallocated
    assert state.camera.stored == 8


def test_live_window_increase_past_the_pool_reallocates_once(model: LingBotMap, frames: torch.Tensor) -> None:
    """The pool is sized for the configured window; growing the window live past it re-allocates it once,
    between steps, and the outputs equal those of a stream whose pool was large enough from the start."""
    grown = _stream(model, sliding_window=2, max_window=6)
    roomy = _stream(model, sliding_window=6, max_window=6)
    for state in (grown, roomy):
        model.step(frames[:3], state)
    roomy.set_sliding_window(2)
    small_bytes = grown.stats().kv_cache.pool_bytes
    assert grown.stats().kv_cache.pool_window == 2 and roomy.stats().kv_cache.pool_window == 6
    assert small_bytes < roomy.stats().kv_cache.pool_bytes
    for i in range(3, 12):
        if i == 6:
            for state in (grown, roomy):
                state.set_sliding_window(5)
        keyframe = i % 3 != 1
        a, b = (model.step(frames[i : i + 1], state, keyframe=keyframe) for state in (grown, roomy))
        assert torch.equal(a.pose_enc, b.pose_enc) and torch.equal(a.depth, b.depth)
    stats = grown.stats().kv_cache
    assert (stats.pool_reallocations, stats.pool_window, stats.window_frames) == (1, 5, 5)
    assert roomy.stats().kv_cache.pool_reallocations == 0
    assert small_bytes < stats.pool_bytes < roomy.stats().kv_cache.pool_bytes


def test_stage_hook_sees_every_attention_kernel_and_changes_no_output(
    model: LingBotMap, frames: torch.Tensor
) -> None:
    """The public instrumentation hook (`StreamState.stage_hook`): set before the cache exists or after, the
    cache calls it around each global layer's attention kernel; outputs equal those of an unhooked stream."""
    stages: list[str] = []
    hooked, plain = _stream(model), _stream(model)
    hooked.stage_hook = stages.append
    outs = [model.step(frames[:3], s) for s in (hooked, plain)]
    assert stages == ["attention", "attention_done"] * model.config.depth
    stages.clear()
    hooked.stage_hook = None
    for state in (hooked, plain):
        model.step(frames[3:4], state)
    assert stages == []
    hooked.stage_hook = stages.append  # the cache exists now: the setter reaches it
    outs += [model.step(frames[4:5], s) for s in (hooked, plain)]
    assert stages == ["attention", "attention_done"] * model.config.depth
    for a, b in (outs[:2], outs[2:]):
        assert torch.equal(a.pose_enc, b.pose_enc) and torch.equal(a.depth, b.depth)
