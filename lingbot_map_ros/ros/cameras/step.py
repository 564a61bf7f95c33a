"""One round over the cameras that have a frame: the one place the node steps its cameras.

`step_cameras` holds the session lock of every camera in the batch (in camera order; overlapped, of every
camera), lets each camera take its frame in (`CameraStream.prepare`: stream token, camera identity) and
makes ONE engine call, `CameraPipeline.step` (engine/camera_pipeline.py): the model round (a set of one camera
is a single stream, `push`, or with `overlap` the one-deep `push_overlapped` pipeline of issue 22, whose
results are those of the frame before; `flush_cameras` collects the frame left in flight when no next frame is
waiting; several cameras' streaming frames are batched into one model step over one KV pool, with `overlap`
one round deep), its results handed to the pipeline's pose stage, which tracks them and hands them back to
each camera (the `PoseSink`). Each camera with results then refreshes its statistics (`CameraStream.finish`).
A camera's failure is that camera's (its session recovers as in `push`).
"""

from __future__ import annotations

from contextlib import ExitStack

from ...engine.face import CameraPipeline
from ..input.intake import InputFrame
from .stream import CameraStream


def step_cameras(
    cameras: dict[str, CameraStream],
    batch: list[tuple[str, InputFrame]],
    pipeline: CameraPipeline,
    overlap: bool = False,
) -> dict[str, Exception]:
    """Step `batch` (camera name, frame; one frame per camera) through `pipeline` (module doc).

    `overlap`: a set of one camera runs `push_overlapped` (the results handed on are then those of the frame
    before, up to `flush_cameras`); several cameras run one batched round, with `overlap` pipelined one deep
    (the results of every camera's frame in flight, also of cameras not in `batch`: every camera's session
    lock is held). Returns each failed camera's exception (also of a camera not in `batch`).
    """
    order = list(cameras)
    errors: dict[str, Exception] = {}
    # overlapped, a round also decodes the frames in flight of cameras without a frame in it
    locked = order if overlap and len(order) > 1 else [name for name in order if name in dict(batch)]
    with ExitStack() as locks:
        for name in locked:
            locks.enter_context(cameras[name].session_lock)
        ready: dict[str, InputFrame] = {}
        for name, frame in batch:
            try:
                if cameras[name].prepare(frame):
                    ready[name] = frame
            except Exception as exc:  # noqa: BLE001 - one camera's failure is that camera's, counted
                errors[name] = exc
        depth = {name for name in ready if cameras[name].depth_wanted()}
        round_ = pipeline.step({name: (frame.rgb, frame) for name, frame in ready.items()}, overlap, depth)
        errors.update(round_.errors)
        for name in [*ready, *(n for n in round_.results if n not in ready)]:
            if name not in errors:
                cameras[name].finish(round_.results.get(name, []))
    return errors


def flush_cameras(cameras: dict[str, CameraStream], pipeline: CameraPipeline) -> dict[str, Exception]:
    """The frames still in flight after `step_cameras(..., overlap=True)` (`CameraPipeline.flush` of each
    camera, under its session lock), handed to the pose stage; each failed camera's exception (its session
    recovered as in `push`)."""
    errors: dict[str, Exception] = {}
    for name, camera in cameras.items():
        with camera.session_lock:
            if not camera.configured:
                continue
            try:
                results = pipeline.flush(name)
            except Exception as exc:  # noqa: BLE001 - counted as this camera's failure
                errors[name] = exc
                continue
            if results:
                camera.finish(results)
    return errors
