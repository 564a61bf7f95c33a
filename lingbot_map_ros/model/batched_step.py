"""`LingBotMap.step_batch`: one streaming frame of each of B streams (cameras) in one pass of the network.

The B frames go through the aggregator as one `[B, P, C]` batch: the frame blocks attend within each frame
(as for the S frames of an anchor step), the global blocks attend per stream through one batched KV-cache
step over the streams' shared pool (`cache.batch.begin_batch`: each stream its own visible set, its own
keyframe or roll back, and its own temporal RoPE index = that stream's `frames_stored`). The depth head runs
on the batch; the camera head runs its refinement passes on the B camera tokens together, each token
attending over its own stream's camera history (`model/camera_history.py`).

Only streaming steps (S = 1 per stream, after the anchor phase) are batched: the anchor step of a stream
(S = scale_frames frames, bidirectional) runs on its own through `LingBotMap.step`, which also serves
B = 1 with its CUDA-graph path. On CUDA a batched step replays the CUDA graphs captured for its batch size
(`graphed_batch`, model/graphed.py; `graphs=False` runs it eagerly). All frames of one batch have one
resolution (the caller groups streams by resolution).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from lingbot_map_ros.cache.batch import BatchCacheStep, begin_batch, end_batch
from lingbot_map_ros.model.camera_head import CameraHead
from lingbot_map_ros.model.camera_history import CameraHistory, CameraStep
from lingbot_map_ros.model.graphed import GraphedStreamStep
from lingbot_map_ros.model.layers import AttendFn
from lingbot_map_ros.model.stream import StepOutput, StreamState

if TYPE_CHECKING:
    from lingbot_map_ros.model.lingbot_map import LingBotMap


def batched_step(
    model: LingBotMap,
    images: torch.Tensor,
    states: list[StreamState],
    keyframes: list[bool],
    graphs: bool = True,
) -> list[StepOutput]:
    """Run frame i of `images` `[B, 3, H, W]` (RGB in [0, 1], model device) as the next frame of stream
    `states[i]`, a keyframe iff `keyframes[i]`; `graphs` False: the eager path even where graphs apply.

    Every state must be past its anchor phase, distinct, and keep its KV cache in the same shared pool
    (`model.new_stream(config, pool)`). Returns B `StepOutput`s equal (up to float reassociation in the
    batched matrix products) to B separate `model.step` calls. On an error every keyframe stream is reset
    (its pools are partly written) and every non-keyframe stream rolled back, as `model.step` does.
    """
    _check_batch(model, images, states, keyframes)
    image_hw = (int(images.shape[-2]), int(images.shape[-1]))
    with torch.inference_mode():
        caches = [state.cache_for(image_hw) for state in states]
        indices = [c.frames_stored for c in caches]
        graphed = graphed_batch(model, states, image_hw) if graphs else None
        step = begin_batch(states[0].pool, caches, keyframes)
        if graphed is not None:
            return _run_graphed(graphed, images, states, keyframes, step, indices)
        try:
            with model._autocast():
                index = torch.tensor(indices, dtype=torch.long, device=model.device)
                layers, descriptors = model.aggregator(
                    images.to(model.precision.aggregator_dtype), step, index, states[0].config.scale_frames
                )
        except BaseException:
            _abandon(step, states, keyframes)
            raise
        end_batch(step)
        heads = [layer.to(model.precision.heads_dtype) for layer in layers]
        depth, conf = model.depth_head(heads, image_hw, model.config.num_special_tokens)
        pose_list, raw_list = batched_camera_head(
            model.camera_head,
            heads[-1][:, 0],
            [state.camera for state in states],
            keyframes,
            model.config.camera_num_iterations,
        )
    return [
        StepOutput(
            pose_enc=pose_list[i : i + 1, -1].float(),
            pose_enc_list=pose_list[i : i + 1].float(),
            pose_enc_raw_list=raw_list[i : i + 1].float(),
            depth=depth[i : i + 1].float(),
            depth_conf=conf[i : i + 1].float(),
            place_descriptor=descriptors[i : i + 1],
        )
        for i in range(len(states))
    ]


def graphed_batch(
    model: LingBotMap, states: list[StreamState], image_hw: tuple[int, int]
) -> GraphedStreamStep | None:
    """The captured graphs for a batch of these B streams at `image_hw`, or None where the eager path runs
    (CPU, `cuda_graphs` off). Captured on the first batch of each (B, resolution); kept by the model."""
    config = states[0].config
    if not config.cuda_graphs or model.device.type != "cuda":
        return None
    precision = (model.precision.aggregator_dtype, model.precision.heads_dtype)
    key = (
        len(states),
        image_hw,
        config.scale_frames,
        config.camera_history,
        config.compile_blocks,
        precision,
    )
    graphed = model.batch_graphs.get(key)
    if graphed is None:
        graphed = GraphedStreamStep(
            model,
            [state.camera for state in states],
            image_hw,
            config.scale_frames,
            compile_blocks=config.compile_blocks,
        )
        model.batch_graphs[key] = graphed
    return graphed


def _run_graphed(
    graphed: GraphedStreamStep,
    images: torch.Tensor,
    states: list[StreamState],
    keyframes: list[bool],
    step: BatchCacheStep,
    indices: list[int],
) -> list[StepOutput]:
    """The batch through the graphs (inside inference mode, `step` open); closes `step`."""
    model = graphed.model
    try:
        outputs = graphed.run(
            images.to(model.precision.aggregator_dtype),
            step,
            indices,
            keyframes,
            histories=[state.camera for state in states],
        )
    except BaseException:
        _abandon(step, states, keyframes)
        raise
    end_batch(step)
    # copies in float32: the graphs' outputs are overwritten by the next replay
    pose_list, raw_list, depth, conf, descriptors = (t.to(torch.float32, copy=True) for t in outputs)
    return [
        StepOutput(
            pose_enc=pose_list[i : i + 1, -1],
            pose_enc_list=pose_list[i : i + 1],
            pose_enc_raw_list=raw_list[i : i + 1],
            depth=depth[i : i + 1],
            depth_conf=conf[i : i + 1],
            place_descriptor=descriptors[i : i + 1],
        )
        for i in range(len(states))
    ]


def batched_camera_head(
    head: CameraHead,
    camera_tokens: torch.Tensor,
    histories: list[CameraHistory],
    keyframes: list[bool],
    num_iterations: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """camera_tokens `[B, 2C]`, one token of each of B streams -> (pose_enc_list, raw_list) `[B, iters, 9]`.

    The refinement passes run on the B tokens together; in each trunk block token i attends over
    `histories[i]` only (its keyframes and itself), and is appended to it when `keyframes[i]`.
    """
    steps = [history.begin(1, keyframe) for history, keyframe in zip(histories, keyframes, strict=True)]

    def attend_for(pass_index: int, block: int) -> AttendFn:
        def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:  # [1, H, B, D]
            return torch.cat(
                [
                    _one(history, cam_step, pass_index, block, q, k, v, i)
                    for i, (history, cam_step) in enumerate(zip(histories, steps, strict=True))
                ],
                dim=2,
            )

        return attend

    out = head.refine(camera_tokens, attend_for, num_iterations)
    for history, cam_step in zip(histories, steps, strict=True):
        history.end(cam_step)
    return out


def _one(
    history: CameraHistory,
    step: CameraStep,
    pass_index: int,
    block: int,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    i: int,
) -> torch.Tensor:
    """Token i of the batch through its own stream's history: q/k/v `[1, H, B, D]` -> `[1, H, 1, D]`."""
    token = slice(i, i + 1)
    return history.attend(step, pass_index, block, q[:, :, token], k[:, :, token], v[:, :, token])


def _abandon(step: BatchCacheStep, states: list[StreamState], keyframes: list[bool]) -> None:
    """After a failed batched step: reset keyframe streams (partly written pools), roll back the others."""
    for state, cache, cache_step, keyframe in zip(states, step.caches, step.steps, keyframes, strict=True):
        if keyframe:
            state.reset()
        else:
            cache.end_step(cache_step)


def _check_batch(
    model: LingBotMap, images: torch.Tensor, states: list[StreamState], keyframes: list[bool]
) -> None:
    if not states or len(states) != len(keyframes) or any(not isinstance(k, bool) for k in keyframes):
        raise ValueError(f"need one bool keyframe flag per state, got {len(states)} states, {keyframes!r}")
    if not isinstance(images, torch.Tensor) or images.dim() != 4 or images.shape[0] != len(states):
        shape = tuple(images.shape) if isinstance(images, torch.Tensor) else type(images).__name__
        raise ValueError(
            f"images must be [B, 3, H, W] with B = {len(states)} (one frame per stream), got {shape}"
        )
    if len({id(s) for s in states}) != len(states):
        raise ValueError("a stream appears twice in one batch")
    pool = states[0].pool
    for state in states:
        if state.in_anchor_phase:
            raise ValueError("step_batch takes streaming steps only; run a stream's anchor step with step()")
        if pool is None or state.pool is not pool:
            raise ValueError("every stream of a batch must keep its KV cache in the same shared pool")
        if state.config.scale_frames != states[0].config.scale_frames:
            raise ValueError("every stream of a batch must have the same scale_frames")
    model._check_images(images[:1], 1)  # dtype, device, patch multiples (S = 1 per stream)
