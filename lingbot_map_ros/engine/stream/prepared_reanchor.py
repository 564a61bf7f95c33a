"""`PreparedReanchor`: a long-stream re-anchor prepared beside the live stream, one part per frame (issue 31).

A re-anchor restarts the model stream on the last S0 keyframes (`reanchor.py`): its model work is one
anchor step of S0 frames, 285–316 ms on an H200 through the node, during which no pose came out. Prepared
instead: ``reanchor_steps`` frames before the cache bound (``max_stored_frames``), the last S0 keyframes
are taken (``records``) and the model's anchor pass over them (`model/anchor_pass.py`) runs one group of
parts before each of the next frames' streaming steps, on the same thread and CUDA stream, into buffers of
its own; the live stream goes on untouched. Behind the last group the scale of the Sim(3) into the map
frame is computed on the device (`alignment_scale`: the median depth ratio over ~1.5 M pixels, 0.4 s of
numpy on a loaded CPU) and it and the poses are copied to the host; one frame later the Sim(3) is completed
(`alignment_at_anchor`; together: `estimate_alignment`, as a one-step re-anchor does); at the bound
the pass takes over the stream's caches (copies only) and the next frame runs on the new stream. The frames
in between are posed by the old stream, as before the bound. So the new stream is the one a one-step
re-anchor on those records gives, only its anchors end ``reanchor_steps`` + 1 frames before the take-over
instead of right before it.
"""

from __future__ import annotations

import numpy as np

from ..contracts import NonFiniteOutputError
from ..geometry import Sim3
from .decode import pose_encoding_to_c2w
from .model_steps import LaunchedStep, ModelSteps
from .reanchor import KeyframeRecord, alignment_at_anchor, alignment_scale


class PreparedReanchor:
    """The re-anchor on ``records`` (the S0 kept keyframes, oldest first) under way: `advance` once per frame
    until `ready`, then `take_over`. ``groups``: the model work's runs (one per frame; the host work of the
    alignment takes one frame more)."""

    def __init__(
        self, steps: ModelSteps, records: list[KeyframeRecord], groups: int, conf_threshold: float
    ) -> None:
        self.records = records
        self._conf_threshold = conf_threshold
        self._pass = steps.begin_anchor_pass([r.image_net for r in records], groups)
        self._outputs: LaunchedStep | None = None
        self.align: Sim3 | None = None

    @property
    def ready(self) -> bool:
        """The anchor pass has run and its alignment is known: `take_over` is a copy."""
        return self.align is not None

    def advance(self, steps: ModelSteps) -> None:
        """This frame's share: the next group of the model's parts (queued, no wait; after the last one the
        alignment's scale on the device and the copies of it and the poses to the host), or, once they have
        all run, the alignment from those copies (done long before: no wait for the GPU, no pixel work)."""
        if self.ready:
            raise RuntimeError("the prepared re-anchor is ready; take it over")
        if not self._pass.done:
            self._pass.advance()
            if self._pass.done:
                out = self._pass.output
                scale = alignment_scale(self.records, out.depth, out.depth_conf, self._conf_threshold)
                self._outputs = steps.tensors_to_host(out.pose_enc, scale)
            return
        pose_enc, scale = steps.wait(self._outputs)
        self._outputs = None
        if not np.isfinite(pose_enc).all() or not np.isfinite(scale):
            raise NonFiniteOutputError(
                "the prepared re-anchor's anchor pass returned non-finite poses or depth"
            )
        self.align = alignment_at_anchor(self.records, pose_encoding_to_c2w(pose_enc), float(scale))

    def finish(self, steps: ModelSteps) -> None:
        """Everything left, now (the bound came before the parts were done)."""
        while not self.ready:
            self.advance(steps)

    def take_over(self) -> Sim3:
        """Restart the stream on the prepared anchors (the stream's caches replaced by the pass's); returns
        the new stream's world frame -> map frame alignment."""
        if self.align is None:
            raise RuntimeError("take_over() before the prepared re-anchor is ready")
        self._pass.install()
        return self.align
