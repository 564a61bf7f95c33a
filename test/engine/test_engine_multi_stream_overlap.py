"""Issue 33: the one-deep pipeline of rounds of several cameras (`MultiStreamSession.run_round(...,
overlap=True)`) on the tiny preset (CPU, fp32).

Against the same cameras run unpipelined, fed the same frames: every result comes out one round later and is
bit-identical (the same model calls in the same order), for 1, 2 and 4 cameras with a camera joining late
and leaving for a while, a reset, a re-anchor and a resolution change. A reset drains the camera's pipeline:
its frame in flight is dropped unread, so no result of the stream before is ever delivered after it. A
camera without a frame in a round gets its frame in flight decoded in that round; a failed batch keeps the
frames in flight, as `push_overlapped` does.
"""

from __future__ import annotations

import numpy as np
import pytest
from tiny_stream import pan_frames, tiny_model

from lingbot_map_ros.engine.config import SessionConfig
from lingbot_map_ros.engine.result import FrameResult
from lingbot_map_ros.engine.stream.multi_stream import MultiStreamSession
from lingbot_map_ros.model import LingBotMap

S0 = 3
PARAMS = dict(
    scale_frames=S0, sliding_window=3, max_window=6, image_width=56, max_stored_frames=9, keyframe_interval=2
)
TICKS = 48
RESET_TICK = 28  # camera 0 resets before its frame of this tick (after a re-anchor)
TALL_TICK = 40  # camera 0 switches to a taller image


@pytest.fixture(scope="module")
def model() -> LingBotMap:
    return tiny_model()


def _identical(got: list[FrameResult], expected: list[FrameResult]) -> None:
    assert [(r.index, r.epoch, r.segment, r.phase, r.is_keyframe, r.meta) for r in got] == [
        (r.index, r.epoch, r.segment, r.phase, r.is_keyframe, r.meta) for r in expected
    ]
    for a, b in zip(got, expected, strict=True):
        for field in ("pose_c2w", "pose_enc", "depth", "depth_conf", "intrinsics"):
            np.testing.assert_array_equal(getattr(a, field), getattr(b, field), err_msg=field)


def _ticks(n: int) -> list[list[int]]:
    """Per tick the cameras with a frame: camera i every (i + 1)-th tick; of several cameras the last one
    joins at tick 6 and leaves for ticks 12..19."""
    last = n - 1 if n > 1 else None
    return [
        [i for i in range(n) if not t % (i + 1) and not (i == last and (t < 6 or 12 <= t < 20))]
        for t in range(TICKS)
    ]


def _run(model: LingBotMap, n: int, overlap: bool) -> tuple[dict, dict, list[int]]:
    """The schedule through a set of `n` cameras: results per camera (flushed at the end), the metas in
    flight at camera 0's reset (dropped unread), and the epochs camera 0's results came out with after it."""
    names = [f"cam{i}" for i in range(n)]
    multi = MultiStreamSession(model, SessionConfig(**PARAMS), names)
    feeds = [pan_frames(TICKS, seed=i) for i in range(n)]
    tall = pan_frames(TICKS, hw=(50, 74), seed=9)
    got: dict[str, list[FrameResult]] = {name: [] for name in names}
    sent: dict[str, list[str]] = {name: [] for name in names}
    dropped: dict[str, list[str]] = {name: [] for name in names}
    after_reset: list[int] = []
    for t, cameras in enumerate(_ticks(n)):
        if t == RESET_TICK:
            delivered = {r.meta for r in got["cam0"]}
            dropped["cam0"] = [m for m in sent["cam0"] if m not in delivered]
            multi.reset("cam0", "test")
        frames = {}
        for i in cameras:
            rgb = tall[t] if i == 0 and t >= TALL_TICK else feeds[i][t]
            frames[names[i]] = (rgb, f"{names[i]}@{t}")
            sent[names[i]].append(f"{names[i]}@{t}")
        out = multi.run_round(frames, overlap=overlap)
        assert not out.errors
        for name, results in out.results.items():
            got[name] += results
            if name == "cam0" and t >= RESET_TICK:
                after_reset += [r.epoch for r in results]
    for name in names:
        got[name] += multi.flush(name)
        assert multi.flush(name) == []
    assert max(r.segment for r in got["cam0"]) >= 1  # re-anchored before the reset
    if n > 1:  # streaming frames of all the cameras ran as one batched step
        assert max(multi.pool_stats()["batches"]) == n
    return got, dropped, after_reset


@pytest.mark.parametrize("n", [1, 2, 4])
def test_pipelined_rounds_equal_unpipelined_rounds_one_round_later(model: LingBotMap, n: int) -> None:
    want, none_dropped, _ = _run(model, n, overlap=False)
    got, dropped, after_reset = _run(model, n, overlap=True)
    assert not any(none_dropped.values())
    # the reset drained camera 0's pipeline: its frame in flight (streaming) was dropped, nothing else
    assert len(dropped["cam0"]) == 1 and not any(dropped[name] for name in got if name != "cam0")
    # no result of the stream before the reset came out after it (epoch 0 -> 1, then 2 at the taller image)
    assert after_reset and min(after_reset) == 1 and after_reset == sorted(after_reset)
    for name, results in want.items():
        _identical(got[name], [r for r in results if r.meta not in dropped[name]])
    assert got["cam0"][-1].epoch == 2 and got["cam0"][-1].depth.shape == (50, 74)


def test_a_camera_without_a_frame_gets_its_frame_in_flight_decoded(model: LingBotMap) -> None:
    multi = MultiStreamSession(model, SessionConfig(**PARAMS), ["a", "b"])
    feeds = [pan_frames(S0 + 3, seed=i) for i in range(2)]
    for t in range(S0):  # the anchor phases: results at once
        out = multi.run_round({"a": (feeds[0][t], t), "b": (feeds[1][t], t)}, overlap=True)
    assert [len(out.results[name]) for name in ("a", "b")] == [S0, S0]
    out = multi.run_round({"a": (feeds[0][S0], S0), "b": (feeds[1][S0], S0)}, overlap=True)
    assert out.results == {"a": [], "b": []}  # both frames in flight
    out = multi.run_round({"a": (feeds[0][S0 + 1], S0 + 1)}, overlap=True)
    assert not out.errors
    assert {name: [r.meta for r in results] for name, results in out.results.items()} == {
        "a": [S0],
        "b": [S0],
    }
    assert [r.meta for r in multi.flush("a")] == [S0 + 1] and multi.flush("b") == []


def test_a_failed_batch_keeps_the_frames_in_flight(model: LingBotMap, monkeypatch) -> None:
    """The round after round n fails to launch: round n's frames ran before the failure and come back from
    the next round; the failed round's frames are dropped, the cameras recover on their keyframes."""
    multi = MultiStreamSession(model, SessionConfig(**PARAMS), ["a", "b"])
    feeds = [pan_frames(S0 + 4, seed=i) for i in range(2)]

    def round_(t: int) -> object:
        return multi.run_round({"a": (feeds[0][t], t), "b": (feeds[1][t], t)}, overlap=True)

    for t in range(S0 + 2):
        assert not round_(t).errors

    def boom(*args, **kwargs):
        raise RuntimeError("device lost")

    monkeypatch.setattr(model, "step_batch", boom)
    out = round_(S0 + 2)
    assert set(out.errors) == {"a", "b"} and out.results == {"a": [], "b": []}
    monkeypatch.undo()
    out = round_(S0 + 3)
    assert not out.errors
    assert {name: [r.meta for r in results] for name, results in out.results.items()} == {
        "a": [S0 + 1],
        "b": [S0 + 1],
    }
    for name in ("a", "b"):
        assert [r.meta for r in multi.flush(name)] == [S0 + 3]
        stats = multi.stats(name)
        assert stats.recoveries_total == 1 and stats.epoch == 0 and "device lost" in stats.last_error
