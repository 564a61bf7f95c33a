"""Issue 31: the loop closer's place descriptor comes from the live step, pooled from the encoder tokens
the step computes anyway, equal to the old second pass; no second encoder pass runs (docs/loop_closure.md)."""

from __future__ import annotations

import numpy as np

from lingbot_map_ros.engine.builder import EngineSpec, build_engine
from lingbot_map_ros.engine.config import SessionConfig
from lingbot_map_ros.engine.loop import LoopCloser, LoopClosureConfig, ModelDescriptor, PairVerifier
from lingbot_map_ros.engine.stream.preprocess import preprocess_geometry, resize_uint8
from lingbot_map_ros.tools.bags.synthetic_scene import SceneConfig
from lingbot_map_ros.tools.loop.loop_oracle import LoopScene


class CountingEncoder:
    """Wraps `aggregator.backbone_tokens` of one model: counts its calls and the frames they encoded."""

    def __init__(self, aggregator: object) -> None:
        self.inner = aggregator.backbone_tokens  # type: ignore[attr-defined]
        self.calls = 0
        self.frames = 0
        aggregator.backbone_tokens = self  # type: ignore[attr-defined]

    def __call__(self, images, run_block=None):  # noqa: ANN001, ANN204
        self.calls += 1
        self.frames += int(images.shape[0])
        return self.inner(images, run_block)


def test_live_descriptor_equals_the_second_pass_and_the_closer_runs_no_encoder_pass() -> None:
    """Every result carries the descriptor pooled inside its step, equal to `ModelDescriptor` (the old second
    pass) of its network image; the closer uses it: the only encoder calls while it adds keyframes are its
    verification passes (one two-frame call each), none per keyframe."""
    scene = LoopScene.render(SceneConfig(width=56, height=42, frames=6, supersample=1), turns=0.4)
    config = SessionConfig(scale_frames=2, sliding_window=4, max_window=4, image_width=56)
    session = build_engine(EngineSpec(preset="tiny", device="cpu", seed=0, session=config)).only
    model = session.model
    encoder = CountingEncoder(model.aggregator)
    loop_config = LoopClosureConfig(exclude_recent=1, min_similarity=-1.0, top_k=1, keyframe_translation=1e-6)
    second_pass = ModelDescriptor(model)
    closer = LoopCloser(loop_config, 56, second_pass, PairVerifier(model))
    results, closer_calls, closer_frames = [], 0, 0
    for i, image in enumerate(scene.images):
        step_calls = encoder.calls
        pushed = session.push(image, meta=i)
        assert encoder.calls - step_calls <= 1  # the live step: one encoder call (the anchor step's S0)
        for result in pushed:
            calls, frames = encoder.calls, encoder.frames
            closer.add(result, float(i))
            closer_calls += encoder.calls - calls
            closer_frames += encoder.frames - frames
            results.append(result)
    assert closer.stats.keyframes == len(results) and closer.stats.candidates >= 3
    assert closer_calls == closer.stats.candidates  # verification passes only: no descriptor pass
    assert closer_frames == 2 * closer.stats.candidates
    geometry = preprocess_geometry(scene.images[0].shape[:2], 56)
    for result, image in zip(results, scene.images, strict=True):
        assert result.place_descriptor is not None and result.place_descriptor.shape == (128,)
        old = second_pass(resize_uint8(image, geometry))
        np.testing.assert_allclose(result.place_descriptor, old, rtol=0, atol=1e-6)
        np.testing.assert_array_equal(closer.map.keyframes[result.index].descriptor, result.place_descriptor)
    # the descriptors tell frames apart (not one constant vector)
    first, last = results[0].place_descriptor, results[-1].place_descriptor
    assert float(first @ last) < 1.0 - 1e-4


def test_a_result_without_a_live_descriptor_falls_back_to_the_describe_function() -> None:
    """A model double returns no descriptor (`StepOutput.place_descriptor` None): the closer computes it with
    its `describe` (e.g. the oracle's thumbnail), as before."""
    scene = LoopScene.render(SceneConfig(width=56, height=42, frames=3, supersample=1), turns=0.2)
    config = SessionConfig(scale_frames=2, sliding_window=4, max_window=4, image_width=56)
    session = build_engine(EngineSpec(preset="tiny", device="cpu", seed=0, session=config)).only
    described: list[tuple[int, ...]] = []

    def describe(image: np.ndarray) -> np.ndarray:
        described.append(image.shape)
        return np.eye(8, dtype=np.float32)[len(described) % 8]

    closer = LoopCloser(LoopClosureConfig(keyframe_translation=1e-6), 56, describe, lambda a, b: None)  # type: ignore[arg-type]
    for i, image in enumerate(scene.images):
        for result in session.push(image, meta=i):
            result.place_descriptor = None
            closer.add(result, float(i))
    assert len(described) == closer.stats.keyframes == 3
    assert described[0] == (42, 56, 3)
