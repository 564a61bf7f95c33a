"""The CUDA-graph fast path's segmentation (model/graphed.py) against the plain path, on CPU.

On CPU the segments are replayed as eager calls (``capture=False``) in exactly the order the graphs replay
on CUDA, with the same static buffers between them, so any error in where the step is cut (residuals,
intermediate outputs, RoPE tables, the attention hand-over) changes the outputs. Keyframes and non-keyframes
are interleaved so the cache's roll back runs between segmented steps too.
"""

from __future__ import annotations

import pytest
import torch
from tiny_stream import tiny_model

from lingbot_map_ros.model import LingBotMap, StreamConfig
from lingbot_map_ros.model.graphed import GraphedStreamStep

HW = (28, 56)
S0 = 3


@pytest.fixture(scope="module")
def model() -> LingBotMap:
    return tiny_model()


def test_segmented_step_equals_plain_step(model: LingBotMap, monkeypatch: pytest.MonkeyPatch) -> None:
    torch.manual_seed(1)
    images = torch.rand(S0 + 12, 3, *HW)
    config = StreamConfig(scale_frames=S0, sliding_window=4, max_window=8, camera_history=6)  # ring + scratch
    plain, segmented = model.new_stream(config), model.new_stream(config)
    model.step(images[:S0], plain)
    model.step(images[:S0], segmented)
    segmented.graphed = GraphedStreamStep(model, segmented.camera, HW, S0, capture=False)
    plain_path = model._graphed_step

    def graphed_step(state, *args):
        return state.graphed if state is segmented else plain_path(state, *args)

    monkeypatch.setattr(model, "_graphed_step", graphed_step)
    stages: list[str] = []
    segmented.graphed.stage_hook = stages.append
    previous = None
    for index in range(S0, images.shape[0]):
        keyframe = index % 3 != 1
        a = model.step(images[index : index + 1], plain, keyframe=keyframe)
        b = model.step(images[index : index + 1], segmented, keyframe=keyframe)
        for name in ("pose_enc", "pose_enc_list", "depth", "depth_conf"):
            torch.testing.assert_close(getattr(b, name), getattr(a, name), rtol=1e-6, atol=1e-6)
        if previous is not None:  # outputs are copies, not views of the static buffers
            assert not torch.equal(previous, b.depth)
        previous = b.depth
    assert plain.frames_stored == segmented.frames_stored
    depth = model.config.depth
    assert stages[: 2 * depth + 3] == ["graph", "attention"] * depth + ["graph", "heads", "camera"]


def test_graphs_need_cuda(model: LingBotMap) -> None:
    with pytest.raises(ValueError, match="CUDA"):
        GraphedStreamStep(model, model.new_stream().camera, HW, S0)


def test_plain_path_on_cpu_even_with_cuda_graphs_requested(model: LingBotMap) -> None:
    state = model.new_stream(StreamConfig(scale_frames=S0, sliding_window=4, max_window=8, cuda_graphs=True))
    model.step(torch.rand(S0, 3, *HW), state)
    model.step(torch.rand(1, 3, *HW), state)
    assert state.graphed is None


@pytest.mark.slow
def test_compiled_regions_equal_plain_step(model: LingBotMap, monkeypatch: pytest.MonkeyPatch) -> None:
    """`compile_blocks`: the four torch.compile regions (one per block kind, shared by all layers) give the
    plain path's outputs (float32 on CPU: only fused rounding differs)."""
    torch.manual_seed(2)
    images = torch.rand(S0 + 4, 3, *HW)
    config = StreamConfig(scale_frames=S0, sliding_window=4, max_window=8)
    plain, compiled = model.new_stream(config), model.new_stream(config)
    model.step(images[:S0], plain)
    model.step(images[:S0], compiled)
    with torch.inference_mode():
        compiled.graphed = GraphedStreamStep(
            model, compiled.camera, HW, S0, capture=False, compile_blocks=True
        )
    plain_path = model._graphed_step

    def graphed_step(state, *args):
        return state.graphed if state is compiled else plain_path(state, *args)

    monkeypatch.setattr(model, "_graphed_step", graphed_step)
    for index in range(S0, images.shape[0]):
        a = model.step(images[index : index + 1], plain)
        b = model.step(images[index : index + 1], compiled)
        for name in ("pose_enc", "depth", "depth_conf"):
            torch.testing.assert_close(getattr(b, name), getattr(a, name), rtol=1e-4, atol=1e-5)


def test_segmented_step_without_depth_skips_only_the_depth_head(
    model: LingBotMap, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 22: `step(..., depth=False)` on the segmented path skips the depth segment; the pose and the
    caches are those of the step with depth (the next frames' outputs are equal too)."""
    torch.manual_seed(2)
    images = torch.rand(S0 + 6, 3, *HW)
    config = StreamConfig(scale_frames=S0, sliding_window=4, max_window=8, camera_history=6)
    full, skipping = model.new_stream(config), model.new_stream(config)
    model.step(images[:S0], full)
    model.step(images[:S0], skipping)
    full.graphed = GraphedStreamStep(model, full.camera, HW, S0, capture=False)
    skipping.graphed = GraphedStreamStep(model, skipping.camera, HW, S0, capture=False)
    monkeypatch.setattr(model, "_graphed_step", lambda state, *args: state.graphed)
    segments_run: list[int] = []
    depth_segment = skipping.graphed._graphs[-2]
    skipping.graphed._graphs[-2] = lambda: (segments_run.append(1), depth_segment())
    for index in range(S0, images.shape[0]):
        with_depth = index % 2 == 0
        a = model.step(images[index : index + 1], full)
        b = model.step(images[index : index + 1], skipping, depth=with_depth)
        torch.testing.assert_close(b.pose_enc_list, a.pose_enc_list, rtol=0, atol=0)
        if with_depth:
            torch.testing.assert_close(b.depth, a.depth, rtol=0, atol=0)
        else:
            assert b.depth is None and b.depth_conf is None
    assert len(segments_run) == 3  # the depth head ran for the 3 steps that wanted it
    plain = model.new_stream(config)
    model.step(images[:S0], plain)
    out = model.step(images[S0 : S0 + 1], plain, depth=False)  # the plain path too
    assert out.depth is None and out.depth_conf is None and out.pose_enc.shape == (1, 9)
