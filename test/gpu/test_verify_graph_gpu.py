"""The graphed verification pass on its low-priority side stream (issue 31) vs the eager pass, on CUDA.

The tiny preset in bf16 at 378x518. (1) `PairVerifier` on CUDA replays `GraphedPairStep` on the side stream
(`SidePairPasses`); its outputs equal the eager scratch-stream pass within bf16 tolerance, for two pairs
through the same graph. (2) A pass launched right before each live step (so it runs beside it on the GPU)
leaves the live stream's results bit-exact, and its own results equal a pass run alone. Skipped without
CUDA. Run on the H200: ``python3 -m pytest -q --noconftest test/gpu/test_verify_graph_gpu.py``.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from lingbot_map_ros.engine.loop import PairVerifier
from lingbot_map_ros.engine.loop.pair_launch import SidePairPasses
from lingbot_map_ros.model import LingBotMap, ModelConfig, PrecisionPolicy, StreamConfig

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]

HW = (378, 518)
S0 = 3


def _model() -> LingBotMap:
    torch.manual_seed(0)
    device = torch.device("cuda")
    model = LingBotMap(ModelConfig.preset("tiny")).to(device).eval()
    return model.set_precision(PrecisionPolicy.for_device(device))


def _pairs(count: int) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(3)
    return [tuple(rng.integers(0, 256, (*HW, 3), dtype=np.uint8) for _ in range(2)) for _ in range(count)]


def _worst(got: tuple[np.ndarray, ...], expected: tuple[np.ndarray, ...]) -> tuple[float, float, float]:
    """Largest pose difference, median relative depth and confidence differences."""
    pose = float(np.abs(got[0] - expected[0]).max())
    depth = float(np.median(np.abs(got[1] - expected[1]) / np.maximum(np.abs(expected[1]), 1e-3)))
    conf = float(np.median(np.abs(got[2] - expected[2]) / np.abs(expected[2])))
    return pose, depth, conf


def test_graphed_side_stream_pass_equals_the_eager_pass() -> None:
    model = _model()
    graphed, eager = PairVerifier(model), PairVerifier(model, graphs=False)
    assert graphed.graphs and not eager.graphs
    charged: list[float] = []
    graphed.charge = charged.append
    for image_a, image_b in _pairs(2):
        got, expected = graphed.pair_pass(image_a, image_b), eager.pair_pass(image_a, image_b)
        assert all(np.isfinite(x).all() for x in got)
        pose, depth, conf = _worst(got, expected)
        assert pose < 5e-2 and depth < 2e-2 and conf < 2e-2, (pose, depth, conf)
    assert graphed.graph_error is None and list(model.pair_graphs) == [HW]  # captured once, kept by the model
    assert model.pair_graphs[HW].stream.priority == 0  # CUDA's lowest
    assert len(charged) == 2 and all(0.0 < s < 1.0 for s in charged)


def test_a_pass_beside_the_live_step_leaves_the_live_step_unchanged() -> None:
    model = _model()
    config = StreamConfig(scale_frames=S0, sliding_window=4, max_window=8, camera_history=12, backend="torch")
    alone, beside = model.new_stream(config), model.new_stream(config)
    frames = torch.rand(14, 3, *HW, generator=torch.Generator().manual_seed(1)).to("cuda")
    model.step(frames[:S0], alone)
    model.step(frames[:S0], beside)
    side = SidePairPasses(model)
    pairs = _pairs(3)
    passes_alone = []
    for image_a, image_b in pairs:
        side.stage(image_a, image_b)
        passes_alone.append(side.launch().wait()[0])  # the first launch captures
    for t in range(S0, frames.shape[0]):
        a = model.step(frames[t : t + 1], alone)
        image_a, image_b = pairs[t % len(pairs)]
        side.stage(image_a, image_b)
        launched = side.launch()  # queued on the side stream: runs while the live step below runs
        b = model.step(frames[t : t + 1], beside)
        result, _ = launched.wait()
        for name in ("pose_enc", "pose_enc_list", "depth", "depth_conf", "place_descriptor"):
            x, y = getattr(a, name), getattr(b, name)
            assert torch.equal(x, y), (t, name, float((x - y).abs().max()))
        for x, y in zip(result, passes_alone[t % len(pairs)], strict=True):
            np.testing.assert_array_equal(x, y)
