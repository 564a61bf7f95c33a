"""`BatchedStepping`: the side of `StreamingSession` that a caller batching several sessions' model steps uses
(engine/stream/multi_stream.py): `begin_frame` takes a frame in up to its model step, the caller runs the
steps of every camera as one batch, then `finish_frame` decodes a frame's output (or `fail_frame` drops it).

A mixin of `StreamingSession` (engine/stream/session.py), apart because it is one caller's protocol; it uses
the session's lock, `_admit`, `_run`, `_anchors`, `_reanchor_work`, `_steps`, `_timer`, `_finish` and
`_recover`, exactly as `push` does.
"""

from __future__ import annotations

import numpy as np

from ..result import FrameResult
from .preprocess import validate_rgb
from .step_frames import InFlightFrame, StreamingFrame


class BatchedStepping:
    """`begin_frame` / `finish_frame` / `fail_frame` of a `StreamingSession` (module doc)."""

    @property
    def model_state(self) -> object:
        """The model's `StreamState` of this session (what a batched step takes; its graphs' warm-up)."""
        return self._steps.state

    def begin_frame(
        self, rgb: np.ndarray, meta: object = None
    ) -> tuple[list[FrameResult], StreamingFrame | None]:
        """:meth:`push` up to the model step, for a caller that batches several sessions' steps.

        Anchor-phase frames run here as in :meth:`push` (their results come back, frame None); a due
        re-anchor runs here too; a plain streaming frame comes back as a `StreamingFrame` whose model step
        the caller runs and hands to :meth:`finish_frame` (or its error to :meth:`fail_frame`).
        Raises as :meth:`push`.
        """
        rgb = validate_rgb(rgb)
        with self._lock:
            done, image_net = self._admit(rgb)
            try:
                if self._anchors.anchoring:
                    return done + self._run(rgb, meta, image_net, True), None
                self._reanchor_work()
                keyframe = self._anchors.next_keyframe()
                images = self._steps.to_model([image_net])
                return done, StreamingFrame(rgb, meta, image_net, keyframe, images, self._steps.state)
            except Exception as exc:
                self._recover(exc)
                raise

    def finish_frame(self, frame: StreamingFrame, output: object, model_ms: float) -> FrameResult:
        """Decode the model step of a `begin_frame` frame (``output``: its ``StepOutput``, one frame);
        ``model_ms`` is the batched step's time (the frame's "model" stage). Raises as :meth:`push`."""
        with self._lock:
            self._timer.add("model", model_ms)
            try:
                launched = self._steps.to_host(output)
                return self._finish(
                    InFlightFrame(frame.rgb, frame.meta, frame.image_net, frame.keyframe, launched)
                )
            except Exception as exc:
                self._recover(exc)
                raise

    def fail_frame(self, exc: Exception) -> None:
        """The model step of a `begin_frame` frame raised ``exc``: drop the frame, recover as :meth:`push`."""
        with self._lock:
            self._recover(exc)
