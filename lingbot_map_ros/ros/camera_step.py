"""One inference step over the cameras that have a frame: the one place the node steps its cameras.

`step_cameras` holds the session lock of every camera in the batch (in camera order), lets each camera take
its frame in (`CameraStream.prepare`: stream generation, camera identity), runs the model step and hands each
camera its results (`CameraStream.finish`). With several cameras the model step is ONE
`MultiStreamSession.run_round` (their streaming frames batched into one model step over one KV pool; anchor
phases and re-anchors per camera); the unnamed camera of a single-camera node runs `StreamingSession.push`,
as before issue 14. A camera's failure is that camera's (its session recovers as in `push`).
"""

from __future__ import annotations

from contextlib import ExitStack

from ..engine.multi_stream import MultiStreamSession
from ..engine.session import StreamingSession
from .camera import CameraStream, StepResults
from .intake import InputFrame


def step_cameras(
    cameras: dict[str, CameraStream],
    batch: list[tuple[str, InputFrame]],
    session: StreamingSession | MultiStreamSession | None,
) -> tuple[list[StepResults], dict[str, Exception]]:
    """Step `batch` (camera name, frame; one frame per camera) through `session` (the pipeline's).

    Returns:
        The results to publish, in batch order, and each failed camera's exception.
    """
    order = list(cameras)
    steps: list[StepResults] = []
    errors: dict[str, Exception] = {}
    with ExitStack() as locks:
        for name, _ in sorted(batch, key=lambda item: order.index(item[0])):
            locks.enter_context(cameras[name].session_lock)
        ready: dict[str, InputFrame] = {}
        for name, frame in batch:
            try:
                if cameras[name].prepare(frame):
                    ready[name] = frame
            except Exception as exc:  # noqa: BLE001 - one camera's failure is that camera's, counted
                errors[name] = exc
        results = _model_step(cameras, ready, session, errors)
        for name, frame in ready.items():
            step = cameras[name].finish(frame, results.get(name, [])) if name not in errors else None
            if step is not None:
                steps.append(step)
    return steps, errors


def _model_step(
    cameras: dict[str, CameraStream],
    frames: dict[str, InputFrame],
    session: StreamingSession | MultiStreamSession | None,
    errors: dict[str, Exception],
) -> dict[str, list]:
    """`FrameResult`s per camera of `frames`; failures go into `errors`."""
    if isinstance(session, MultiStreamSession):
        out = session.run_round({name: (frame.rgb, frame) for name, frame in frames.items()})
        errors.update(out.errors)
        return out.results
    results = {}
    for name, frame in frames.items():
        try:
            results[name] = cameras[name].session.push(frame.rgb, meta=frame)
        except Exception as exc:  # noqa: BLE001 - counted as this camera's failure
            errors[name] = exc
    return results
