"""The loop closer's two-frame pass without a stream (model/pair_step.py, issue 31) vs the scratch stream.

`pair_forward` replaces the KV cache and the camera history of a fresh 2-frame stream by full attention over
the step's own tokens; `GraphedPairStep` runs it from a static uint8 input into static outputs (on CUDA one
CUDA graph; here, ``capture=False``, the same call eagerly). Both must give what the verifier's eager pass
(`model.step` in a reset scratch stream) gives, on CPU in float32 up to float reassociation.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from tiny_stream import tiny_model

from lingbot_map_ros.engine.loop import PairVerifier
from lingbot_map_ros.model import LingBotMap
from lingbot_map_ros.model.pair_step import GraphedPairStep, pair_forward

HW = (28, 56)


@pytest.fixture(scope="module")
def model() -> LingBotMap:
    return tiny_model()


def _pair(seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, (*HW, 3), dtype=np.uint8), rng.integers(0, 256, (*HW, 3), dtype=np.uint8)


def test_pair_step_equals_the_scratch_stream_pass(model: LingBotMap) -> None:
    verifier = PairVerifier(model)
    assert not verifier.graphs  # CPU: the eager scratch stream
    step = GraphedPairStep(model, HW, capture=False)
    previous = None
    for seed in (1, 2):  # a second pair through the same static buffers
        image_a, image_b = _pair(seed)
        expected = verifier.pair_pass(image_a, image_b)
        step.pixels.copy_(torch.from_numpy(np.stack([image_a, image_b])))
        step.replay()
        got = (step.pose_enc, step.depth, step.conf)
        assert [tuple(t.shape) for t in got] == [(2, 9), (2, *HW), (2, *HW)]
        for name, a, b in zip(("pose_enc", "depth", "conf"), got, expected, strict=True):
            assert a.dtype == torch.float32, name
            np.testing.assert_allclose(a.numpy(), b, rtol=1e-5, atol=1e-5, err_msg=name)
        if previous is not None:
            assert not np.allclose(previous, expected[1])  # the pairs differ: not a stale output
        previous = expected[1]
    images = torch.from_numpy(np.stack(_pair(1))).permute(0, 3, 1, 2).float() / 255.0
    pose_enc, _, _ = pair_forward(model, images)
    np.testing.assert_allclose(pose_enc.numpy(), verifier.pair_pass(*_pair(1))[0], rtol=1e-5, atol=1e-5)


def test_pair_step_checks_its_input(model: LingBotMap) -> None:
    with pytest.raises(ValueError, match="CUDA"):
        GraphedPairStep(model, HW)
    with pytest.raises(ValueError, match="multiples of 14"):
        GraphedPairStep(model, (30, 56), capture=False)
    with pytest.raises(ValueError, match=r"\[2, 3, H, W\]"):
        pair_forward(model, torch.rand(3, 3, *HW))
