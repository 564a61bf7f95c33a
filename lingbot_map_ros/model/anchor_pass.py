"""`AnchorPass`: a stream's anchor step cut into parts that run one group at a time between streaming
steps, beside the live stream, then take over its caches at once (a re-anchor that does not stall the poses,
issue 31).

`LingBotMap.step` on an empty stream runs the S0 anchor frames in one call: DINOv2 tokens, the block pairs
with bidirectional global attention among the S0 frames, the depth head, the camera head. Here the same
work is a list of parts, each small enough to sit between two live steps:

    backbone i     DINOv2 patch tokens of anchor frame i                               (i = 0 .. S0-1)
    layer l        block pair l on the S0 frames; its global attention is over the S0 frames' own K/V,
                   which are kept in side buffers [depth, S0*P, H, D] (cache dtype)   (l = 0 .. depth-1)
    depth i        the depth head on frame i                                            (i = 0 .. S0-1)
    camera         the camera head on the S0 camera tokens, into a camera history of its own (S0 slots)

The parts are grouped into ``groups`` runs of about equal cost (`PART_COSTS`); `advance` runs the next group.
Nothing of the live stream is read or written until `install`, which resets the stream and writes the kept
K/V as its committed anchor step (the same pool contents as `step`'s anchor step) and the camera anchors into
its camera history: GPU copies, no model work. Same modules, dtypes and autocast as the one-call anchor step,
so outputs and caches equal it up to the rounding of running the backbone and depth head frame by frame.
Extra GPU memory while a pass is under way: the side K/V (the anchors' share of the KV pool, ~0.8 GiB at
518x378 bf16) and the 4 intermediate outputs; the depth head's activations are one frame's instead of S0's.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import torch

from lingbot_map_ros.cache.backends import make_backend
from lingbot_map_ros.model.aggregator import to_cache_layout
from lingbot_map_ros.model.camera_history import CameraHistory
from lingbot_map_ros.model.network import StepNetwork
from lingbot_map_ros.model.stream import StepOutput, StreamState

#: Relative cost of one part (units: one transformer block over one frame's tokens). Only the grouping
#: uses them; the DINOv2 frame is dino_depth blocks over ~1.37x the tokens, a block pair on S0 frames 2*S0
#: blocks, the fp32 depth head of one frame about as much as the backbone (an estimate: docs/performance.md).
PART_COSTS = {"backbone": 1.4, "layer": 2.0, "depth": 1.4, "camera": 1.0}


def count_parts(depth: int, scale_frames: int) -> int:
    """Parts of the anchor pass of `scale_frames` frames through a model of `depth` block pairs."""
    return 2 * scale_frames + depth + 1


class AnchorPass:
    """The anchor step of `images` `[S0, 3, H, W]` (in [0, 1], on the model's device) for the stream `state`,
    in `groups` runs (at most one per part). `state` is only read for its geometry until `install`."""

    def __init__(self, model: StepNetwork, images: torch.Tensor, state: StreamState, groups: int) -> None:
        config = model.config
        frames = state.config.scale_frames
        if images.shape[0] != frames:
            raise ValueError(f"an anchor pass takes S0 = {frames} frames, got {images.shape[0]}")
        if groups < 1:
            raise ValueError(f"groups must be >= 1, got {groups}")
        self.model = model
        self.state = state
        self.image_hw = (int(images.shape[-2]), int(images.shape[-1]))
        self.images = images.to(model.precision.aggregator_dtype)
        self.frames = frames
        cache_config = state.cache_for(self.image_hw).config  # the live cache's geometry (not touched)
        self._tokens = frames * cache_config.tokens_per_frame
        self._attention = make_backend("torch", cache_config, self._tokens)
        self._attention.plan(0, self._tokens, self._tokens, 0, True)
        shape = (config.depth, self._tokens, config.num_heads, config.head_dim)
        with torch.inference_mode():
            self.k = torch.empty(shape, dtype=cache_config.dtype, device=cache_config.device)
            self.v = torch.empty_like(self.k)
        self.camera = CameraHistory(
            config.camera_num_iterations,
            config.camera_trunk_depth,
            config.camera_num_heads,
            2 * config.embed_dim // config.camera_num_heads,
            frames,
            model.device,
        )
        self._patches: list[torch.Tensor] = []
        self._x = torch.empty(0)
        self._rotations: tuple = ()
        self._layers: list[torch.Tensor] = []
        self._depth: list[tuple[torch.Tensor, torch.Tensor]] = []
        self.output: StepOutput | None = None  # set by the camera part, the last
        parts: list[tuple[str, Callable[[], None]]] = [
            ("backbone", lambda i=i: self._backbone(i)) for i in range(frames)
        ]
        parts += [("layer", lambda layer=layer: self._layer(layer)) for layer in range(config.depth)]
        parts += [("depth", lambda i=i: self._depth_frame(i)) for i in range(frames)]
        parts.append(("camera", self._camera_head))
        self._groups = _group(parts, groups)

    @property
    def groups_left(self) -> int:
        return len(self._groups)

    @property
    def done(self) -> bool:
        """Every part has run: `output` is set and `install` may take over."""
        return not self._groups

    def advance(self) -> None:
        """Run the next group of parts (queued on the current CUDA stream; no host synchronisation)."""
        if self.done:
            raise RuntimeError("the anchor pass has run all its parts")
        group = self._groups.pop(0)
        with torch.inference_mode():
            for _, part in group:
                part()

    def finish(self) -> None:
        """Run every group left."""
        while not self.done:
            self.advance()

    def install(self) -> StepOutput:
        """Make the pass the stream's anchor step: reset `state`, commit the kept K/V as its anchors and the
        camera anchors into its camera history. Returns the anchor step's outputs (as `LingBotMap.step`)."""
        if self.output is None:
            raise RuntimeError("install() before the anchor pass is done")
        state = self.state
        state.reset()
        cache = state.cache_for(self.image_hw)
        with torch.inference_mode():
            step = cache.begin_step(self.frames, True, plan_backend=False)
            try:
                for layer in range(self.k.shape[0]):
                    step.write(layer, self.k[layer], self.v[layer])
                cache.end_step(step)
            except BaseException:
                state.reset()
                raise
            state.camera.install_anchors(self.camera)
        return self.output

    # ------------------------------------------------------------------------------------------ parts
    def _autocast(self) -> contextlib.AbstractContextManager:
        return self.model.autocast()

    def _backbone(self, frame: int) -> None:
        with self._autocast():
            self._patches.append(self.model.aggregator.backbone_tokens(self.images[frame : frame + 1]))
        if len(self._patches) == self.frames:
            indices = torch.arange(self.frames, device=self.images.device)
            patches, self._patches = torch.cat(self._patches), []
            with self._autocast():
                self._x, *rotations = self.model.aggregator.with_special_tokens(
                    patches, self.image_hw, indices, self.frames
                )
            self._rotations = tuple(rotations)

    def _layer(self, layer: int) -> None:
        def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            q, k, v = to_cache_layout(q, k, v)
            self.k[layer].copy_(k)
            self.v[layer].copy_(v)
            out = self._attention.run(q, self.k[layer], self.v[layer])
            return out.transpose(0, 1).unsqueeze(0)

        with self._autocast():
            self._x, output = self.model.aggregator.block_pair(layer, self._x, *self._rotations, attend)
        if output is not None:
            self._layers.append(output)
        if layer == self.model.config.depth - 1:
            self._x = torch.empty(0)

    def _depth_frame(self, frame: int) -> None:
        model = self.model
        layers = [layer[frame : frame + 1].to(model.precision.heads_dtype) for layer in self._layers]
        self._depth.append(model.depth_head(layers, self.image_hw, model.config.num_special_tokens))

    def _camera_head(self) -> None:
        model = self.model
        tokens = self._layers[-1][:, 0].to(model.precision.heads_dtype)
        pose_list, raw_list = model.camera_head(tokens, self.camera, True, model.config.camera_num_iterations)
        depth = torch.cat([d for d, _ in self._depth])
        conf = torch.cat([c for _, c in self._depth])
        self._layers, self._depth = [], []
        self.output = StepOutput(
            pose_enc=pose_list[:, -1].float(),
            pose_enc_list=pose_list.float(),
            pose_enc_raw_list=raw_list.float(),
            depth=depth.float(),
            depth_conf=conf.float(),
        )


def _group(
    parts: list[tuple[str, Callable[[], None]]], groups: int
) -> list[list[tuple[str, Callable[[], None]]]]:
    """Cut the ordered `parts` into min(`groups`, len(parts)) consecutive runs of about equal cost."""
    groups = min(groups, len(parts))
    costs = [PART_COSTS[name] for name, _ in parts]
    total = sum(costs)
    out: list[list[tuple[str, Callable[[], None]]]] = [[] for _ in range(groups)]
    spent, group = 0.0, -1
    for index, (part, cost) in enumerate(zip(parts, costs, strict=True)):
        # the group where this part's middle falls, never skipping one, leaving a part for each later one
        share = min(int((spent + cost / 2) / total * groups), groups - 1)
        group = max(min(max(share, group), group + 1), groups - (len(parts) - index))
        out[group].append(part)
        spent += cost
    return out
