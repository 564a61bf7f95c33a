"""CUDA-graph replay of a streaming step at one resolution: the fast path of `LingBotMap.step` (one stream,
S = 1 frame) and of `LingBotMap.step_batch` (B streams, one frame each, issue 33).

A streaming step has fixed shapes everywhere except the 24 global attentions (the visible key count grows
until the window fills and the special stream reaches its cap; cache slots move) and the camera head's
history attention (made fixed-shape by masking). The step is therefore cut at the global attentions into 27
graphs replayed around eager calls::

    graph 0      prepare (DINOv2 patch embed, special tokens, RoPE tables from a static frame index)
                 + the place descriptor pooled from the patch tokens (`aggregator.place_descriptor`)
                 + frame block 0 + global block 0 up to q, k, v                      (aggregator autocast)
    eager        CacheStep.attend(0, q, k, v) -> copied into the static `attended` buffer
    graph i      global block i-1 after its attention (+ intermediate output) + frame block i
                 + global block i up to q, k, v                                     (i = 1 .. depth-1)
    graph depth  global block depth-1 after its attention (+ intermediate output)
    graph heads  heads dtype cast, the camera head's input token                      (no autocast)
    graph depth  DPT depth head (replayed only for a step that wants depth, issue 22)  (no autocast)
    graph camera camera head: 4 passes x 4 trunk blocks; the history attention runs over the whole
                 preallocated history with a -inf bias after the visible prefix (slot and prefix length
                 are static tensors set per step), so its shape is fixed too

The graphs replay the kernels of the plain path (same modules, same autocast dtype), so outputs equal the
plain path's up to kernel selection (benchmarks/e2e.py --check). What the graphs remove is the host cost of
launching ~3,000 small kernels per frame one by one from Python (docs/performance.md).

A batch of B streams replays the same graphs on `[B, P, C]` frame tokens (`[1, B*P, C]` in the global blocks,
as the eager batched step); the B frames' global attentions are ONE eager `BatchCacheStep.attend` per layer
(cache/batch.py). The camera graph reads and writes the B streams' own histories, so it is captured per set of
histories (`camera_graph`: at most `MAX_CAMERA_GRAPHS` kept, each in its own small memory pool); the other
graphs share one pool. Inputs and outputs are static tensors owned by this object (memory fixed once
captured), overwritten by the next replay: `LingBotMap.step` and `step_batch` copy what they return.
"""

from __future__ import annotations

import contextlib
import os
import weakref
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from lingbot_map_ros.cache.config import StageHook
from lingbot_map_ros.model.aggregator import place_descriptor
from lingbot_map_ros.model.block_regions import block_regions
from lingbot_map_ros.model.camera_history import CameraHistory
from lingbot_map_ros.model.layers import AttendFn
from lingbot_map_ros.model.network import StepNetwork

if TYPE_CHECKING:
    from lingbot_map_ros.model.aggregator import GlobalAttentionStep

MAX_CAMERA_GRAPHS = 16  # camera graphs kept per batch graph (one per set of streams batched together)


class GraphedStreamStep:
    """The captured graphs of one model at one image size and batch size, with static inputs and outputs.

    Args:
        model: the network (on CUDA, eval, in its final precision; weights must not be replaced later).
        history: the stream's camera-head history (its buffers are read and written by the camera graph), or
            the B histories of a batch of B streams (B = the batch size these graphs serve; equal capacities).
        image_hw: (H, W) of the network input, multiples of the patch size.
        num_scale_frames: anchor frames of the stream (selects the scale-token variant; streaming frames
            always have an index >= this).
        capture: False keeps the segments as plain calls replayed eagerly in the same order (no CUDA
            needed): the tests check the segmentation against the plain path on CPU with it.
        compile_blocks: run the backbone blocks, the frame blocks and the two halves of the global blocks
            through `torch.compile` (regional: one compiled region serves all 24 layers) inside the graphs,
            fusing their element-wise work (norms, RoPE, casts); costs compile time on the first step.
    """

    def __init__(
        self,
        model: StepNetwork,
        history: CameraHistory | Sequence[CameraHistory],
        image_hw: tuple[int, int],
        num_scale_frames: int,
        capture: bool = True,
        compile_blocks: bool = False,
    ) -> None:
        device = model.device
        if capture and device.type != "cuda":
            raise ValueError(f"CUDA graphs need the model on a CUDA device, got {device}")
        config = model.config
        aggregator = model.aggregator
        self.model = model
        self.image_hw = image_hw
        self.num_scale_frames = num_scale_frames
        self.stage_hook: StageHook | None = None
        self._backbone_block, self._frame_block, self._global_inputs, self._global_finish = block_regions(
            compile_blocks
        )
        histories = (history,) if isinstance(history, CameraHistory) else tuple(history)
        if not histories or len({h.capacity for h in histories}) != 1:
            raise ValueError("need at least one camera history, all of one capacity")
        self.batch = batch = len(histories)
        dtype = model.precision.aggregator_dtype
        tokens = aggregator.tokens_per_frame(image_hw)
        generator = torch.Generator(device=device).manual_seed(0)
        # Static inputs (random, not zeros, so the warm-up runs see realistic values).
        self.image = torch.rand((batch, 3, *image_hw), generator=generator, device=device).to(dtype)
        self.frame_index = torch.full((batch,), num_scale_frames, dtype=torch.long, device=device)
        self.attended = torch.randn(
            (batch * tokens, config.num_heads, config.head_dim), generator=generator, device=device
        ).to(dtype)
        # Static outputs, filled in by the captures.
        self.qkv: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []
        self.layers: list[torch.Tensor] = []
        self.depth = self.conf = self.camera_tokens = self.pose_list = self.raw_list = torch.empty(0)
        self.descriptor = torch.empty(0)  # [B, C] float32, the place descriptors (graph 0)
        self.histories = histories
        capacity = histories[0].capacity
        self._slots = torch.arange(capacity + 1, device=device)
        # per stream: the history slot written (the scratch slot while capturing) and the visible prefix
        self.camera_slot = torch.full((batch,), capacity, dtype=torch.long, device=device)
        self.camera_visible = torch.full((batch,), capacity + 1, dtype=torch.long, device=device)
        self._camera_graphs: dict[tuple[int, ...], Callable[[], None]] = {}  # by the histories' ids
        self._frame_out = self._residual = torch.empty(0)
        self._heads_layers: list[torch.Tensor] = []  # the intermediate layers in the heads dtype
        self._rotations: tuple = ()
        self._capture_graphs = capture
        self._pool = torch.cuda.graph_pool_handle() if capture else None
        self._graphs: list[Callable[[], None]] = []  # CUDAGraph.replay, or the eager segment
        self._capture_all(dtype)

    # ------------------------------------------------------------------------------------------ replay
    def run(
        self,
        images: torch.Tensor,
        step: GlobalAttentionStep,
        first_index: int | Sequence[int],
        keyframe: bool | Sequence[bool],
        depth: bool = True,
        histories: Sequence[CameraHistory] | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, torch.Tensor | None, torch.Tensor]:
        """One streaming frame of each of the B streams through the aggregator and both heads.

        images `[B, 3, H, W]` in the aggregator dtype; `step` the open cache step of these frames (a
        `CacheStep`, or a `BatchCacheStep` of the B streams in batch order); `first_index` each frame's
        temporal index; `keyframe` whether each stream's camera history keeps its frame (an int / a bool for
        B = 1); `depth` False skips the depth head (depth and conf None); `histories` the B streams' camera
        histories (default: the constructor's). Returns static (pose_enc_list `[B, iters, 9]`, raw_list
        `[B, iters, 9]`, depth `[B, H, W]`, conf `[B, H, W]`) in the heads dtype and the place descriptors
        `[B, C]` float32: valid until the next `run`.
        """
        hook = self.stage_hook
        indices = [first_index] if isinstance(first_index, int) else list(first_index)
        keyframes = [keyframe] if isinstance(keyframe, bool) else list(keyframe)
        histories = self.histories if histories is None else tuple(histories)
        counts = (images.shape[0], len(indices), len(keyframes), len(histories))
        if any(count != self.batch for count in counts):
            raise ValueError(
                f"graphs of batch {self.batch} got (frames, indices, keyframes, histories) {counts}"
            )
        self.image.copy_(images)
        _set(self.frame_index, indices)
        for layer, graph in enumerate(self._graphs[:-3]):
            if hook is not None:
                hook("graph")
            graph()
            if layer < len(self.qkv):
                if hook is not None:
                    hook("attention")
                self.attended.copy_(step.attend(layer, *self.qkv[layer]))
        if hook is not None:
            hook("heads")
        self._graphs[-3]()
        if depth:
            self._graphs[-2]()
        camera = self.camera_graph(histories)
        camera_steps = [h.begin(1, k) for h, k in zip(histories, keyframes, strict=True)]
        _set(self.camera_slot, [s.write for s in camera_steps])
        _set(self.camera_visible, [s.visible for s in camera_steps])
        if hook is not None:
            hook("camera")
        camera()
        for history, camera_step in zip(histories, camera_steps, strict=True):
            history.end(camera_step)
        if not depth:
            return self.pose_list, self.raw_list, None, None, self.descriptor
        return self.pose_list, self.raw_list, self.depth, self.conf, self.descriptor

    def camera_graph(self, histories: Sequence[CameraHistory]) -> Callable[[], None]:
        """The camera head's replay over these B histories (captured on first use; the oldest set beyond
        `MAX_CAMERA_GRAPHS` is dropped). Each set's graph has its own static outputs: the replay points
        `pose_list` / `raw_list` at them."""
        histories = tuple(histories)
        key = tuple(id(h) for h in histories)
        if key in self._camera_graphs:
            return self._camera_graphs[key]
        if len(histories) != self.batch or any(h.capacity != self.histories[0].capacity for h in histories):
            raise ValueError(f"need {self.batch} camera histories of capacity {self.histories[0].capacity}")
        if len(self._camera_graphs) >= MAX_CAMERA_GRAPHS:
            self._camera_graphs.pop(next(iter(self._camera_graphs)))
        capacity = histories[0].capacity
        self.camera_slot.fill_(capacity)  # capture writes the scratch slots only
        self.camera_visible.fill_(capacity + 1)
        replay = self._capture(lambda: self._camera(histories), contextlib.nullcontext, own_pool=True)
        if self._capture_graphs:  # (eager segments assign fresh outputs at every call themselves)
            graph, outputs = replay, (self.pose_list, self.raw_list)

            def replay() -> None:
                graph()
                self.pose_list, self.raw_list = outputs

        self._camera_graphs[key] = replay
        for history in histories:  # a dead stream's graph goes with it (and its id can never match a new one)
            weakref.finalize(history, self._camera_graphs.pop, key, None)
        return replay

    # ------------------------------------------------------------------------------------------ capture
    def _capture_all(self, dtype: torch.dtype) -> None:
        depth = self.model.config.depth
        device_type = self.model.device.type

        def aggregator_autocast() -> contextlib.AbstractContextManager:
            if dtype == torch.float32:
                return contextlib.nullcontext()
            return torch.autocast(device_type=device_type, dtype=dtype, cache_enabled=False)

        segments = [self._prologue]
        segments += [lambda layer=layer: self._block_pair(layer) for layer in range(1, depth)]
        segments.append(self._epilogue)
        for segment in segments:
            self._capture(segment, aggregator_autocast)
        self._capture(self._heads, contextlib.nullcontext)
        self._capture(self._depth, contextlib.nullcontext)
        self._graphs.append(lambda: None)  # the camera graph's place: replayed per set of histories
        self.camera_graph(self.histories)

    def _capture(
        self,
        segment: Callable[[], None],
        context: Callable[[], contextlib.AbstractContextManager],
        own_pool: bool = False,
    ) -> Callable[[], None]:
        """Warm `segment` up on a side stream (library handles, cached constants), then capture it (into the
        shared pool and the replay order; `own_pool`: into a pool of its own, outside the order). Returns it.

        Without capture the segment is run once (to create its outputs) and kept as an eager call.
        """
        if not self._capture_graphs:

            def eager() -> None:
                with context():
                    segment()

            eager()
            if not own_pool:
                self._graphs.append(eager)
            return eager
        inputs = (self._residual, self._frame_out)  # the warm-up replaces them with its own outputs
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side), context():
            segment()
        torch.cuda.current_stream().wait_stream(side)
        self._residual, self._frame_out = inputs  # capture must read the previous graph's static outputs
        graph = torch.cuda.CUDAGraph()
        with (
            torch.cuda.graph(
                graph,
                pool=torch.cuda.graph_pool_handle() if own_pool else self._pool,
                capture_error_mode="thread_local",
            ),
            context(),
        ):
            segment()
        if not own_pool:
            self._graphs.append(graph.replay)
        return graph.replay

    # ------------------------------------------------------------------------------------------ segments
    def _prologue(self) -> None:
        aggregator = self.model.aggregator
        x, rotation_2d, rotation_3d = aggregator.prepare(
            self.image, self.frame_index, self.num_scale_frames, self._backbone_block
        )
        self._rotations = (rotation_2d, rotation_3d)
        self.descriptor = place_descriptor(x[:, self.model.config.num_special_tokens :])
        self.layers = []
        self.qkv = []
        self._frame_then_heads(0, x)

    def _block_pair(self, layer: int) -> None:
        """Finish global block `layer - 1`, run frame block `layer`, start global block `layer`."""
        self._frame_then_heads(layer, self._finish_global(layer - 1))

    def _epilogue(self) -> None:
        self._finish_global(self.model.config.depth - 1)

    def _frame_then_heads(self, layer: int, x: torch.Tensor) -> None:
        aggregator = self.model.aggregator
        rotation_2d, rotation_3d = self._rotations
        x = self._frame_block(aggregator.frame_blocks[layer], x, rotation_2d)
        self._frame_out = x  # [B, P, C]
        self._residual = x.reshape(1, -1, x.shape[-1])  # the global blocks' layout: one [1, B*P, C] sequence
        qkv = self._global_inputs(aggregator.global_blocks[layer], self._residual, rotation_3d)
        if layer < len(self.qkv):
            self.qkv[layer] = qkv
        else:
            self.qkv.append(qkv)

    def _finish_global(self, layer: int) -> torch.Tensor:
        aggregator = self.model.aggregator
        attended = self.attended.transpose(0, 1).unsqueeze(0)
        x = self._global_finish(aggregator.global_blocks[layer], self._residual, attended)
        x = x.reshape(self._frame_out.shape)
        if layer in self.model.config.intermediate_layers:
            output = torch.cat((self._frame_out, x), dim=-1)
            index = self.model.config.intermediate_layers.index(layer)
            if index < len(self.layers):
                self.layers[index] = output
            else:
                self.layers.append(output)
        return x

    def _heads(self) -> None:
        self._heads_layers = [layer.to(self.model.precision.heads_dtype) for layer in self.layers]
        self.camera_tokens = self._heads_layers[-1][:, 0]

    def _depth(self) -> None:
        model = self.model
        layers = self._heads_layers
        # the B frames of a batch in one pass (one camera: 1 frame, as the plain path)
        self.depth, self.conf = model.depth_head(
            layers, self.image_hw, model.config.num_special_tokens, frames_chunk=self.batch
        )

    def _camera(self, histories: tuple[CameraHistory, ...]) -> None:
        """The camera head on the B static camera tokens; token i attends over (and writes slot
        `camera_slot[i]` of) `histories[i]` only."""
        bias = torch.where(
            self._slots < self.camera_visible[:, None], 0.0, float("-inf")
        )  # [B, capacity + 1]
        slot = self.camera_slot

        def attend_for(pass_index: int, block: int) -> AttendFn:
            def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:  # [1, H, B, D]
                outs = [
                    h.attend_masked(
                        slot[i : i + 1], bias[i], pass_index, block, *(t[:, :, i : i + 1] for t in (q, k, v))
                    )
                    for i, h in enumerate(histories)
                ]
                return outs[0] if len(outs) == 1 else torch.cat(outs, dim=2)

            return attend

        model = self.model
        self.pose_list, self.raw_list = model.camera_head.refine(
            self.camera_tokens, attend_for, model.config.camera_num_iterations
        )


def _set(static: torch.Tensor, values: list[int]) -> None:
    """Write host ints into a static int64 input `[B]` (one fill, or one host-to-device copy for B > 1)."""
    if len(values) == 1:
        static.fill_(values[0])
    else:
        static.copy_(torch.tensor(values, dtype=static.dtype))


def default_compile_cache_dir() -> Path:
    """`$XDG_CACHE_HOME/lingbot_map_ros/torch_compile` (`~/.cache/...` without XDG_CACHE_HOME)."""
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "lingbot_map_ros" / "torch_compile"


def compile_cache_dir(configured: str) -> Path:
    """The directory for torch.compile's persistent caches (Inductor FX graphs, AOT autograd, Triton kernels)
    that survives restarts: `configured`, else `TORCHINDUCTOR_CACHE_DIR` when the environment sets it, else
    `default_compile_cache_dir()`; made here (OSError when it cannot be). The entry point (the node's
    configure through `ros/lifecycle/process_settings.py`, benchmarks/startup.py) writes it to
    `TORCHINDUCTOR_CACHE_DIR` before the first compile: the model layer sets no process-wide state."""
    if configured:
        path = Path(configured).expanduser()
    elif os.environ.get("TORCHINDUCTOR_CACHE_DIR"):
        path = Path(os.environ["TORCHINDUCTOR_CACHE_DIR"])
    else:
        path = default_compile_cache_dir()
    path.mkdir(parents=True, exist_ok=True)
    return path
