"""The batched CUDA-graph path (model/graphed.py for B streams, model/batched_step.py) against the eager
batched step, on CPU.

As in test_perf_graphed.py, ``capture=False`` replays the segments as eager calls in exactly the order the
graphs replay on CUDA, over the same static `[B, ...]` buffers, so an error in how a batch is cut (the
`[B, P, C]` <-> `[1, B*P, C]` hand-over at the global blocks, per-stream frame indices, the camera head's
per-stream history slots and masks) changes the outputs. The camera graph is per set of streams: a second
set of B streams replays the same aggregator segments with its own camera segment.
"""

from __future__ import annotations

import pytest
import torch
from tiny_stream import tiny_model

import lingbot_map_ros.model.batched_step as batched_step
from lingbot_map_ros.model import LingBotMap, StreamConfig
from lingbot_map_ros.model.graphed import GraphedStreamStep

HW = (28, 56)
S0 = 3
B = 2


@pytest.fixture(scope="module")
def model() -> LingBotMap:
    return tiny_model()


def _streams(model: LingBotMap, n: int, images: torch.Tensor) -> list:
    config = StreamConfig(scale_frames=S0, sliding_window=4, max_window=8, camera_history=6)  # ring + scratch
    pool = model.new_pool(streams=n)
    states = [model.new_stream(config, pool) for _ in range(n)]
    for i, state in enumerate(states):
        model.step(images[i, :S0], state)
    return states


def test_segmented_batch_equals_eager_batch(model: LingBotMap, monkeypatch: pytest.MonkeyPatch) -> None:
    """4 streams stepped as two batches of 2 ({0, 1} and {2, 3}, then {1, 2}) through one set of segments
    captured for B = 2, against the same streams stepped by the eager batched path."""
    torch.manual_seed(3)
    frames = 14
    images = torch.rand(4, S0 + frames, 3, *HW)
    eager, segmented = _streams(model, 4, images), _streams(model, 4, images)
    graphed = GraphedStreamStep(model, [s.camera for s in segmented[:B]], HW, S0, capture=False)
    made: list[int] = []

    def graphed_batch(model_, states, image_hw):
        made.append(len(states))
        return graphed if states[0] in segmented else None

    monkeypatch.setattr(batched_step, "graphed_batch", graphed_batch)
    groups = [(0, 1), (2, 3), (1, 2)]
    for t in range(S0, S0 + frames):
        group = list(groups[t % len(groups)])
        keyframes = [(t + i) % 3 != 1 for i in group]
        batch = images[group, t]
        a = model.step_batch(batch, [eager[i] for i in group], keyframes, graphs=False)
        b = model.step_batch(batch, [segmented[i] for i in group], keyframes)
        for x, y in zip(a, b, strict=True):
            for name in ("pose_enc", "pose_enc_list", "pose_enc_raw_list", "depth", "depth_conf"):
                torch.testing.assert_close(getattr(y, name), getattr(x, name), rtol=1e-5, atol=1e-5)
    for e, s in zip(eager, segmented, strict=True):
        assert e.frames_stored == s.frames_stored and e.camera.stored == s.camera.stored
    assert len(graphed._camera_graphs) == len(groups)  # one camera segment per set of streams
    assert made and set(made) == {B}


def test_graphs_of_a_batch_reject_other_batch_sizes(model: LingBotMap) -> None:
    states = [model.new_stream(StreamConfig(scale_frames=S0)) for _ in range(3)]
    graphed = GraphedStreamStep(model, [s.camera for s in states[:2]], HW, S0, capture=False)
    with pytest.raises(ValueError, match="batch 2"):
        graphed.run(torch.rand(3, 3, *HW), None, [S0] * 3, [True] * 3, histories=[s.camera for s in states])
    with pytest.raises(ValueError, match="2 camera histories"):
        graphed.camera_graph([s.camera for s in states])
    with pytest.raises(ValueError, match="one capacity"):
        other = model.new_stream(StreamConfig(scale_frames=S0, camera_history=S0 + 2))
        GraphedStreamStep(model, [states[0].camera, other.camera], HW, S0, capture=False)


def test_batches_run_eagerly_on_cpu(model: LingBotMap) -> None:
    assert batched_step.graphed_batch(model, [model.new_stream(StreamConfig(scale_frames=S0))], HW) is None
    assert model.batch_graphs == {}
