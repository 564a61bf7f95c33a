"""`BatchedStepping`: the side of `StreamingSession` that a caller batching several sessions' model steps uses
(engine/stream/multi_stream.py): `begin_frame` takes a frame in up to its model step, the caller runs the
steps of every camera as one batch, then `finish_frame` decodes a frame's output (or `fail_frame` drops it).
A one-deep pipeline of rounds (as `push_overlapped` for one camera) takes the frames in with
``overlapped=True``, hands each launched step to `launch_frame` (which returns the frame in flight before it)
and decodes that one with `finish_launched` while the next round's step runs.

A mixin of `StreamingSession` (engine/stream/session.py), apart because it is one caller's protocol; it uses
the session's lock, `_admit`, `_run`, `_anchors`, `_reanchor_if_due`, `_steps`, `_timer`, `_finish` and
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
        self, rgb: np.ndarray, meta: object = None, overlapped: bool = False
    ) -> tuple[list[FrameResult], StreamingFrame | None]:
        """:meth:`push` up to the model step, for a caller that batches several sessions' steps.

        Anchor-phase frames run here as in :meth:`push` (their results come back, frame None); a due
        re-anchor runs here too; a plain streaming frame comes back as a `StreamingFrame` whose model step
        the caller runs and hands to :meth:`finish_frame` (or its error to :meth:`fail_frame`).
        ``overlapped``: the frame in flight (:meth:`launch_frame`) is completed first only when this frame
        cannot follow it unseen (a new resolution, a due re-anchor; its result then leads the list), as in
        :meth:`push_overlapped`; the model step is then handed to :meth:`launch_frame`.
        Raises as :meth:`push`.
        """
        rgb = validate_rgb(rgb)
        with self._lock:
            done, image_net = self._admit(rgb, sync=not overlapped or self._needs_sync(rgb))
            try:
                if self._anchors.anchoring:
                    return done + self._run(rgb, meta, image_net, True), None
                self._reanchor_if_due()
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

    def launch_frame(self, frame: StreamingFrame, output: object, model_ms: float) -> InFlightFrame | None:
        """Queue the copies of a `begin_frame` frame's step (``output``, one frame) to the host and make it
        the frame in flight; returns the frame in flight before it (None if none), for
        :meth:`finish_launched` once this frame's round is on the GPU."""
        with self._lock:
            self._timer.add("model", model_ms)
            launched = self._steps.to_host(output)
            previous = self._in_flight
            self._in_flight = InFlightFrame(frame.rgb, frame.meta, frame.image_net, frame.keyframe, launched)
            return previous

    def finish_launched(self, previous: InFlightFrame) -> FrameResult:
        """Collect and decode the frame that was in flight before the last :meth:`launch_frame`.

        Raises as :meth:`push`; a failed or non-finite step also drops the frame launched after it (its step
        ran on the failed caches) and recovers as :meth:`push_overlapped` does.
        """
        with self._lock:
            try:
                return self._finish(previous)
            except Exception as exc:
                self._in_flight = None
                self._recover(exc)
                raise

    def drain(self) -> None:
        """Wait for the step of the frame in flight and drop it unread (a reset: its result belongs to the
        stream before, never delivered)."""
        with self._lock:
            in_flight, self._in_flight = self._in_flight, None
            if in_flight is not None and in_flight.launched.done is not None:
                in_flight.launched.done.synchronize()

    def fail_frame(self, exc: Exception) -> None:
        """The model step of a `begin_frame` frame raised ``exc``: drop the frame, recover as :meth:`push`."""
        with self._lock:
            self._recover(exc)
