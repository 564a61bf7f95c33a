"""`BatchedSteps`: the side of a `StreamingSession` that a caller batching several sessions' model steps uses
(engine/stream/multi_stream.py): `begin_frame` takes a frame in up to its model step, the caller runs the
steps of every camera as one batch, then `finish_frame` decodes a frame's output (or `fail_frame` drops it).
A one-deep pipeline of rounds (as `push_overlapped` for one camera) takes the frames in with
``overlapped=True``, hands each launched step to `launch_frame` (which returns the frame in flight before it)
and decodes that one with `finish_launched` while the next round's step runs.

A collaborator of `StreamingSession` (engine/stream/session.py: `session.batched`), apart because it is one
caller's protocol. It reaches the session only through the `FrameFlow` the session hands it: the lock, the
model steps, the stage timer and the frame flow's operations, exactly as `push` runs them.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..result import FrameResult
from .model_steps import ModelSteps
from .preprocess import validate_rgb
from .step_frames import InFlightFrame, StreamingFrame
from .timing import StageTimer


@dataclass(frozen=True)
class FrameFlow:
    """What `BatchedSteps` uses of its session (every operation is called with `lock` held).

    Attributes:
        lock: the session's lock (one frame at a time, as `push`).
        steps: the session's model steps (device transfers, the model's `StreamState`).
        timer: the session's stage timer (the batched step's time is the frame's "model" stage).
        admit: `(rgb [H, W, 3] uint8, sync) -> (results completed first, the network image)` (`push`'s
            intake: the frame in flight completed when ``sync``, a resolution change reset, pre-processing).
        needs_sync: whether the frame in flight must be completed before ``rgb`` is taken in (a new
            resolution, a due re-anchor), as `push_overlapped` decides.
        swap_in_flight: make a frame (or None) the session's frame in flight; returns the one before.
        run: `(rgb, meta, image_net, depth) -> results`: the frame run as `push` runs it (anchor phase).
        streaming_keyframe: None while the anchor phase collects its frames; else, after a due re-anchor, the
            next streaming frame's keyframe decision (counted).
        finish: decode a frame whose model step was launched (`InFlightFrame`) into its `FrameResult`.
        recover: a failed frame dropped, the session recovered (as `push` does).
    """

    lock: threading.Lock
    steps: ModelSteps
    timer: StageTimer
    admit: Callable[[np.ndarray, bool], tuple[list[FrameResult], np.ndarray]]
    needs_sync: Callable[[np.ndarray], bool]
    swap_in_flight: Callable[[InFlightFrame | None], InFlightFrame | None]
    run: Callable[[np.ndarray, object, np.ndarray, bool], list[FrameResult]]
    streaming_keyframe: Callable[[], bool | None]
    finish: Callable[[InFlightFrame], FrameResult]
    recover: Callable[[Exception], None]


class BatchedSteps:
    """`begin_frame` / `finish_frame` / `fail_frame` of one `StreamingSession` (module doc)."""

    def __init__(self, flow: FrameFlow) -> None:
        self._flow = flow

    @property
    def model_state(self) -> object:
        """The model's `StreamState` of this session (what a batched step takes; its graphs' warm-up)."""
        return self._flow.steps.state

    def begin_frame(
        self, rgb: np.ndarray, meta: object = None, overlapped: bool = False
    ) -> tuple[list[FrameResult], StreamingFrame | None]:
        """`StreamingSession.push` up to the model step, for a caller that batches several sessions' steps.

        Anchor-phase frames run here as in `push` (their results come back, frame None); a due
        re-anchor runs here too; a plain streaming frame comes back as a `StreamingFrame` whose model step
        the caller runs and hands to :meth:`finish_frame` (or its error to :meth:`fail_frame`).
        ``overlapped``: the frame in flight (:meth:`launch_frame`) is completed first only when this frame
        cannot follow it unseen (a new resolution, a due re-anchor; its result then leads the list), as in
        `push_overlapped`; the model step is then handed to :meth:`launch_frame`.
        Raises as `push`.
        """
        flow = self._flow
        rgb = validate_rgb(rgb)
        with flow.lock:
            done, image_net = flow.admit(rgb, not overlapped or flow.needs_sync(rgb))
            try:
                keyframe = flow.streaming_keyframe()
                if keyframe is None:
                    return done + flow.run(rgb, meta, image_net, True), None
                images = flow.steps.to_model([image_net])
                return done, StreamingFrame(rgb, meta, image_net, keyframe, images, flow.steps.state)
            except Exception as exc:
                flow.recover(exc)
                raise

    def finish_frame(self, frame: StreamingFrame, output: object, model_ms: float) -> FrameResult:
        """Decode the model step of a `begin_frame` frame (``output``: its ``StepOutput``, one frame);
        ``model_ms`` is the batched step's time (the frame's "model" stage). Raises as `push`."""
        flow = self._flow
        with flow.lock:
            flow.timer.add("model", model_ms)
            try:
                launched = flow.steps.to_host(output)
                return flow.finish(
                    InFlightFrame(frame.rgb, frame.meta, frame.image_net, frame.keyframe, launched)
                )
            except Exception as exc:
                flow.recover(exc)
                raise

    def launch_frame(self, frame: StreamingFrame, output: object, model_ms: float) -> InFlightFrame | None:
        """Queue the copies of a `begin_frame` frame's step (``output``, one frame) to the host and make it
        the frame in flight; returns the frame in flight before it (None if none), for
        :meth:`finish_launched` once this frame's round is on the GPU."""
        flow = self._flow
        with flow.lock:
            flow.timer.add("model", model_ms)
            launched = flow.steps.to_host(output)
            return flow.swap_in_flight(
                InFlightFrame(frame.rgb, frame.meta, frame.image_net, frame.keyframe, launched)
            )

    def finish_launched(self, previous: InFlightFrame) -> FrameResult:
        """Collect and decode the frame that was in flight before the last :meth:`launch_frame`.

        Raises as `push`; a failed or non-finite step also drops the frame launched after it (its step
        ran on the failed caches) and recovers as `push_overlapped` does.
        """
        flow = self._flow
        with flow.lock:
            try:
                return flow.finish(previous)
            except Exception as exc:
                flow.swap_in_flight(None)
                flow.recover(exc)
                raise

    def drain(self) -> None:
        """Wait for the step of the frame in flight and drop it unread (a reset: its result belongs to the
        stream before, never delivered)."""
        with self._flow.lock:
            in_flight = self._flow.swap_in_flight(None)
            if in_flight is not None and in_flight.launched.done is not None:
                in_flight.launched.done.synchronize()

    def fail_frame(self, exc: Exception) -> None:
        """The model step of a `begin_frame` frame raised ``exc``: drop the frame, recover as `push`."""
        with self._flow.lock:
            self._flow.recover(exc)
