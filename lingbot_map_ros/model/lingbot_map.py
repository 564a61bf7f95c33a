"""`LingBotMap`: the streaming LingBot-Map network (aggregator + causal camera head + DPT depth head).

State-dict names equal the released checkpoints' (`aggregator.*`, `camera_head.*`, `depth_head.*`).
The streaming API (`new_stream`, `step`) is the model contract of docs/architecture.md.
"""

from __future__ import annotations

import contextlib

import torch
from torch import nn

from lingbot_map_ros.cache.shared_pool import SharedKVPool
from lingbot_map_ros.model.aggregator import Aggregator
from lingbot_map_ros.model.anchor_pass import AnchorPass
from lingbot_map_ros.model.batched_step import batched_step, graphed_batch
from lingbot_map_ros.model.camera_head import CameraHead
from lingbot_map_ros.model.config import ModelConfig, PrecisionPolicy
from lingbot_map_ros.model.dpt_head import DPTHead
from lingbot_map_ros.model.graphed import GraphedStreamStep
from lingbot_map_ros.model.pair_step import GraphedPairStep
from lingbot_map_ros.model.stream import StepOutput, StreamConfig, StreamState


class LingBotMap(nn.Module):
    """The network; build it with `build_model` (checkpoint.py) or `LingBotMap(ModelConfig.preset(...))`."""

    def __init__(self, config: ModelConfig, precision: PrecisionPolicy | None = None) -> None:
        super().__init__()
        self.config = config
        self.precision = precision or PrecisionPolicy()
        self.aggregator = Aggregator(config)
        self.camera_head = CameraHead(
            2 * config.embed_dim, config.camera_num_heads, config.camera_trunk_depth
        )
        self.depth_head = DPTHead(
            2 * config.embed_dim,
            config.patch_size,
            config.dpt_features,
            config.dpt_out_channels,
            config.dpt_head_features,
            config.dpt_frames_chunk,
        )
        # CUDA graphs of batched steps per (batch size, resolution, ...): model/batched_step.py
        self.batch_graphs: dict[tuple, GraphedStreamStep] = {}
        # CUDA graphs of the loop closer's two-frame pass per image size: model/pair_step.py `pair_graph`
        self.pair_graphs: dict[tuple[int, int], GraphedPairStep] = {}

    @property
    def device(self) -> torch.device:
        return self.aggregator.camera_token.device

    def set_precision(self, precision: PrecisionPolicy) -> LingBotMap:
        """Cast the aggregator to `precision.aggregator_dtype` and the heads to `precision.heads_dtype`.

        A reduced-precision aggregator also runs under autocast of that dtype (LayerNorm and softmax in fp32),
        as the reference does. Streams made before the change must be recreated (their cache dtype is fixed).
        """
        self.precision = precision
        self.aggregator.to(precision.aggregator_dtype)
        self.camera_head.to(precision.heads_dtype)
        self.depth_head.to(precision.heads_dtype)
        return self

    def new_stream(self, config: StreamConfig | None = None, pool: SharedKVPool | None = None) -> StreamState:
        """Fresh caches for one stream (camera history allocated now, the KV cache on the first step).

        ``pool``: keep the KV cache in this shared pool (several streams batched by `step_batch`).
        """
        dtype = self.precision.aggregator_dtype
        return StreamState(self.config, config or StreamConfig(), self.device, dtype, pool)

    def new_pool(self, backend: str = "auto", streams: int = 1) -> SharedKVPool:
        """An empty KV pool for ``streams`` streams of this model (its global-attention geometry, dtype)."""
        c = self.config
        return SharedKVPool(
            c.depth, c.num_heads, c.head_dim, self.precision.aggregator_dtype, self.device, backend, streams
        )

    def step_batch(
        self, images: torch.Tensor, states: list[StreamState], keyframes: list[bool], graphs: bool = True
    ) -> list[StepOutput]:
        """One streaming frame of each of B streams in one pass (CUDA graphs per batch size unless
        ``graphs`` is False); see `model/batched_step.py`."""
        return batched_step(self, images, states, keyframes, graphs)

    def warm_up_batch(self, states: list[StreamState], image_hw: tuple[int, int]) -> bool:
        """Capture the CUDA graphs of a batched step of these streams at network size `image_hw` now (the
        first batch would otherwise); False where batched steps run eagerly (CPU, `cuda_graphs` off)."""
        with torch.inference_mode():
            captured = graphed_batch(self, states, image_hw) is not None
        if captured:
            torch.cuda.synchronize(self.device)
            torch.cuda.empty_cache()  # the capture's side-stream blocks
        return captured

    def autocast(self) -> contextlib.AbstractContextManager:
        """Autocast to the aggregator's dtype (a null context in fp32)."""
        dtype = self.precision.aggregator_dtype
        if dtype == torch.float32:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=dtype)

    def check_images(self, images: torch.Tensor, anchor_frames: int | None = None) -> None:
        """Raise ValueError unless `images` is `[S, 3, H, W]` float on the model's device, H and W patch
        multiples, S = `anchor_frames` (an anchor step) or 1 (a streaming step, `anchor_frames` None)."""
        if not isinstance(images, torch.Tensor) or images.dim() != 4 or images.shape[1] != 3:
            shape = tuple(images.shape) if isinstance(images, torch.Tensor) else type(images).__name__
            raise ValueError(f"images must be a tensor [S, 3, H, W] (RGB in [0, 1]), got {shape}")
        if not images.is_floating_point():
            raise ValueError(f"images must be floating point in [0, 1], got {images.dtype}")
        patch = self.config.patch_size
        height, width = images.shape[-2:]
        if height % patch or width % patch or height < patch or width < patch:
            raise ValueError(
                f"image height and width must be positive multiples of {patch}, got {height}x{width}"
            )
        if images.device != self.device:
            raise ValueError(f"images must be on the model's device {self.device}, got {images.device}")
        expected = 1 if anchor_frames is None else anchor_frames
        if images.shape[0] != expected:
            phase = "a streaming step" if anchor_frames is None else "the anchor step"
            raise ValueError(f"{phase} takes S = {expected} frames, got {images.shape[0]}")

    @torch.inference_mode()
    def step(
        self,
        images: torch.Tensor,
        state: StreamState,
        keyframe: bool = True,
        keep_tokens: bool = False,
        depth: bool = True,
    ) -> StepOutput:
        """Run S frames of the stream.

        Args:
            images: `[S, 3, H, W]` float RGB in [0, 1] on the model's device. The first step after
                `new_stream`/`reset` is the anchor phase (S = scale_frames, bidirectional among them, all
                cached as never-evicted anchors); later steps take S = 1.
            state: the stream's caches.
            keyframe: keep the frames in the caches (False: attend, then roll back; anchors must be True).
            keep_tokens: also return the 4 aggregator outputs (debugging / parity).
            depth: run the depth head (False: `depth` and `depth_conf` are None; the caches and the pose are
                the same, the depth head reads nothing the stream keeps).
        """
        self.check_images(images, state.config.scale_frames if state.in_anchor_phase else None)
        if state.in_anchor_phase and not keyframe:
            raise ValueError("the anchor step must be a keyframe")
        image_hw = (int(images.shape[-2]), int(images.shape[-1]))
        cache = state.cache_for(image_hw)
        first_index = cache.frames_stored
        graphed = None if keep_tokens else self._graphed_step(state, images, image_hw)
        cache_step = cache.begin_step(images.shape[0], keyframe)
        try:
            images = images.to(self.precision.aggregator_dtype)
            if graphed is not None:  # the graphs' outputs are overwritten next step: copy them
                outputs = graphed.run(images, cache_step, first_index, keyframe, depth)
                pose_list, raw_list, depth_map, conf, descriptor = (
                    None if t is None else t.clone() for t in outputs
                )
            else:
                with self.autocast():
                    layers, descriptor = self.aggregator(
                        images, cache_step, first_index, state.config.scale_frames
                    )
        except BaseException:
            if keyframe:
                state.reset()  # a keyframe interrupted mid-way leaves the pools partly written
            else:
                cache.end_step(cache_step)
            raise
        cache.end_step(cache_step)

        if graphed is None:
            layers_heads = [layer.to(self.precision.heads_dtype) for layer in layers]
            depth_map = conf = None
            if depth:
                depth_map, conf = self.depth_head(layers_heads, image_hw, self.config.num_special_tokens)
            pose_list, raw_list = self.camera_head(
                layers_heads[-1][:, 0], state.camera, keyframe, self.config.camera_num_iterations
            )
        return StepOutput(
            pose_enc=pose_list[:, -1].float(),
            pose_enc_list=pose_list.float(),
            pose_enc_raw_list=raw_list.float(),
            depth=None if depth_map is None else depth_map.float(),
            depth_conf=None if conf is None else conf.float(),
            aggregated_tokens=layers if keep_tokens else None,
            place_descriptor=descriptor,
        )

    def begin_anchor_pass(self, images: torch.Tensor, state: StreamState, groups: int) -> AnchorPass:
        """The anchor step of `images` `[S0, 3, H, W]` (RGB in [0, 1] on the model's device) for the
        streaming `state`, cut into `groups` runs to interleave with its streaming steps; `install` then
        restarts the stream on it (model/anchor_pass.py: a re-anchor prepared beside the live stream)."""
        self.check_images(images, state.config.scale_frames)
        return AnchorPass(self, images, state, groups)

    def _graphed_step(
        self, state: StreamState, images: torch.Tensor, image_hw: tuple[int, int]
    ) -> GraphedStreamStep | None:
        """The stream's CUDA-graph fast path for this step, or None where the plain path runs.

        Graphs serve streaming steps (S = 1, after the anchor phase) on CUDA when `StreamConfig.cuda_graphs`;
        they are captured on the first such step at each resolution (docs/performance.md).
        """
        if not state.config.cuda_graphs or self.device.type != "cuda" or state.in_anchor_phase:
            return None
        if images.shape[0] != 1:
            return None
        graphed = state.graphed
        if graphed is None or graphed.image_hw != image_hw or graphed.model is not self:
            state.graphed = None  # release the old graphs' pool first
            state.graphed = GraphedStreamStep(
                self,
                state.camera,
                image_hw,
                state.config.scale_frames,
                compile_blocks=state.config.compile_blocks,
            )
            state.graphed.stage_hook = state.stage_hook
        return state.graphed
