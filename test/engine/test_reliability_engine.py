"""Engine-level reliability (in-process, tiny preset on CPU): the `LINGBOT_MAP_FAULTS` grammar, recovery of a
`StreamingSession` from out-of-memory / NaN / errors injected into `model.step`, and a shortened soak of
benchmarks/soak.py (memory flat after the window fills, many long-stream boundaries)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from fault_injection import Fault, FaultInjectingModel, parse_faults

from lingbot_map_ros.engine.config import SessionConfig
from lingbot_map_ros.engine.stream.session import NonFiniteOutputError, StreamingSession
from lingbot_map_ros.model import LingBotMap, ModelConfig

S0 = 3
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def model() -> LingBotMap:
    torch.manual_seed(0)
    torch.set_num_threads(1)
    return LingBotMap(ModelConfig.preset("tiny")).eval()


def pan(n: int, hw: tuple[int, int] = (42, 74)) -> list[np.ndarray]:
    """n RGB uint8 frames of a horizontal pan over a seeded random texture."""
    texture = np.random.default_rng(1).integers(0, 256, size=(hw[0], hw[1] + 2 * n, 3), dtype=np.uint8)
    return [np.ascontiguousarray(texture[:, 2 * i : 2 * i + hw[1]]) for i in range(n)]


def session(model: torch.nn.Module) -> StreamingSession:
    config = SessionConfig(
        scale_frames=S0, sliding_window=4, max_window=8, image_width=56, max_stored_frames=32
    )
    return StreamingSession(model, config)


def test_fault_spec_grammar() -> None:
    assert parse_faults("oom@5, nan@2-3,delay@*:0.25,,") == (
        Fault("oom", 5, 5),
        Fault("nan", 2, 3),
        Fault("delay", 1, None, 0.25),
    )
    assert parse_faults("") == ()
    for bad in ("boom@1", "oom", "oom@x", "oom@0", "nan@5-3", "delay@1:-1", "delay@1:soon"):
        with pytest.raises(ValueError, match="LINGBOT_MAP_FAULTS"):
            parse_faults(bad)


@pytest.mark.parametrize(
    ("kind", "error"),
    [("oom", torch.cuda.OutOfMemoryError), ("nan", NonFiniteOutputError), ("error", RuntimeError)],
)
def test_a_failed_step_drops_the_frame_and_the_stream_carries_on(
    model: LingBotMap, kind: str, error: type[Exception]
) -> None:
    frames = pan(S0 + 6)
    wrapped = FaultInjectingModel(model, parse_faults(f"{kind}@3"))  # call 3 = streaming frame S0 + 1
    s = session(wrapped)
    results = [r for f in frames[: S0 + 1] for r in s.push(f)]
    assert [r.index for r in results] == list(range(S0 + 1))
    with pytest.raises(error, match="LINGBOT_MAP_FAULTS|non-finite"):
        s.push(frames[S0 + 1])
    stats = s.stats()
    assert (stats.recoveries_total, stats.epoch, stats.frames_stored) == (1, 0, 0)
    after = [r for f in frames[S0 + 2 :] for r in s.push(f)]
    assert [r.index for r in after] == list(range(S0 + 1, S0 + 5))  # the failed frame has no index
    assert all(r.epoch == 0 and r.segment == 1 for r in after)  # same map frame, re-anchored once
    assert all(np.isfinite(r.pose_c2w).all() and np.isfinite(r.depth).any() for r in after)
    # the re-anchor's S0 keyframes + the next step: call 4 re-anchors, so 4 + 4 frames -> 8 calls
    assert wrapped.calls == 8 and wrapped.injected == {kind: 1}


def test_a_failed_recovery_falls_back_to_a_clean_reset(model: LingBotMap) -> None:
    frames = pan(S0 + 6)
    wrapped = FaultInjectingModel(model, parse_faults("oom@3-4"))  # the step and the re-anchor after it fail
    s = session(wrapped)
    for f in frames[: S0 + 1]:
        s.push(f)
    for f in frames[S0 + 1 : S0 + 3]:
        with pytest.raises(torch.cuda.OutOfMemoryError):
            s.push(f)
    stats = s.stats()
    assert stats.epoch == 1 and stats.phase == 1 and "OutOfMemoryError" in stats.last_reset_reason
    results = [r for f in frames[S0 + 3 :] for r in s.push(f)]
    assert [r.index for r in results] == [0, 1, 2] and all(r.epoch == 1 for r in results)


def test_short_soak_memory_flat_across_many_boundaries() -> None:
    spec = importlib.util.spec_from_file_location("lingbot_soak_benchmark", REPO / "benchmarks" / "soak.py")
    soak = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = soak  # dataclasses resolve their module through sys.modules
    spec.loader.exec_module(soak)
    torch.set_num_threads(1)
    config = soak.SoakConfig(
        frames=500,
        width=28,
        source_width=56,
        scale_frames=4,
        sliding_window=8,
        max_window=8,
        max_stored_frames=20,
        sample_every=20,
        max_growth_mb=24.0,
    )
    report = soak.run_soak(config, progress=False)
    assert report.frames == 500 and report.reanchors >= 25
    assert report.passed, report.failures
    assert report.rss_growth_mb < 24.0 and len(report.boundary_frames) == report.reanchors
    assert report.boundary_step_max <= 10 * report.ordinary_step_median
