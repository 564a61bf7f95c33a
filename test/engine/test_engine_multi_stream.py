"""`MultiStreamSession` on the tiny preset (CPU, fp32): N = 1, 2, 3 cameras interleaved irregularly give, per
camera, the results of its own `StreamingSession` fed the same frames (poses and depth within 1e-5; a set of
one camera is that single stream itself: no shared pool, no batched step)."""

from __future__ import annotations

import numpy as np
import pytest
from tiny_stream import pan_frames, tiny_model, tiny_session

from lingbot_map_ros.engine.config import SessionConfig
from lingbot_map_ros.engine.result import FrameResult
from lingbot_map_ros.engine.stream.multi_stream import BatchConfig, MultiStreamSession
from lingbot_map_ros.model import LingBotMap

S0 = 3
PARAMS = dict(
    scale_frames=S0, sliding_window=3, max_window=6, image_width=56, max_stored_frames=9, keyframe_interval=2
)


@pytest.fixture(scope="module")
def model() -> LingBotMap:
    return tiny_model()


def _same(got: list[FrameResult], expected: list[FrameResult]) -> None:
    assert [(r.index, r.epoch, r.segment, r.phase, r.is_keyframe, r.meta) for r in got] == [
        (r.index, r.epoch, r.segment, r.phase, r.is_keyframe, r.meta) for r in expected
    ]
    for a, b in zip(got, expected, strict=True):
        np.testing.assert_allclose(a.pose_c2w, b.pose_c2w, atol=1e-5, rtol=0)
        np.testing.assert_allclose(a.depth, b.depth, atol=1e-5, rtol=0)
        np.testing.assert_allclose(a.pose_enc, b.pose_enc, atol=1e-5, rtol=0)
        # focal = (W / 2) / tan(fov / 2) with the random tiny model's near-zero FoV (focal ~1e4 px): a FoV
        # difference far inside pose_enc's 1e-5 moves it by ~1.5e-5 relative (batched vs single reductions)
        np.testing.assert_allclose(a.intrinsics, b.intrinsics, rtol=1e-4)


def _schedule(n: int, ticks: int) -> list[dict[int, str]]:
    """Per tick, which camera pushes what: camera i every (i + 1)-th tick; camera 1 pauses for ticks
    12..19; camera 2 resets at tick 15; camera 0 switches to a taller image at tick 32."""
    plan = []
    for t in range(ticks):
        tick = {}
        for i in range(n):
            if t % (i + 1) or (i == 1 and 12 <= t < 20):
                continue
            tick[i] = "reset" if i == 2 and t == 15 else "frame"
        plan.append(tick)
    return plan


@pytest.mark.parametrize("n", [1, 2, 3])
def test_interleaved_cameras_equal_separate_sessions(model: LingBotMap, n: int) -> None:
    ticks = 40
    names = [f"cam{i}" for i in range(n)]
    multi = MultiStreamSession(model, SessionConfig(**PARAMS), names)
    single = [tiny_session(model, **PARAMS) for _ in range(n)]
    feeds = [pan_frames(ticks, seed=i) for i in range(n)]
    tall = pan_frames(ticks, hw=(50, 74), seed=9)
    got = {name: [] for name in names}
    expected = {name: [] for name in names}
    for t, tick in enumerate(_schedule(n, ticks)):
        frames = {}
        for i, action in tick.items():
            if action == "reset":
                multi.reset(names[i], "test")
                single[i].reset("test")
                continue
            rgb = tall[t] if i == 0 and t >= 32 else feeds[i][t]
            frames[names[i]] = (rgb, f"{names[i]}@{t}")
            expected[names[i]] += single[i].push(rgb, f"{names[i]}@{t}")
        out = multi.run_round(frames)
        assert not out.errors
        for name, results in out.results.items():
            got[name] += results
    for name, s in zip(names, single, strict=True):
        _same(got[name], expected[name])
        stats, ref = multi.stats(name), s.stats()
        for key in (
            "epoch",
            "frames",
            "keyframes",
            "segment",
            "reanchors_total",
            "resets_total",
            "frames_stored",
        ):
            assert getattr(stats, key) == getattr(ref, key), (name, key)
        assert stats.cache == ref.cache
    assert got["cam0"][-1].epoch == 1 and got["cam0"][-1].depth.shape == (50, 74)  # resolution change
    assert multi.stats("cam0").reanchors_total >= 1
    if n == 1:  # a set of one: the single stream's own KV cache, every step through `push`
        assert multi.pool is None and multi.pool_stats() is None and multi.only is multi.sessions["cam0"]
        return
    assert max(multi.pool_stats()["batches"]) == n
    assert multi.pool_stats()["regions"] == n
    with pytest.raises(ValueError, match="no only session"):
        _ = multi.only


def test_a_failed_batch_drops_every_frame_of_it_and_the_cameras_recover(
    model: LingBotMap, monkeypatch
) -> None:
    multi = MultiStreamSession(model, SessionConfig(**PARAMS), ["a", "b"])
    feeds = [pan_frames(8, seed=i) for i in range(2)]
    for t in range(S0 + 1):
        assert not multi.run_round({"a": (feeds[0][t], t), "b": (feeds[1][t], t)}).errors

    def boom(*args, **kwargs):
        raise RuntimeError("device lost")

    monkeypatch.setattr(model, "step_batch", boom)
    out = multi.run_round({"a": (feeds[0][S0 + 1], 0), "b": (feeds[1][S0 + 1], 0)})
    assert set(out.errors) == {"a", "b"} and out.results == {"a": [], "b": []}
    monkeypatch.undo()
    out = multi.run_round({"a": (feeds[0][S0 + 2], 0), "b": (feeds[1][S0 + 2], 0)})
    assert not out.errors and [len(r) for r in out.results.values()] == [1, 1]
    for name in ("a", "b"):
        stats = multi.stats(name)
        assert stats.recoveries_total == 1 and stats.epoch == 0 and "device lost" in stats.last_error


def test_unknown_or_duplicate_cameras_are_refused(model: LingBotMap) -> None:
    multi = MultiStreamSession(model, SessionConfig(**PARAMS), ["front"])
    with pytest.raises(ValueError, match="unknown camera"):
        multi.run_round({"rear": (pan_frames(1)[0], 0)})
    with pytest.raises(ValueError, match="distinct"):
        MultiStreamSession(model, SessionConfig(**PARAMS), ["a", "a"])


def test_a_set_of_one_overlaps_and_flushes_like_its_session(model: LingBotMap) -> None:
    """`run_round(..., overlap=True)` on a set of one is `push_overlapped` (the frame before's results) and
    `flush` returns the frame in flight: together exactly `push`'s results."""
    multi = MultiStreamSession(model, SessionConfig(**PARAMS), [""])
    single = tiny_session(model, **PARAMS)
    frames = pan_frames(S0 + 3)
    got, expected = [], []
    for i, rgb in enumerate(frames):
        out = multi.run_round({"": (rgb, i)}, overlap=True)
        assert not out.errors
        got += out.results[""]
        expected += single.push(rgb, i)
    assert len(got) == len(expected) - 1  # the last frame is still in flight
    got += multi.flush("")
    assert multi.flush("") == []
    _same(got, expected)


def test_warm_up_runs_every_camera_and_leaves_them_fresh(model: LingBotMap) -> None:
    multi = MultiStreamSession(model, SessionConfig(**PARAMS), ["a", "b"])
    assert multi.warm_up((42, 74), streaming_frames=1) > 0
    for name in ("a", "b"):
        stats = multi.stats(name)
        assert (stats.epoch, stats.frames_total, stats.frames_stored) == (0, 0, 0)
    assert multi.pool_stats()["regions"] == 2  # the warm-up placed both cameras' regions


@pytest.mark.parametrize(("max_batch", "sizes"), [(8, [2, 3]), (2, [2]), (1, [])])
def test_warm_up_captures_batched_steps_of_every_size(
    model: LingBotMap, monkeypatch: pytest.MonkeyPatch, max_batch: int, sizes: list[int]
) -> None:
    """Batch sizes 2 .. min(cameras, max_batch), each over the first cameras' streams at the network size."""
    multi = MultiStreamSession(
        model, SessionConfig(**PARAMS), ["a", "b", "c"], BatchConfig(max_batch=max_batch)
    )
    calls = []
    monkeypatch.setattr(model, "warm_up_batch", lambda states, hw: calls.append((states, hw)))
    multi.warm_up((42, 74), streaming_frames=0)
    assert [len(states) for states, _ in calls] == sizes
    expected = [multi.sessions[name].batched.model_state for name in ("a", "b", "c")]
    assert all(states == expected[: len(states)] and hw == (28, 56) for states, hw in calls)


@pytest.mark.parametrize("graphs", [True, False])
def test_rounds_pass_the_batch_graphs_switch(
    model: LingBotMap, monkeypatch: pytest.MonkeyPatch, graphs: bool
):
    multi = MultiStreamSession(model, SessionConfig(**PARAMS), ["a", "b"])
    multi.batch_graphs = graphs
    feeds = [pan_frames(S0 + 1, seed=i) for i in range(2)]
    seen = []
    step_batch = model.step_batch

    def spy(images, states, keyframes, graphs=True):
        seen.append(graphs)
        return step_batch(images, states, keyframes, graphs)

    monkeypatch.setattr(model, "step_batch", spy)
    for t in range(S0 + 1):
        assert not multi.run_round({"a": (feeds[0][t], t), "b": (feeds[1][t], t)}).errors
    assert seen == [graphs]  # the anchor frames step on their own, the one streaming round is batched


def test_pool_stats_report_the_memory_each_camera_adds(model: LingBotMap) -> None:
    """Per camera: its KV region (2 x layers x region tokens x heads x head_dim x element size) and its
    camera-head history (docs/performance.md, "Memory per camera"); together the pool's used bytes."""
    multi = MultiStreamSession(model, SessionConfig(**PARAMS), ["a", "b"])
    feeds = [pan_frames(S0 + 1, seed=i) for i in range(2)]
    for t in range(S0 + 1):
        assert not multi.run_round({"a": (feeds[0][t], t), "b": (feeds[1][t], t)}).errors
    stats = multi.pool_stats()
    c = model.config
    for name in ("a", "b"):
        state = multi.sessions[name].batched.model_state
        tokens = state.kv_cache.region.tokens
        assert stats["camera_kv_bytes"][name] == 2 * c.depth * tokens * c.num_heads * c.head_dim * 4  # fp32
        history = state.camera
        assert stats["camera_history_bytes"][name] == 2 * history.k.numel() * 4
        assert history.k.shape[-2] == history.capacity + 1
    per_token = stats["pool_bytes"] // stats["capacity_tokens"]
    assert sum(stats["camera_kv_bytes"].values()) == stats["used_tokens"] * per_token
