"""The two-frame anchor step as a pure function (`pair_forward`) and its CUDA-graph replay
(`GraphedPairStep`): the loop closer's verification pass (engine/loop/verify.py, issue 31).

The anchor step of a fresh stream with S = 2 frames (`model.step` on a just-reset stream, `scale_frames` 2) is
a function of the two images alone: its global attentions see exactly the two frames' tokens (bidirectional,
no mask, no older frame), and its camera head's history holds exactly the two camera tokens. `pair_forward`
computes it without a stream: one `scaled_dot_product_attention` over the 2P tokens per global layer instead
of the KV cache (the same keys; their order is irrelevant without a mask), one over the 2 camera tokens per
trunk block instead of the camera history. So it needs no scratch KV pool, has fixed shapes per image size,
and is captured whole as ONE CUDA graph by `GraphedPairStep` (no eager segment, unlike `model/graphed.py`'s
streaming step, whose key count grows): a replay costs the host one launch instead of ~3,000. The graphs are
kept by the model (`LingBotMap.pair_graphs`, one per image size: `pair_graph`), so the node captures them at
configure (its warm-up) and the first verification pass does not stall the live stream with a capture.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Protocol

import torch
import torch.nn.functional as F

from lingbot_map_ros.model.layers import AttendFn
from lingbot_map_ros.model.network import StepNetwork

#: Frames of a pair pass (also its `num_scale_frames`: both are anchors).
PAIR = 2
#: CUDA's least stream priority (larger numbers are lower; CUDA's range is 0 .. -5): the default stream's too.
LOWEST_PRIORITY = 0

PairOutputs = tuple[torch.Tensor, torch.Tensor, torch.Tensor]


class PairNetwork(StepNetwork, Protocol):
    """What a pair pass uses of `LingBotMap` (which imports this module): the network's parts and its
    per-image-size pair graphs (`pair_graph`)."""

    pair_graphs: dict[tuple[int, int], GraphedPairStep]


_CAPTURING = threading.Lock()


class _FullAttention:
    """`GlobalAttentionStep` of a cache-less anchor step: every query attends over all T tokens of the step.

    q, k, v `[T, H, D]` -> `[T, H, D]` (the cache's layout and the torch backend's call on it)."""

    def attend(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        out = F.scaled_dot_product_attention(*(t.transpose(0, 1).unsqueeze(0) for t in (q, k, v)))
        return out[0].transpose(0, 1).contiguous()


def _camera_attend(pass_index: int, block: int) -> AttendFn:
    """The camera history of the pair: the two tokens themselves, in float32 (the history's dtype)."""

    def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:  # [1, H, 2, D]
        return F.scaled_dot_product_attention(q.float(), k.float(), v.float())

    return attend


def _aggregator_autocast(model: PairNetwork) -> contextlib.AbstractContextManager:
    dtype = model.precision.aggregator_dtype
    if dtype == torch.float32:
        return contextlib.nullcontext()
    return torch.autocast(device_type=model.device.type, dtype=dtype, cache_enabled=False)


@torch.inference_mode()
def pair_forward(model: PairNetwork, images: torch.Tensor) -> PairOutputs:
    """The anchor step of a fresh 2-frame stream (module doc).

    images `[2, 3, H, W]` float RGB in [0, 1] on the model's device (H, W multiples of the patch size).
    Returns float32 pose_enc `[2, 9]` (camera-to-world of the pair's own frame), depth `[2, H, W]`,
    depth_conf `[2, H, W]`: `model.step`'s outputs for the same frames on a reset stream, up to kernel choice.
    """
    config = model.config
    if images.dim() != 4 or images.shape[0] != PAIR or images.shape[1] != 3:
        raise ValueError(f"a pair pass takes images [2, 3, H, W], got {tuple(images.shape)}")
    image_hw = (int(images.shape[-2]), int(images.shape[-1]))
    with _aggregator_autocast(model):
        layers, _ = model.aggregator(images.to(model.precision.aggregator_dtype), _FullAttention(), 0, PAIR)
    heads = [layer.to(model.precision.heads_dtype) for layer in layers]
    depth, conf = model.depth_head(heads, image_hw, config.num_special_tokens)
    pose_list, _ = model.camera_head.refine(heads[-1][:, 0], _camera_attend, config.camera_num_iterations)
    return pose_list[:, -1].float(), depth.float(), conf.float()


def pair_graph(model: PairNetwork, image_hw: tuple[int, int]) -> GraphedPairStep:
    """The model's captured pair pass at `image_hw` (captured now on first use, then kept by the model in
    `pair_graphs`; needs CUDA). Replays run on the caller's current stream."""
    with _CAPTURING:  # two callers (offline: several cameras' closers) capture one graph, not two
        graphed = model.pair_graphs.get(image_hw)
        if graphed is None:
            graphed = model.pair_graphs[image_hw] = GraphedPairStep(model, image_hw)
        return graphed


class GraphedPairStep:
    """`pair_forward` at one image size captured as one CUDA graph, with a static input and static outputs.

    Args:
        model: the network (eval, in its final precision; weights must not be replaced later).
        image_hw: (H, W) of the pair's images, multiples of the patch size.
        stream: the CUDA stream of the warm-up, the capture and every replay (`stream`; default a new one of
            CUDA's lowest priority): replays of one graph share its static buffers, so they must be ordered
            on one stream whoever launches them (several cameras' loop closers, one model).
        capture: False keeps `pair_forward` as a plain call (no CUDA needed: the CPU tests check the static
            input and outputs with it).

    `pixels` `[2, H, W, 3]` uint8 is the input (written on `stream` before `replay`); `pose_enc`, `depth`,
    `conf` (as `pair_forward`'s) are the outputs, overwritten by the next replay (read them on `stream`).
    Capture allocates from a memory pool of its own, about the pass's eager peak, held while this lives.
    """

    def __init__(
        self,
        model: PairNetwork,
        image_hw: tuple[int, int],
        stream: torch.cuda.Stream | None = None,
        capture: bool = True,
    ) -> None:
        patch = model.config.patch_size
        if image_hw[0] % patch or image_hw[1] % patch or min(image_hw) < patch:
            raise ValueError(f"pair image height and width must be multiples of {patch}, got {image_hw}")
        device = model.device
        if capture and device.type != "cuda":
            raise ValueError(f"CUDA graphs need the model on a CUDA device, got {device}")
        self.model = model
        self.image_hw = image_hw
        generator = torch.Generator(device=device).manual_seed(0)
        # random, not zeros, so the warm-up sees realistic values
        self.pixels = torch.randint(
            0, 256, (PAIR, *image_hw, 3), generator=generator, device=device, dtype=torch.uint8
        )
        self.pose_enc = self.depth = self.conf = torch.empty(0)
        self._graph: torch.cuda.CUDAGraph | None = None
        self.stream: torch.cuda.Stream | None = None
        if not capture:
            self._forward()
            return
        stream = self.stream = stream or torch.cuda.Stream(device, priority=LOWEST_PRIORITY)
        stream.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(stream):
            self._forward()  # warm-up: library handles, cached constants, kernel choice
        self._graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(
            self._graph,
            pool=torch.cuda.graph_pool_handle(),
            stream=stream,
            capture_error_mode="thread_local",
        ):
            self._forward()
        torch.cuda.current_stream(device).wait_stream(stream)

    def replay(self) -> None:
        """The pass over `pixels` into the static outputs, on the current stream (the caller's: `stream`)."""
        if self._graph is None:
            self._forward()
        else:
            self._graph.replay()

    def _forward(self) -> None:
        images = self.pixels.permute(0, 3, 1, 2).float().div(255.0)
        self.pose_enc, self.depth, self.conf = pair_forward(self.model, images)
