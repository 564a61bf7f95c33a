"""Per-stage timing of model steps (benchmarks/e2e.py): CUDA events at stage boundaries, perf_counter on CPU.

A `StageRecorder` is attached to a model and a stream after the stream is warm (graphs captured):

* plain path: forward pre-hooks mark the start of the DINOv2 patch embed, every frame block, every global
  block, the depth head and the camera head; the stream's stage hook (``StreamState.stage_hook``, called by
  the cache around the attention kernel over the visible keys) marks "attention" before and "global blocks"
  after the kernel, so the K/V writes and everything else of a global block count as "global blocks";
* fast path (CUDA graphs): the same stage hook, called by the graphs, marks each graph replay ("patch embed
  + blocks (graphs)"), each eager attention (K/V write, kernel and the copy into the graphs' input buffer:
  all of it counts as "attention"), the heads graph ("depth head") and the camera-head graph ("camera head").

The time between two marks is charged to the first mark's stage; `close()` records a final mark, waits for
the device and returns milliseconds per stage for the step.
"""

from __future__ import annotations

import time
from collections import defaultdict

import torch

from lingbot_map_ros.model import LingBotMap, StreamState

GRAPH_STAGE = "patch embed + blocks (graphs)"
STAGE_NAMES = {"graph": GRAPH_STAGE, "attention": "attention", "heads": "depth head", "camera": "camera head"}


class StageRecorder:
    """Collects (stage, timestamp) marks of one step at a time on ``device``."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        self._marks: list[tuple[str, object]] = []
        self._handles: list = []
        self._restore: list = []

    def mark(self, stage: str) -> None:
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            self._marks.append((stage, event))
        else:
            self._marks.append((stage, time.perf_counter()))

    def close(self) -> dict[str, float]:
        """End the step: milliseconds per stage (empty if nothing was marked)."""
        if not self._marks:
            return {}
        self.mark("end")
        if self.cuda:
            self._marks[-1][1].synchronize()
        totals: dict[str, float] = defaultdict(float)
        for (stage, begin), (_, end) in zip(self._marks[:-1], self._marks[1:], strict=True):
            totals[stage] += begin.elapsed_time(end) if self.cuda else 1e3 * (end - begin)
        self._marks = []
        return dict(totals)

    # ------------------------------------------------------------------------------------------ attach
    def attach(self, model: LingBotMap, state: StreamState) -> None:
        """Hook ``model``'s modules and ``state``'s stage hook (its cache and graphs call it)."""
        aggregator = model.aggregator

        def pre(stage: str):
            return lambda module, args: self.mark(stage)

        self._handles.append(aggregator.patch_embed.register_forward_pre_hook(pre("patch embed")))
        for block in aggregator.frame_blocks:
            self._handles.append(block.register_forward_pre_hook(pre("frame blocks")))
        for block in aggregator.global_blocks:
            self._handles.append(block.register_forward_pre_hook(pre("global blocks")))
        self._handles.append(model.depth_head.register_forward_pre_hook(pre("depth head")))
        self._handles.append(model.camera_head.register_forward_pre_hook(pre("camera head")))
        after_kernel = "attention" if state.graphed is not None else "global blocks"

        def on_stage(stage: str) -> None:
            self.mark(after_kernel if stage == "attention_done" else STAGE_NAMES[stage])

        state.stage_hook = on_stage
        self._restore.append(lambda: setattr(state, "stage_hook", None))

    def detach(self) -> None:
        for handle in self._handles:
            handle.remove()
        for restore in self._restore:
            restore()
        self._handles, self._restore, self._marks = [], [], []
