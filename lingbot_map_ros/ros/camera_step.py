"""One inference step over the cameras that have a frame: the one place the node steps its cameras.

`step_cameras` holds the session lock of every camera in the batch (in camera order), lets each camera take
its frame in (`CameraStream.prepare`: stream generation, camera identity), runs the model step and hands each
camera its results (`CameraStream.finish`). With several cameras the model step is ONE
`MultiStreamSession.run_round` (their streaming frames batched into one model step over one KV pool; anchor
phases and re-anchors per camera); the unnamed camera of a single-camera node runs `StreamingSession.push`,
as before issue 14, or with `overlap` `StreamingSession.push_overlapped` (issue 22: a one-deep pipeline whose
results are those of the frame before; the host work of a frame runs while the previous frame's step is on
the GPU), and `flush_cameras` collects the frame left in flight when no next frame is waiting. A camera's
failure is that camera's (its session recovers as in `push`).
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
    overlap: bool = False,
) -> tuple[list[StepResults], dict[str, Exception]]:
    """Step `batch` (camera name, frame; one frame per camera) through `session` (the pipeline's).

    `overlap`: a single camera's session runs `push_overlapped` (the results returned are then those of the
    frame before, up to `flush_cameras`); ignored with several cameras (one batched round).

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
        results = _model_step(cameras, ready, session, errors, overlap)
        for name, frame in ready.items():
            if name in errors:
                continue
            out = results.get(name, [])
            step = cameras[name].finish(_owner(out, frame), out)
            if step is not None:
                steps.append(step)
    return steps, errors


def flush_cameras(cameras: dict[str, CameraStream]) -> tuple[list[StepResults], dict[str, Exception]]:
    """The results of the frames still in flight after `step_cameras(..., overlap=True)` (each camera's
    `StreamingSession.flush`, under its session lock): the steps to publish and each failed camera's
    exception (its session recovered as in `push`)."""
    steps: list[StepResults] = []
    errors: dict[str, Exception] = {}
    for name, camera in cameras.items():
        with camera.session_lock:
            session = camera.session
            if session is None:
                continue
            try:
                results = session.flush()
            except Exception as exc:  # noqa: BLE001 - counted as this camera's failure
                errors[name] = exc
                continue
            step = camera.finish(results[-1].meta, results) if results else None
            if step is not None:
                steps.append(step)
    return steps, errors


def _owner(results: list, frame: InputFrame) -> InputFrame:
    """The input frame the last of `results` came from (an overlapped step returns the frame before's
    results: its generation, not the new frame's, decides whether they are published)."""
    meta = results[-1].meta if results else None
    return meta if isinstance(meta, InputFrame) else frame


def _model_step(
    cameras: dict[str, CameraStream],
    frames: dict[str, InputFrame],
    session: StreamingSession | MultiStreamSession | None,
    errors: dict[str, Exception],
    overlap: bool,
) -> dict[str, list]:
    """`FrameResult`s per camera of `frames`; failures go into `errors`."""
    if isinstance(session, MultiStreamSession):
        out = session.run_round({name: (frame.rgb, frame) for name, frame in frames.items()})
        errors.update(out.errors)
        return out.results
    results = {}
    for name, frame in frames.items():
        try:
            camera = cameras[name]
            push = camera.session.push_overlapped if overlap else camera.session.push
            outputs = camera.outputs
            results[name] = push(frame.rgb, meta=frame, depth=outputs is not None and outputs.depth_wanted())
        except Exception as exc:  # noqa: BLE001 - counted as this camera's failure
            errors[name] = exc
    return results
