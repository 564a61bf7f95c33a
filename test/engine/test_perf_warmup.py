"""Start-up path of the fast default (issue 13): the session's warm-up, the compile cache, the parameters.

CPU, tiny preset: the warm-up runs the same code as on CUDA (there it also captures the graphs and compiles);
what is checked here is that it leaves no trace in the stream.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import pytest
from tiny_stream import tiny_model

from lingbot_map_ros.engine.config import SessionConfig
from lingbot_map_ros.engine.stream.session import StreamingSession
from lingbot_map_ros.model import LingBotMap

S0 = 3


@pytest.fixture(scope="module")
def model() -> LingBotMap:
    return tiny_model()


def _session(model: LingBotMap) -> StreamingSession:
    config = SessionConfig(
        scale_frames=S0, sliding_window=4, max_window=8, image_width=56, max_stored_frames=64
    )
    return StreamingSession(model, config)


def _frames(n: int) -> list[np.ndarray]:
    rng = np.random.default_rng(5)
    return [rng.integers(0, 256, (42, 74, 3), dtype=np.uint8) for _ in range(n)]


def test_warm_up_leaves_the_stream_untouched(model: LingBotMap) -> None:
    warm, cold = _session(model), _session(model)
    before = warm.stats()
    seconds = warm.warm_up((42, 74), streaming_frames=3)
    assert seconds >= 0
    after = warm.stats()
    for key in ("epoch", "frames", "frames_total", "keyframes", "resets_total", "phase", "frames_stored"):
        assert getattr(after, key) == getattr(before, key), key
    for frame in _frames(S0 + 4):
        a, b = warm.push(frame), cold.push(frame)
        assert len(a) == len(b)
        for ra, rb in zip(a, b, strict=True):
            assert np.array_equal(ra.pose_c2w, rb.pose_c2w) and np.array_equal(ra.depth, rb.depth)
            assert ra.index == rb.index and ra.epoch == rb.epoch == 0
    with pytest.raises(RuntimeError, match="fresh stream"):
        warm.warm_up((42, 74))


def test_parse_image_size_and_cross_check() -> None:
    pytest.importorskip("rclpy")
    from lingbot_map_ros.ros.params.declare import cross_check, parse_image_size

    assert parse_image_size("640x480") == (480, 640) and parse_image_size("518X378") == (378, 518)
    for bad in ("", "640", "x480", "640x", "0x10", "a x b", "640x480x3"):
        assert parse_image_size(bad) is None, bad
    values = {"kv_cache.sliding_window": 64, "kv_cache.max_window": 64, "model.warmup_image_size": "640"}
    assert any("warmup_image_size" in p for p in cross_check(values))
    values["model.warmup_image_size"] = ""
    assert cross_check(values) == []


def test_compile_cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from lingbot_map_ros.model.graphed import compile_cache_dir, default_compile_cache_dir
    from lingbot_map_ros.ros.lifecycle.process_settings import ProcessSettings

    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_compile_cache_dir() == tmp_path / "xdg" / "lingbot_map_ros" / "torch_compile"
    assert compile_cache_dir("") == default_compile_cache_dir() and default_compile_cache_dir().is_dir()
    assert "TORCHINDUCTOR_CACHE_DIR" not in os.environ  # the model layer sets no process-wide state
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "env"))
    assert compile_cache_dir("") == tmp_path / "env"
    assert compile_cache_dir(str(tmp_path / "param")) == tmp_path / "param"
    settings = ProcessSettings()  # the node's configure sets it, cleanup restores it
    settings.set_compile_cache_dir(tmp_path / "param")
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "param")
    before = sys.getswitchinterval()
    settings.set_switch_interval(0.0002)
    assert sys.getswitchinterval() == pytest.approx(0.0002)
    settings.restore()
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "env")
    assert sys.getswitchinterval() == before


def _fields(r) -> tuple:
    return (r.index, r.meta, r.is_keyframe, r.phase, r.epoch, r.segment, r.reset_reason)


def test_overlapped_push_gives_exactly_the_results_of_push(model: LingBotMap) -> None:
    """One-deep pipeline: same results bit for bit, one call later; anchor phase, keyframe interval 2,
    re-anchors (max_stored_frames), a resolution change and flush() all included."""
    config = SessionConfig(
        scale_frames=S0,
        sliding_window=3,
        max_window=8,
        image_width=56,
        max_stored_frames=8,
        keyframe_interval=2,
    )
    sync, overlapped = StreamingSession(model, config), StreamingSession(model, config)
    rng = np.random.default_rng(7)
    inputs = [rng.integers(0, 256, (42, 74, 3), dtype=np.uint8) for _ in range(20)]
    inputs += [rng.integers(0, 256, (60, 112, 3), dtype=np.uint8) for _ in range(S0 + 3)]
    expected, got = [], []
    for i, frame in enumerate(inputs):
        expected += sync.push(frame, meta=i)
        got += overlapped.push_overlapped(frame, meta=i)
        if i == 12:
            got += overlapped.flush()  # an empty input queue: the frame in flight comes back at once
            assert overlapped.flush() == []
    got += overlapped.flush()
    assert [_fields(r) for r in got] == [_fields(r) for r in expected]
    for a, b in zip(got, expected, strict=True):
        assert np.array_equal(a.pose_c2w, b.pose_c2w) and np.array_equal(a.intrinsics, b.intrinsics)
        assert np.array_equal(a.depth, b.depth, equal_nan=True)
        assert np.array_equal(a.depth_conf, b.depth_conf)
    assert overlapped.stats().reanchors_total == sync.stats().reanchors_total >= 1
    assert overlapped.stats().resets_total == sync.stats().resets_total == 1


def test_overlapped_push_returns_the_previous_frame(model: LingBotMap) -> None:
    s = _session(model)
    frames = _frames(S0 + 3)
    assert [len(s.push_overlapped(f)) for f in frames[:S0]] == [0] * (S0 - 1) + [S0]
    assert s.push_overlapped(frames[S0]) == []  # in flight
    (r,) = s.push_overlapped(frames[S0 + 1])
    assert r.index == S0
    s.reset()  # drops the frame in flight
    assert s.flush() == []
