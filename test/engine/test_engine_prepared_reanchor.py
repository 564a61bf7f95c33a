"""Re-anchors prepared beside the stream (issue 31): `model/anchor_pass.py` and
`engine/stream/prepared_reanchor.py` on the tiny model (CPU).

The anchor pass in parts must leave a stream exactly as the one-call anchor step does; a session that
prepares its re-anchors must restart at the same frames as one that re-anchors in one step, on the stream that
a one-step re-anchor on the same keyframes gives, with each frame doing only a part of the work."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from lingbot_map_ros.engine.config import SessionConfig
from lingbot_map_ros.engine.stream.decode import pose_encoding_to_c2w
from lingbot_map_ros.engine.stream.reanchor import estimate_alignment
from lingbot_map_ros.engine.stream.session import StreamingSession
from lingbot_map_ros.model import LingBotMap, ModelConfig, StreamConfig
from lingbot_map_ros.model.anchor_pass import _group, count_parts

S0 = 4
MAX_STORED = 30


@pytest.fixture(scope="module")
def model() -> LingBotMap:
    torch.manual_seed(0)
    return LingBotMap(ModelConfig.preset("tiny")).eval()


def frames(n: int) -> list[np.ndarray]:
    """A 100x60 random image panning right one pixel per frame."""
    base = np.random.default_rng(0).integers(0, 256, (60, 100, 3), dtype=np.uint8)
    return [np.roll(base, i, axis=1) for i in range(n)]


def session(model: LingBotMap, reanchor_steps: int, keyframe_interval: int = 1) -> StreamingSession:
    config = SessionConfig(
        keyframe_interval=keyframe_interval,
        scale_frames=S0,
        sliding_window=8,
        max_window=8,
        image_width=56,
        max_stored_frames=MAX_STORED,
        reanchor_steps=reanchor_steps,
    )
    return StreamingSession(model, config)


@pytest.mark.parametrize("groups", [1, 5, 100])
def test_an_installed_anchor_pass_is_the_anchor_step(model: LingBotMap, groups: int) -> None:
    """Outputs, the anchors' K/V, the camera anchors and the next step equal a fresh stream's anchor step,
    while the live stream it replaces kept streaming until the install."""
    config = StreamConfig(scale_frames=S0, sliding_window=8, max_window=8)
    images = torch.rand(S0 + 8, 3, 28, 56, generator=torch.Generator().manual_seed(1))
    fresh = model.new_stream(config)
    expected = model.step(images[:S0], fresh)
    live = model.new_stream(config)
    model.step(images[S0 : 2 * S0], live)
    anchor_pass = model.begin_anchor_pass(images[:S0], live, groups)
    assert anchor_pass.groups_left == min(groups, count_parts(model.config.depth, S0))
    while not anchor_pass.done:
        model.step(images[2 * S0 : 2 * S0 + 1], live)  # the live stream goes on between the parts
        assert live.frames_stored > S0
        anchor_pass.advance()
    out = anchor_pass.install()

    for name in ("pose_enc", "pose_enc_list", "depth", "depth_conf"):
        torch.testing.assert_close(getattr(out, name), getattr(expected, name), rtol=1e-5, atol=1e-5)
    assert live.kv_cache.layout.state == fresh.kv_cache.layout.state  # S0 anchors, nothing else
    start, stop = fresh.kv_cache.layout.visible_range(fresh.kv_cache.layout.state)
    for pool in ("k_pool", "v_pool"):
        torch.testing.assert_close(
            getattr(live.kv_cache, pool)[:, start:stop], getattr(fresh.kv_cache, pool)[:, start:stop]
        )
    assert (
        (live.camera.stored, live.camera.anchors) == (fresh.camera.stored, fresh.camera.anchors) == (S0, S0)
    )
    torch.testing.assert_close(live.camera.k[..., :S0, :], fresh.camera.k[..., :S0, :])
    for keyframe in (True, False, True):
        a = model.step(images[-1:], live, keyframe=keyframe)
        b = model.step(images[-1:], fresh, keyframe=keyframe)
        torch.testing.assert_close(a.pose_enc, b.pose_enc, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(a.depth, b.depth, rtol=1e-5, atol=1e-5)


def test_parts_are_grouped_in_order_into_the_groups_asked_for() -> None:
    parts = [(name, None) for name in ["backbone"] * 8 + ["layer"] * 24 + ["depth"] * 8 + ["camera"]]
    for groups in (1, 4, 12, 24, 41, 60):
        grouped = _group(parts, groups)
        assert len(grouped) == min(groups, len(parts)) and all(grouped)
        assert [p for group in grouped for p in group] == parts
    costs = [sum(1 for _ in group) for group in _group(parts, 24)]
    assert max(costs) <= 3  # about equal shares, none carrying a block of the work


def test_prepared_reanchors_restart_where_one_step_reanchors_do_and_spread_the_work(
    model: LingBotMap,
) -> None:
    stream = frames(80)
    runs = {}
    for steps in (0, 6):
        s = session(model, steps)
        results = [r for i, frame in enumerate(stream) for r in s.push(frame, meta=i)]
        segments = np.array([r.segment for r in results])
        work = [r.index for r in results if "reanchor" in r.timings_ms]
        runs[steps] = (results, np.flatnonzero(np.diff(segments)) + 1, work, s.stats())
    _, boundaries_one, work_one, stats_one = runs[0]
    results, boundaries, work, stats = runs[6]
    np.testing.assert_array_equal(boundaries, boundaries_one)  # at the cache bound, as before
    np.testing.assert_array_equal(boundaries_one, [MAX_STORED, 2 * MAX_STORED - S0])
    assert work_one == list(boundaries_one)  # the one-step re-anchor: all its work in one frame
    # prepared: 6 groups of model parts + the alignment over the frames before, the take-over at the bound
    assert work == [i for b in boundaries for i in range(b - 7, b + 1)] + list(range(75, 80))
    assert stats.reanchors_total == stats_one.reanchors_total == 2
    assert stats.max_stored_frames == MAX_STORED and stats.frames_stored <= MAX_STORED
    # before the first prepared re-anchor starts, both sessions are the same stream
    first = boundaries[0] - 7
    for a, b in zip(results[:first], runs[0][0][:first], strict=True):
        np.testing.assert_array_equal(a.pose_c2w, b.pose_c2w)


def test_with_a_keyframe_interval_the_preparation_still_ends_near_the_bound(model: LingBotMap) -> None:
    """Every 2nd frame stored: the preparation starts ceil(7 / 2) stored frames before the bound and takes
    over after its 8 frames, never past the bound, a few frames before the one-step re-anchor."""
    runs = {}
    for steps in (0, 6):
        s = session(model, steps, keyframe_interval=2)
        stored, segments = [], []
        for frame in frames(70):
            segments += [r.segment for r in s.push(frame)]
            stored.append(s.stats().frames_stored)
        runs[steps] = (np.flatnonzero(np.diff(segments)) + 1, max(stored), s.stats().reanchors_total)
    (one_step, one_max, one_count), (prepared, prepared_max, count) = runs[0], runs[6]
    assert count == one_count == 1 and one_max == MAX_STORED and prepared_max <= MAX_STORED
    assert one_step[0] - 8 <= prepared[0] <= one_step[0]


def test_a_prepared_reanchor_equals_a_one_step_reanchor_on_its_keyframes(model: LingBotMap) -> None:
    """The stream after the take-over is the one-step re-anchor's on the same kept keyframes: same new-stream
    outputs for the next frame and the same map alignment."""
    stream = frames(MAX_STORED + 4)
    prepared_session = session(model, 6)
    results, taken = [], None
    for i, frame in enumerate(stream):
        anchors = prepared_session._anchors
        if anchors.prepared is not None and taken is None:
            taken = list(anchors.prepared.records)
        results += prepared_session.push(frame, meta=i)
    after = next(r for r in results if r.segment == 1)

    reference = model.new_stream(prepared_session.config.stream_config())
    images = torch.from_numpy(np.stack([r.image_net for r in taken])).permute(0, 3, 1, 2).float() / 255
    anchor_out = model.step(images, reference)
    align = estimate_alignment(
        taken,
        pose_encoding_to_c2w(anchor_out.pose_enc.numpy()),
        anchor_out.depth.numpy(),
        anchor_out.depth_conf.numpy(),
        prepared_session.config.realign_conf_threshold,
    )
    image_net = prepared_session._steps.to_model([stream_image_net(prepared_session, stream[after.index])])
    next_out = model.step(image_net, reference, keyframe=True)
    np.testing.assert_allclose(after.pose_enc, next_out.pose_enc[0].numpy(), rtol=1e-4, atol=1e-5)
    expected_pose = align.apply_pose(pose_encoding_to_c2w(next_out.pose_enc.numpy())[0])
    np.testing.assert_allclose(after.pose_c2w, expected_pose, rtol=1e-4, atol=1e-5)


def stream_image_net(s: StreamingSession, rgb: np.ndarray) -> np.ndarray:
    """The network input the session makes of ``rgb`` (its pre-processing geometry)."""
    from lingbot_map_ros.engine.stream.preprocess import resize_uint8

    return resize_uint8(rgb, s._decoder.geometry)


def test_push_overlapped_equals_push_across_prepared_reanchors(model: LingBotMap) -> None:
    stream = frames(70)
    plain = session(model, 6)
    expected = [r for frame in stream for r in plain.push(frame)]
    overlapped = session(model, 6)
    got = [r for frame in stream for r in overlapped.push_overlapped(frame)] + overlapped.flush()
    assert [r.index for r in got] == [r.index for r in expected]
    assert [r.segment for r in got] == [r.segment for r in expected]
    for a, b in zip(got, expected, strict=True):
        np.testing.assert_allclose(a.pose_c2w, b.pose_c2w, rtol=1e-5, atol=1e-6)


def test_a_failed_step_while_preparing_drops_the_prepared_reanchor(model: LingBotMap) -> None:
    """A model error during the preparation: the caches reset, the next frame re-anchors in one step on the
    kept keyframes (the map frame carries on), and the session prepares the next re-anchor as usual."""
    stream = frames(70)
    s = session(model, 6)
    failed = False
    results = []
    for i, frame in enumerate(stream):
        if s._anchors.prepared is not None and not failed:
            failed = True
            s._steps.step = _failing_once(s)
            with pytest.raises(RuntimeError, match="injected"):
                s.push(frame, meta=i)
            assert s._anchors.prepared is None and s.stats().recoveries_total == 1
            continue
        results += s.push(frame, meta=i)
    assert failed and s.stats().resets_total == 0
    assert {r.epoch for r in results} == {0} and s.stats().reanchors_total >= 2


def _failing_once(s: StreamingSession) -> object:
    """A stand-in for ``s._steps.step`` that raises once (a model error), then puts the real one back."""
    step = s._steps.step

    def fail(*args: object, **kwargs: object) -> None:
        s._steps.step = step
        raise RuntimeError("injected")

    return fail
