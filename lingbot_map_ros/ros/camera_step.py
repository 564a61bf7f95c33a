"""One inference step over the cameras that have a frame: the one place the node steps its cameras.

`step_cameras` holds the session lock of every camera in the batch (in camera order), lets each camera take
its frame in (`CameraStream.prepare`: stream generation, camera identity), runs ONE
`MultiStreamSession.run_round` over the node's set of cameras and hands each camera its results
(`CameraStream.finish`). The engine decides how the round runs: a set of one camera is a single stream
(`push`, or with `overlap` the one-deep `push_overlapped` pipeline of issue 22, whose results are those of
the frame before; `flush_cameras` collects the frame left in flight when no next frame is waiting); several
cameras' streaming frames are batched into one model step over one KV pool. A camera's failure is that
camera's (its session recovers as in `push`).
"""

from __future__ import annotations

from contextlib import ExitStack

from ..engine.stream.multi_stream import MultiStreamSession
from .camera import CameraStream, StepResults
from .intake import InputFrame


def step_cameras(
    cameras: dict[str, CameraStream],
    batch: list[tuple[str, InputFrame]],
    engine: MultiStreamSession,
    overlap: bool = False,
) -> tuple[list[StepResults], dict[str, Exception]]:
    """Step `batch` (camera name, frame; one frame per camera) through `engine` (the pipeline's cameras).

    `overlap`: a set of one camera runs `push_overlapped` (the results returned are then those of the frame
    before, up to `flush_cameras`); several cameras run one batched round.

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
        depth = {name for name in ready if cameras[name].depth_wanted()}
        round_ = engine.run_round(
            {name: (frame.rgb, frame) for name, frame in ready.items()}, overlap=overlap, depth=depth
        )
        errors.update(round_.errors)
        for name, frame in ready.items():
            if name in errors:
                continue
            out = round_.results.get(name, [])
            step = cameras[name].finish(_owner(out, frame), out)
            if step is not None:
                steps.append(step)
    return steps, errors


def flush_cameras(
    cameras: dict[str, CameraStream], engine: MultiStreamSession
) -> tuple[list[StepResults], dict[str, Exception]]:
    """The results of the frames still in flight after `step_cameras(..., overlap=True)`
    (`MultiStreamSession.flush` of each camera, under its session lock): the steps to publish and each failed
    camera's exception (its session recovered as in `push`)."""
    steps: list[StepResults] = []
    errors: dict[str, Exception] = {}
    for name, camera in cameras.items():
        with camera.session_lock:
            if not camera.configured:
                continue
            try:
                results = engine.flush(name)
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
