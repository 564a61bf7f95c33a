"""Batched streaming steps replayed as CUDA graphs (issue 33) vs the eager batched step, on CUDA.

The tiny preset in bf16 at 378x518: 4 streams of one shared pool stepped in batches of 2 and 3 (sets of
streams changing from round to round, so one set of aggregator graphs per batch size serves several camera
graphs), keyframes and non-keyframes mixed; the same frames through the eager batched path on 4 other
streams. Skipped without CUDA. Run on the H200:
``python3 -m pytest -q --noconftest test/gpu/test_batched_graphs_gpu.py``.
"""

from __future__ import annotations

import gc
import importlib.util

import pytest
import torch

from lingbot_map_ros.model import LingBotMap, ModelConfig, PrecisionPolicy, StreamConfig

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]

S0 = 3
needs_flashinfer = pytest.mark.skipif(
    importlib.util.find_spec("flashinfer") is None, reason="needs the flashinfer package"
)


def _model() -> LingBotMap:
    torch.manual_seed(0)
    device = torch.device("cuda")
    model = LingBotMap(ModelConfig.preset("tiny")).to(device).eval()
    return model.set_precision(PrecisionPolicy.for_device(device))


@pytest.mark.parametrize("backend", ["torch", pytest.param("flashinfer", marks=needs_flashinfer)])
def test_graphed_batches_equal_eager_batches(backend: str) -> None:
    model = _model()
    config = StreamConfig(
        scale_frames=S0, sliding_window=4, max_window=8, max_special_frames=64, camera_history=12,
        backend=backend, cuda_graphs=True,
    )  # fmt: skip
    graphed_pool, eager_pool = model.new_pool(backend, streams=4), model.new_pool(backend, streams=4)
    graphed = [model.new_stream(config, graphed_pool) for _ in range(4)]
    eager = [model.new_stream(config, eager_pool) for _ in range(4)]
    frames = torch.rand(4, 20, 3, 378, 518, generator=torch.Generator().manual_seed(1)).to("cuda")
    for i in range(4):
        model.step(frames[i, :S0], graphed[i])
        model.step(frames[i, :S0], eager[i])
    groups = [(0, 1), (2, 3), (0, 1, 2), (1, 3), (1, 2, 3)]
    worst_pose, worst_depth, worst_conf = 0.0, 0.0, 0.0
    for t in range(S0, 20):  # camera history 12: the ring and the scratch slot are used too
        group = list(groups[t % len(groups)])
        keyframes = [(t + i) % 3 != 1 for i in group]
        a = model.step_batch(frames[group, t], [graphed[i] for i in group], keyframes)
        b = model.step_batch(frames[group, t], [eager[i] for i in group], keyframes, graphs=False)
        for x, y in zip(a, b, strict=True):
            assert all(torch.isfinite(getattr(x, n)).all() for n in ("pose_enc", "depth", "depth_conf"))
            worst_pose = max(worst_pose, float((x.pose_enc_list - y.pose_enc_list).abs().max()))
            rel = (x.depth - y.depth).abs() / y.depth.abs().clamp_min(1e-3)
            worst_depth = max(worst_depth, float(rel.median()))
            worst_conf = max(worst_conf, float(((x.depth_conf - y.depth_conf) / y.depth_conf).abs().median()))
    assert worst_pose < 5e-2 and worst_depth < 2e-2 and worst_conf < 2e-2, (
        worst_pose,
        worst_depth,
        worst_conf,
    )
    for g, e in zip(graphed, eager, strict=True):
        assert g.frames_stored == e.frames_stored and g.camera.stored == e.camera.stored
    assert sorted(key[0] for key in model.batch_graphs) == [2, 3]  # one set of graphs per batch size
    batch_2 = next(g for key, g in model.batch_graphs.items() if key[0] == 2)
    assert len(batch_2._camera_graphs) == 3  # {0, 1}, {2, 3}, {1, 3}


def test_graphed_outputs_are_copies() -> None:
    """Two batches in a row: the first batch's outputs are not overwritten by the second's replay."""
    model = _model()
    config = StreamConfig(scale_frames=S0, sliding_window=4, max_window=8, camera_history=12)
    pool = model.new_pool(streams=2)
    states = [model.new_stream(config, pool) for _ in range(2)]
    frames = torch.rand(2, S0 + 2, 3, 378, 518, generator=torch.Generator().manual_seed(2)).to("cuda")
    for i in range(2):
        model.step(frames[i, :S0], states[i])
    first = model.step_batch(frames[:, S0], states, [True, True])
    kept = first[0].depth.clone()
    model.step_batch(frames[:, S0 + 1], states, [True, True])
    assert torch.equal(first[0].depth, kept)


def test_a_dead_set_of_streams_takes_its_camera_graph_with_it() -> None:
    """The batch graphs outlive the streams (they are the model's): a set of streams' camera graph is dropped
    when one of its streams is garbage-collected, so no history is kept alive and no id is ever reused."""
    model = _model()
    config = StreamConfig(scale_frames=S0, sliding_window=4, max_window=8, camera_history=12)
    frames = torch.rand(2, S0 + 1, 3, 378, 518, generator=torch.Generator().manual_seed(3)).to("cuda")

    def stream_pair() -> list:
        pool = model.new_pool(streams=2)
        states = [model.new_stream(config, pool) for _ in range(2)]
        for i in range(2):
            model.step(frames[i, :S0], states[i])
        model.step_batch(frames[:, S0], states, [True, True])
        return states

    first = stream_pair()
    graphed = next(iter(model.batch_graphs.values()))
    second = stream_pair()
    assert len(model.batch_graphs) == 1 and len(graphed._camera_graphs) == 2
    del second
    gc.collect()
    assert len(graphed._camera_graphs) == 1  # the first set's graph stays (its streams are alive)
    assert len(first) == 2
