"""StreamingSession with the tiny preset on CPU: anchor phase, keyframe policy, reset, resolution change,
live window, decoded geometry, error handling."""

from __future__ import annotations

import logging

import numpy as np
import pytest
import torch
from tiny_stream import pan_frames, tiny_model, tiny_session

from lingbot_map_ros.engine.stream.decode import unproject_depth
from lingbot_map_ros.engine.stream.preprocess import preprocess
from lingbot_map_ros.engine.stream.session import StreamingSession
from lingbot_map_ros.model import LingBotMap, StreamConfig

S0 = 3
WIDTH = 56  # 42×74 inputs → 28×56 network input (2×4 patches)


@pytest.fixture(scope="module")
def model() -> LingBotMap:
    return tiny_model()


frames = pan_frames


def session(model: LingBotMap, **overrides: object) -> StreamingSession:
    return tiny_session(model, S0, **overrides)


def test_anchor_phase_returns_all_anchor_results_at_once(model: LingBotMap) -> None:
    s = session(model)
    inputs = frames(S0 + 2)
    for i in range(S0 - 1):
        assert s.push(inputs[i], meta=f"m{i}") == []
        assert s.stats().pending_anchor_frames == i + 1
    results = s.push(inputs[S0 - 1], meta=f"m{S0 - 1}")
    assert [r.index for r in results] == list(range(S0))
    assert [r.meta for r in results] == [f"m{i}" for i in range(S0)]
    assert all(r.phase == 1 and r.is_keyframe and r.epoch == 0 for r in results)
    for r, rgb in zip(results, inputs, strict=False):
        assert r.rgb is rgb
        assert r.depth.shape == r.depth_conf.shape == (42, 74) and r.depth.dtype == np.float32
        assert r.pose_c2w.shape == (4, 4) and r.pose_c2w.dtype == np.float64
        np.testing.assert_allclose(r.pose_c2w[:3, :3] @ r.pose_c2w[:3, :3].T, np.eye(3), atol=1e-5)
        assert r.intrinsics.shape == (3, 3) and np.all(r.depth_conf >= 1.0) and np.all(r.depth > 0)
    (r,) = s.push(inputs[S0], meta="next")
    assert (r.index, r.phase, r.is_keyframe, r.meta) == (S0, 2, True, "next")
    assert s.stats().frames_stored == S0 + 1


def test_outputs_equal_the_reference_protocol_run_by_hand(model: LingBotMap) -> None:
    """Session = preprocess + anchor step on S0 frames + one step per frame with keyframe j % 3 == 0."""
    kf, n = 3, S0 + 8
    s = session(model, keyframe_interval=kf)
    inputs = frames(n, seed=1)
    results = [r for f in inputs for r in s.push(f)]
    assert [r.is_keyframe for r in results[S0:]] == [j % kf == 0 for j in range(n - S0)]
    assert s.stats().frames_stored == S0 + len(range(0, n - S0, kf))

    cfg = s.config
    state = model.new_stream(
        StreamConfig(
            scale_frames=S0, sliding_window=4, max_window=8,
            max_special_frames=max(cfg.max_stored_frames, S0 + cfg.max_window),
            camera_history=cfg.max_stored_frames,
        )
    )  # fmt: skip
    images = torch.from_numpy(np.stack([preprocess(f, WIDTH)[0] for f in inputs]))
    expected = [model.step(images[:S0], state, keyframe=True).pose_enc]
    for j in range(n - S0):
        expected.append(model.step(images[S0 + j : S0 + j + 1], state, keyframe=j % kf == 0).pose_enc)
    np.testing.assert_array_equal(np.stack([r.pose_enc for r in results]), torch.cat(expected).numpy())


def test_points_reproject_onto_their_pixels(model: LingBotMap) -> None:
    s = session(model)
    results = [r for f in frames(S0 + 1) for r in s.push(f)]
    r = results[-1]
    xyz, flat = unproject_depth(r.depth, r.intrinsics, r.pose_c2w, mask=r.depth_conf > 0.0)
    assert xyz.shape == (42 * 74, 3)
    np.testing.assert_array_equal(flat, np.arange(42 * 74))
    w2c = np.linalg.inv(r.pose_c2w)
    cam = xyz.astype(np.float64) @ w2c[:3, :3].T + w2c[:3, 3]
    uv = cam @ r.intrinsics.T
    uv = uv[:, :2] / uv[:, 2:]
    v, u = np.mgrid[0:42, 0:74]
    np.testing.assert_allclose(uv, np.stack([u.ravel(), v.ravel()], 1), atol=0.05)  # float32 xyz, large f
    np.testing.assert_allclose(cam[:, 2], r.depth.ravel(), rtol=1e-5)
    high = np.percentile(r.depth_conf, 50)
    confident = unproject_depth(r.depth, r.intrinsics, r.pose_c2w, mask=r.depth_conf > high, stride=2)[0]
    assert 0 < confident.shape[0] < xyz.shape[0] // 4 + 1


def test_non_keyframes_leave_the_cache_unchanged(model: LingBotMap) -> None:
    s = session(model, keyframe_interval=4)
    inputs = frames(S0 + 4, seed=2)
    for f in inputs[: S0 + 1]:
        s.push(f)
    stored = s.stats().frames_stored
    for f in inputs[S0 + 1 :]:
        (r,) = s.push(f)
        assert not r.is_keyframe
        assert s.stats().frames_stored == stored
    assert s.stats().cache.camera_frames == stored


def test_reset_restarts_the_anchor_phase(model: LingBotMap) -> None:
    s = session(model)
    inputs = frames(S0 + 2)
    first = [r for f in inputs for r in s.push(f)]
    s.reset()
    stats = s.stats()
    assert (stats.frames, stats.frames_stored, stats.phase, stats.epoch) == (0, 0, 1, 1)
    assert [s.push(f) for f in inputs[: S0 - 1]] == [[]] * (S0 - 1)
    again = s.push(inputs[S0 - 1])
    assert [r.index for r in again] == list(range(S0))
    assert all(r.epoch == 1 and r.reset_reason == "reset requested" for r in again)
    # a fresh stream on the same frames reproduces the first epoch exactly
    np.testing.assert_array_equal(
        np.stack([r.pose_enc for r in again]), np.stack([r.pose_enc for r in first[:S0]])
    )


def test_resolution_change_is_a_clean_reset(model: LingBotMap, caplog: pytest.LogCaptureFixture) -> None:
    s = session(model)
    for f in frames(S0 + 2):
        s.push(f)
    bigger = frames(S0, hw=(60, 112), seed=3)
    with caplog.at_level(logging.WARNING, logger="lingbot_map_ros.engine.stream.session"):
        assert s.push(bigger[0]) == []
    assert "input resolution changed from 42x74 to 60x112" in caplog.text
    stats = s.stats()
    assert stats.epoch == 1 and stats.resets_total == 1 and stats.phase == 1
    assert "resolution" in stats.last_reset_reason and stats.frames_stored == 0
    for f in bigger[1 : S0 - 1]:
        assert s.push(f) == []
    results = s.push(bigger[S0 - 1])
    assert len(results) == S0 and all(r.depth.shape == (60, 112) and r.epoch == 1 for r in results)
    assert "resolution" in results[0].reset_reason
    assert s.stats().network_hw == (28, 56)  # 60×112 → 56 wide, round(30/14)·14 = 28 rows


def test_set_sliding_window_changes_the_cache_window(model: LingBotMap) -> None:
    s = session(model, sliding_window=2, max_window=8)
    inputs = frames(S0 + 12, seed=4)
    for f in inputs[: S0 + 5]:
        s.push(f)
    assert s.stats().cache.kv_cache.window_frames == 2
    s.set_sliding_window(6)
    for f in inputs[S0 + 5 :]:
        s.push(f)
    kv = s.stats().cache.kv_cache
    assert (kv.sliding_window, kv.window_frames) == (6, 6)
    assert s.stats().sliding_window == 6
    for bad in (0, 9, 2.5, True):
        with pytest.raises(ValueError, match="sliding_window"):
            s.set_sliding_window(bad)  # type: ignore[arg-type]


def test_bad_frames_are_rejected_without_touching_the_stream(model: LingBotMap) -> None:
    s = session(model)
    s.push(frames(1)[0])
    with pytest.raises(ValueError, match="uint8"):
        s.push(np.zeros((42, 74, 3), np.float32))
    with pytest.raises(ValueError, match=r"\[H, W, 3\]"):
        s.push(np.zeros((42, 74), np.uint8))
    with pytest.raises(ValueError, match="height"):
        s.push(np.zeros((2, 500, 3), np.uint8))  # a new size, but unusable: no reset either
    assert s.stats().pending_anchor_frames == 1 and s.stats().epoch == 0


def test_model_error_drops_the_frame_and_recovers(model: LingBotMap, monkeypatch: pytest.MonkeyPatch) -> None:
    s = session(model)
    inputs = frames(S0 + 3)
    for f in inputs[: S0 + 1]:
        s.push(f)

    def failing_step(*args: object, **kwargs: object) -> None:
        raise RuntimeError("CUDA out of memory (simulated)")

    monkeypatch.setattr(model, "step", failing_step)
    with pytest.raises(RuntimeError, match="simulated"):
        s.push(inputs[S0 + 1])  # streaming: caches reset, map frame kept
    stats = s.stats()
    assert (stats.phase, stats.frames_stored, stats.epoch, stats.recoveries_total) == (2, 0, 0, 1)
    assert "simulated" in stats.last_error
    monkeypatch.undo()
    (r,) = s.push(inputs[S0 + 2])  # re-anchors on the kept keyframes, same epoch, next index
    assert (r.epoch, r.segment, r.index, r.phase) == (0, 1, S0 + 1, 2)

    s.reset()
    s.push(inputs[0])
    monkeypatch.setattr(model, "step", failing_step)
    with pytest.raises(RuntimeError, match="simulated"):
        for f in inputs[1:S0]:
            s.push(f)  # the anchor phase fails: a clean reset
    monkeypatch.undo()
    stats = s.stats()
    assert stats.phase == 1 and stats.frames_stored == 0 and "model error" in stats.last_reset_reason
    assert s.push(inputs[0]) == []


def test_reanchors_at_max_stored_frames_in_the_same_map_frame(model: LingBotMap) -> None:
    """S0 = 3, every 2nd streaming frame a keyframe, at most 8 stored frames: the cache is full after the
    streaming keyframe j = 8 (index 11); the next frame re-anchors on the last 3 keyframes first (in one step:
    re-anchors prepared beside the stream are test_engine_prepared_reanchor.py's)."""
    s = session(model, keyframe_interval=2, max_stored_frames=8, reanchor_steps=0)
    results, stored = [], []
    for f in frames(S0 + 16, seed=5):
        results += s.push(f)
        stored.append(s.stats().frames_stored)
    assert max(stored) == 8 and stored[S0 + 8] == 8
    segments = [r.segment for r in results]
    assert segments.index(1) == S0 + 9 and [r.index for r in results] == list(range(S0 + 16))
    # the re-anchored keyframes, then this frame (a keyframe: the streaming count restarts at 0)
    assert stored[S0 + 9] == S0 + 1
    assert results[S0 + 9].is_keyframe and not results[S0 + 10].is_keyframe
    stats = s.stats()
    assert (stats.epoch, stats.segment, stats.reanchors_total, stats.resets_total) == (0, 1, 1, 0)
    assert stats.timings_ms["reanchor"]["count"] == 1 and stats.alignment_scale > 0
    assert all(r.epoch == 0 and np.isfinite(r.pose_c2w).all() for r in results)


def test_building_seeded_synthetic_weights_leaves_the_global_rng_alone() -> None:
    """Process-wide state only at entry points: the builder draws the seeded weights from a forked RNG."""
    from lingbot_map_ros.engine.builder import EngineSpec, build_engine

    torch.manual_seed(123)
    state = torch.get_rng_state()
    first = build_engine(EngineSpec(preset="tiny", device="cpu", seed=7)).model
    assert torch.equal(torch.get_rng_state(), state)
    second = build_engine(EngineSpec(preset="tiny", device="cpu", seed=7)).model
    for a, b in zip(first.state_dict().values(), second.state_dict().values(), strict=True):
        assert torch.equal(a, b)
