"""Issue 22: the depth head only where it is used (`SessionConfig.depth_every_n`,
engine/stream/depth_schedule.py).

CPU, tiny preset: which streaming frames run the depth head, that skipping it changes no pose before a
re-anchor (bit for bit) and keeps the re-anchor working (at least one kept keyframe has a depth), and that a
frame pushed with ``depth=True`` always gets one, through `push` and `push_overlapped`.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from lingbot_map_ros.engine.config import SessionConfig
from lingbot_map_ros.engine.result import PHASE_STREAMING
from lingbot_map_ros.engine.stream.depth_schedule import DepthSchedule
from lingbot_map_ros.engine.stream.session import StreamingSession
from lingbot_map_ros.model import ModelConfig, build_model

S0 = 3


def test_schedule_every_n_demand_and_the_reanchor_guarantee() -> None:
    every = DepthSchedule(1, S0)
    assert all(every.decide(j, keyframe=j % 2 == 0, demanded=False) for j in range(10))
    schedule = DepthSchedule(5, S0)
    got = [schedule.decide(j, keyframe=True, demanded=j == 7) for j in range(12)]
    # j % 5 == 0 at 0, 5, 10; demanded at 7; forced at 3 (after S0 - 1 keyframes without depth: 1, 2)
    assert [j for j, depth in enumerate(got) if depth] == [0, 3, 5, 7, 10]
    non_keyframes = DepthSchedule(4, S0)  # non-keyframes never force a depth
    got = [non_keyframes.decide(j, keyframe=False, demanded=False) for j in range(8)]
    assert [j for j, depth in enumerate(got) if depth] == [0, 4]
    with pytest.raises(ValueError, match="depth_every_n"):
        SessionConfig(depth_every_n=0)


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return build_model(ModelConfig.preset("tiny"), device="cpu")


def _session(model, every_n: int) -> StreamingSession:
    config = SessionConfig(
        scale_frames=S0,
        sliding_window=4,
        max_window=8,
        image_width=56,
        max_stored_frames=10,
        depth_every_n=every_n,
    )
    return StreamingSession(model, config)


def test_skipping_depth_keeps_the_poses_and_the_reanchor(model) -> None:
    rng = np.random.default_rng(0)
    frames = [rng.integers(0, 256, (42, 56, 3), dtype=np.uint8) for _ in range(16)]
    full, skipping = _session(model, 1), _session(model, 4)
    want = [r for f in frames for r in full.push(f)]
    got = [r for i, f in enumerate(frames) for r in skipping.push(f, depth=i == 12)]
    assert len(got) == len(want) == len(frames)
    assert skipping.stats().segment == full.stats().segment == 1  # re-anchored once, on kept keyframes
    for a, b in zip(want, got, strict=True):
        if b.segment == 0:  # before the re-anchor the pose is the same bit for bit
            np.testing.assert_array_equal(b.pose_c2w, a.pose_c2w)
        else:  # after it the scale comes from fewer depths: the same up to that estimate
            np.testing.assert_allclose(b.pose_c2w, a.pose_c2w, rtol=1e-3, atol=1e-3)
        if b.depth is None:
            assert b.phase == PHASE_STREAMING and b.depth_conf is None
        else:
            assert b.depth.shape == a.depth.shape and np.isfinite(b.depth_conf).all()
    without = [r.index for r in got if r.depth is None]
    assert without and len(without) < len(got) - S0  # some frames skipped the depth head, not all
    assert got[12].depth is not None  # demanded
    assert all(r.depth is not None for r in got[:S0])  # the anchors always have a depth


def test_overlapped_push_follows_the_same_schedule(model) -> None:
    rng = np.random.default_rng(1)
    frames = [rng.integers(0, 256, (42, 56, 3), dtype=np.uint8) for _ in range(9)]
    sync, overlapped = _session(model, 2), _session(model, 2)
    want = [r for f in frames for r in sync.push(f)]
    got = [r for f in frames for r in overlapped.push_overlapped(f)] + overlapped.flush()
    assert [r.depth is None for r in got] == [r.depth is None for r in want]
    assert any(r.depth is None for r in got)
    for a, b in zip(want, got, strict=True):
        np.testing.assert_array_equal(b.pose_c2w, a.pose_c2w)
