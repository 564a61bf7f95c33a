"""`CameraPipeline`: an image's way to its odometry, one engine call per round (docs/architecture.md).

`step(frames)` runs ONE model round over the cameras that have a frame (`MultiStreamSession.run_round`: a set
of one runs `push`, or with `overlap` the one-deep `push_overlapped` pipeline, whose results are those of the
frame before; several cameras one batched round, with `overlap` pipelined one round deep the same way) and
hands each camera's results to the pipeline's pose stage: one thread with a `LaneWorker`
(engine/lane_worker.py) of `POSE_QUEUE_ROUNDS` rounds, blocking hand-over = back-pressure, nothing dropped. So
a robot TF lookup, which may wait up to `tf.timeout` for odometry newer than the image, never stalls the
model. `flush(name)` collects an overlapped frame left in flight the same way.

The pose stage takes one camera's results of one round at a time, in round order, and opens that camera's
`PoseSink.pose_round(stream)` with the round's stream token (`CameraState.stream` when its frame arrived,
`stream_of` its meta): the sink holds its outputs for the round and gives the camera's engine `CameraState`
(engine/camera_state.py), or None when the results are stale (the token is no longer current,
`CameraState.is_current`: a reset or a loaded session came after the round, so the old stream's results are
never delivered). Each result then goes through `CameraState.track` in that stream (the `CameraTracker`,
engine/tracker.py: TF-mode policy, the robot TF through `RobotTfSource`, depth through `DepthSource`,
`Mapper.locate`, `map -> odom`; its `MapWork` carries the token), and the round comes back to
the sink ONCE: `PoseSink.delivered(posed)`, a `PosedResult` per result in input order (its `TrackedFrame`:
convert, publish, hand the map work to the camera's map thread; or the `TransformUnavailable` of a transform
its TF mode needs that is missing: the frame is dropped), then each tracked one goes to the camera's loop
closer (`CameraState.posed`). A failure of one round's delivery is `on_error(camera, exc)`'s;
the next round goes on.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol

from .camera_state import CameraState
from .lane_worker import LaneWorker
from .result import FrameResult
from .robot_tf import TransformUnavailable
from .stream.multi_stream import MultiStreamSession, RoundResults
from .tracker import TrackedFrame

#: Rounds whose results may wait for the pose stage before `step` waits (back-pressure).
POSE_QUEUE_ROUNDS = 2


class PoseSink(Protocol):
    """What the pipeline needs of one camera's outputs (the node's `CameraStream`)."""

    def pose_round(self, stream: int) -> AbstractContextManager[CameraState | None]:
        """Hold the outputs for one round's results stepped in stream token `stream`; the camera's engine, or
        None when they must not be delivered (stale: not `CameraState.is_current(stream)`; or nothing can be
        published)."""

    def where(self, result: FrameResult) -> tuple[str, float]:
        """(the optical frame of the result's image, its stamp in s)."""

    def delivered(self, posed: list[PosedResult]) -> None:
        """One round's results, once: convert and publish each tracked frame (its map work to the map
        thread); a frame whose `missing` is set is dropped (a transform its TF mode needs is missing after
        `tf.timeout`)."""


@dataclass(frozen=True)
class PosedResult:
    """One result of a round as the pose stage made it: `frame` (tracked), or `missing` (not posed: the
    transform its TF mode needs)."""

    result: FrameResult
    frame: TrackedFrame | None
    missing: TransformUnavailable | None = None


@dataclass(frozen=True)
class RoundOutput:
    """One camera's results of one round, on their way to the pose stage.

    Attributes:
        camera: the camera's name in the set.
        stream: the stream token the results' frame was stepped in (`stream_of` its meta: the camera's
            `CameraState.stream` when the frame arrived), for the stale check and their `MapWork`s.
        results: `FrameResult`s in input order (the S0 anchor frames at once, else one).
    """

    camera: str
    stream: int
    results: list[FrameResult]


class CameraPipeline:
    """The engine side of the node's cameras: the model round and the pose stage (module doc).

    Args:
        cameras: the set of cameras (`build_engine`'s `MultiStreamSession`).
        sinks: each camera's `PoseSink`, by name.
        stream_of: the stream token a frame's meta (the `meta` given to `step`) carries (`CameraState.stream`
            when the frame arrived).
        on_error: `(camera, exception)` of a round whose delivery raised (pose-stage thread).
    """

    def __init__(
        self,
        cameras: MultiStreamSession,
        sinks: Mapping[str, PoseSink],
        stream_of: Callable[[Any], int],
        on_error: Callable[[str, Exception], None],
    ) -> None:
        self.cameras = cameras
        self._sinks = sinks
        self._stream_of = stream_of
        self._on_error = on_error
        self._poses: LaneWorker[RoundOutput] = LaneWorker(
            self._deliver,
            POSE_QUEUE_ROUNDS,
            lambda item, exc: on_error(item.camera, exc),
            name="lingbot_map_pose",
        )

    def step(self, frames: dict[str, tuple[Any, Any]], overlap: bool, depth: set[str]) -> RoundResults:
        """ONE model round over `frames` (camera -> (rgb [H, W, 3] uint8, meta)), its results handed to the
        pose stage (blocks while `POSE_QUEUE_ROUNDS` rounds wait there). `overlap`: a set of one runs
        `push_overlapped`, several cameras the one-deep pipeline of rounds (its results are those of the
        round before, of every camera that had a frame in flight); `depth`: the cameras whose depth head
        runs. Returns the round (results, each failed camera's exception).

        Raises:
            WorkerStopped: `stop` was called (also while the hand-over waited).
        """
        round_ = self.cameras.run_round(frames, overlap=overlap, depth=depth)
        for name, results in round_.results.items():  # with `overlap` also cameras not in `frames`
            if name not in round_.errors and results:
                self._hand_over(name, results)
        return round_

    def flush(self, name: str) -> list[FrameResult]:
        """The results of camera `name`'s overlapped frame still in flight, handed to the pose stage; [] when
        none. Raises what `MultiStreamSession.flush` raises (the session recovered as in `push`)."""
        results = self.cameras.flush(name)
        if results:
            self._hand_over(name, results)
        return results

    def wait_delivered(self, timeout: float) -> bool:
        """Wait (at most `timeout` s) until every round handed over is delivered; False on timeout."""
        return self._poses.wait_idle(timeout)

    def stop(self, timeout: float) -> bool:
        """Deliver what was handed over (at most `timeout` s), then end the pose stage; False when its thread
        did not end in time."""
        self._poses.wait_idle(timeout)
        return self._poses.stop(timeout)

    def _hand_over(self, name: str, results: list[FrameResult]) -> None:
        self._poses.submit(RoundOutput(name, self._stream_of(results[-1].meta), results), block=True)

    def _deliver(self, output: RoundOutput) -> None:
        """Pose-stage thread: one camera's results of one round, tracked and delivered once each."""
        sink = self._sinks[output.camera]
        with sink.pose_round(output.stream) as state:
            if state is None:
                return  # stale: the stream changed after the round
            posed: list[PosedResult] = []
            for result in output.results:
                optical, stamp_s = sink.where(result)
                try:
                    posed.append(PosedResult(result, state.track(result, optical, stamp_s, output.stream)))
                except TransformUnavailable as exc:
                    posed.append(PosedResult(result, None, exc))
            sink.delivered(posed)  # ros/ once per round
            for item in posed:
                if item.frame is not None:
                    state.posed(item.result, item.frame, item.frame.frame.stamp_s)
