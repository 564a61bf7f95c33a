"""Issue 22: `StreamingSession.push_overlapped` when a step fails to launch (CPU, tiny preset).

The node's inference thread runs the overlapped pipeline on CUDA, where an out-of-memory error is raised while
the next frame's step is being queued, with the frame before still in flight. That frame ran before the
failure: it is kept and comes back from the next call, so the frames dropped, the model calls and the poses
are exactly those of `push` with the same fault.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from fault_injection import FaultInjectingModel, parse_faults

from lingbot_map_ros.engine.config import SessionConfig
from lingbot_map_ros.engine.stream.session import StreamingSession
from lingbot_map_ros.model import ModelConfig, build_model

S0 = 3
FRAMES = 10


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return build_model(ModelConfig.preset("tiny"), device="cpu")


def _run(model, overlapped: bool) -> tuple[list, list[int], int]:
    """Push FRAMES frames through a session whose 4th model call (frame 5's step) raises out-of-memory:
    (results, indices of the frames whose push raised, model calls)."""
    faulty = FaultInjectingModel(model, parse_faults("oom@4"))
    config = SessionConfig(scale_frames=S0, sliding_window=4, max_window=8, image_width=56)
    session = StreamingSession(faulty, config)
    rng = np.random.default_rng(0)
    push = session.push_overlapped if overlapped else session.push
    results, raised = [], []
    for i in range(FRAMES):
        try:
            results += push(rng.integers(0, 256, (42, 56, 3), dtype=np.uint8), meta=i)
        except torch.cuda.OutOfMemoryError:
            raised.append(i)
    results += session.flush()
    return results, raised, faulty.calls


def test_a_failed_launch_keeps_the_frame_in_flight(model) -> None:
    want, want_raised, want_calls = _run(model, overlapped=False)
    got, raised, calls = _run(model, overlapped=True)
    assert raised == want_raised == [5]
    assert calls == want_calls  # no extra model call
    assert [r.meta for r in got] == [r.meta for r in want] == [0, 1, 2, 3, 4, 6, 7, 8, 9]  # frame 4 kept
    assert got[-1].segment == want[-1].segment == 1  # re-anchored on the kept keyframes
    for a, b in zip(want, got, strict=True):
        np.testing.assert_array_equal(b.pose_c2w, a.pose_c2w)
