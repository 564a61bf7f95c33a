"""`SidePairPasses`: verification passes replayed as one CUDA graph on a low-priority side stream (issue 31).

The side stream is the graph's (`GraphedPairStep.stream`, one per model and image size): the passes of
several cameras' verifiers share the graph's static buffers, so they queue on that one stream in order.

A verification pass through the eager scratch stream launched ~3,000 kernels from Python: ~180 ms of the
inference thread per pass in the node (H200, 2026-12-02), the live stream stalled that long. Here a pass is
split three ways:

* `stage` (the loop closer's thread): the two uint8 images into a pinned host buffer;
* `launch` (the inference thread, in a gap between live steps, `GpuGaps.call`): on the side stream, the
  host-to-device copy, ONE graph replay (`model/pair_step.py` `pair_graph`: captured at the node's
  configure by `warm_up_pair_pass`, else by the first launch at an image size), the device-to-host copies of
  its outputs into pinned buffers, and an event: about a millisecond of host time; the GPU runs the pass
  beside the next live step;
* `LaunchedPass.wait` (the closer's thread again): waits on the event (blocking sync, the GIL released),
  copies the outputs out of the pinned buffers and reports the pass's GPU time (the closer charges it to the
  gaps' budget, `GpuGaps.charge`); the numpy work on them (`verify.py`) stays on the closer's thread.

The side stream has the lowest priority CUDA offers (0). The live step runs on the default stream, whose
priority is that same lowest one (CUDA's default): its kernels win the SMs first only if it runs on a
higher-priority stream, which the live path does not do; the two streams share the GPU as equals, the pass
filling the GPU time a launch-bound live step leaves idle (benchmarks/verify_pass.py measures the live step
with a pass in flight, and with the live step on a high-priority stream).

One pass at a time: the caller (`PairVerifier`) stages the next pass only after the previous one's `wait`.
Memory: the graph's own pool (about the pass's eager peak, kept by the model with the graph) plus the static
and pinned buffers; no scratch KV pool (the eager pass's scratch stream is never made).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import torch

from lingbot_map_ros.model import LingBotMap
from lingbot_map_ros.model.pair_step import PAIR, pair_graph

from ..stream.preprocess import preprocess_geometry

#: A pair pass's outputs: pose_enc `[2, 9]`, depth `[2, H, W]`, conf `[2, H, W]` (numpy float32).
PassResult = tuple[np.ndarray, np.ndarray, np.ndarray]


@dataclass(frozen=True)
class LaunchedPass:
    """A pass on the GPU: its outputs land in `outputs` (pinned host) once `done` has completed."""

    start: torch.cuda.Event
    done: torch.cuda.Event
    outputs: tuple[torch.Tensor, torch.Tensor, torch.Tensor]

    def wait(self) -> tuple[PassResult, float]:
        """Block (GIL released) until the pass is done: (pose_enc `[2, 9]`, depth `[2, H, W]`, conf
        `[2, H, W]`) as numpy copies, and the GPU time (s) from the input copy to the last output copy."""
        self.done.synchronize()
        pose_enc, depth, conf = (t.numpy().copy() for t in self.outputs)
        return (pose_enc, depth, conf), self.start.elapsed_time(self.done) / 1e3


class SidePairPasses:
    """Graph-replayed pair passes of `model` (a CUDA `LingBotMap`) on a low-priority stream (module doc)."""

    def __init__(self, model: LingBotMap) -> None:
        device = model.device
        if device.type != "cuda":
            raise ValueError(f"side pair passes need a CUDA model, got {device}")
        self.model = model
        self._pixels: torch.Tensor | None = None
        self._outputs: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None

    def stage(self, image_a: np.ndarray, image_b: np.ndarray) -> None:
        """Copy the two `[H, W, 3]` uint8 images of the next pass into the pinned input (closer's thread)."""
        hw = image_a.shape[:2]
        if self._pixels is None or self._pixels.shape != (PAIR, *hw, 3):
            self._pixels = torch.empty((PAIR, *hw, 3), dtype=torch.uint8).pin_memory()
        pixels = self._pixels.numpy()
        pixels[0], pixels[1] = image_a, image_b

    def launch(self) -> LaunchedPass:
        """The staged pass on the side stream (inference thread): copy in, replay, copy out, record. The
        first pass at an image size captures the graph unless `warm_up_pair_pass` did (at configure)."""
        pixels = self._pixels
        if pixels is None:
            raise RuntimeError("launch() before stage()")
        graph = pair_graph(self.model, (int(pixels.shape[1]), int(pixels.shape[2])))
        outputs = self._outputs
        if outputs is None or outputs[1].shape != graph.depth.shape:
            outputs = self._outputs = tuple(  # type: ignore[assignment]
                torch.empty(t.shape, dtype=t.dtype).pin_memory()
                for t in (graph.pose_enc, graph.depth, graph.conf)
            )
        start, done = (torch.cuda.Event(enable_timing=True, blocking=True) for _ in range(2))
        with torch.cuda.stream(graph.stream):  # the graph's own: passes of several verifiers queue in order
            start.record()
            graph.pixels.copy_(pixels, non_blocking=True)
            graph.replay()
            for host, device in zip(outputs, (graph.pose_enc, graph.depth, graph.conf), strict=True):
                host.copy_(device, non_blocking=True)
            done.record()
        return LaunchedPass(start, done, outputs)

    def captured(self, image_hw: tuple[int, int]) -> bool:
        """Whether the pass at `image_hw` is captured already (a launch at another size captures first)."""
        return image_hw in self.model.pair_graphs


def warm_up_pair_pass(model: object, camera_hw: tuple[int, int], image_width: int) -> float:
    """Capture the pair pass of `model` for keyframes of cameras of `camera_hw` (their network size at
    `image_width`) now, so that the first verification does not (the node's configure, with loop closure
    on). Nothing for a model that does not run graphed passes (CPU, a test double). Returns seconds."""
    if not isinstance(model, LingBotMap) or model.device.type != "cuda":
        return 0.0
    start = time.perf_counter()
    pair_graph(model, preprocess_geometry(camera_hw, image_width).out_hw)
    torch.cuda.synchronize(model.device)
    return time.perf_counter() - start
