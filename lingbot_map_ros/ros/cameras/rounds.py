"""The node's inference thread for its cameras: one round over the cameras that have a frame, ONE engine call.

`NodeRounds` is made at activate and stopped at deactivate. Inference thread: `StreamScheduler`
(scheduler.py: a drop-oldest queue per camera, at most `BatchConfig.max_wait_ms` of waiting for the other
cameras) -> `step_cameras` (cameras/step.py: ONE `CameraPipeline.step`, engine/camera_pipeline.py); with no
frame waiting, `flush_cameras` completes the overlapped step in flight. The pipeline's pose stage (the
engine's thread; blocking hand-over = back-pressure, never dropped) tracks the results and hands each one
back to its camera (`CameraStream`, the `PoseSink`: convert and publish). So a TF lookup, which may wait up to
`tf.timeout` for odometry newer than the image, never stalls the model.
"""

from __future__ import annotations

from collections.abc import Callable

from ...engine.face import CameraPipeline, WorkerStats, WorkerStopped
from ..input.intake import InputFrame
from ..lifecycle.pipeline import Pipeline
from ..params.declare import NodeParams
from .scheduler import StreamScheduler
from .step import flush_cameras, step_cameras
from .stream import CameraStream

#: On deactivate/shutdown, how long the pose stage may take to publish what was already inferred.
PUBLISH_DRAIN_S = 1.0


class NodeRounds:
    """The inference thread of the node's cameras and their engine `CameraPipeline` (module doc).

    Args:
        cameras: the node's cameras, in order (each the `PoseSink` of its results).
        pipeline: the configured pipeline (None once released: nothing is stepped; configured when made).
        params: the current parameter snapshot (`queue_size` at start, `inference.overlap` per step).
        ok: False once the node's context is shutting down (failures are then not counted).
    """

    def __init__(
        self,
        cameras: dict[str, CameraStream],
        pipeline: Callable[[], Pipeline | None],
        params: Callable[[], NodeParams],
        ok: Callable[[], bool],
    ) -> None:
        self._cameras = cameras
        self._pipeline = pipeline
        self._params = params
        self._ok = ok
        configured = pipeline()
        assert configured is not None, "NodeRounds are made at activate, after configure"
        self._engine = CameraPipeline(
            configured.cameras, cameras, lambda frame: frame.stream, self._on_publish_error
        )
        max_wait_ms = configured.cameras.batch.max_wait_ms
        self._scheduler: StreamScheduler[str, InputFrame] = StreamScheduler(
            list(cameras),
            self._step,
            params().queue_size,
            self._on_inference_error,
            max_wait_s=max_wait_ms / 1e3,
            on_idle=self._flush,
            gaps=configured.gaps,
        )

    def submit(self, name: str, frame: InputFrame) -> bool:
        """Camera `name`'s frame joins its drop-oldest queue; False when stopped (not queued)."""
        try:
            self._scheduler.submit(name, frame)
        except WorkerStopped:  # deactivate stopped the scheduler while this frame was being converted
            return False
        return True

    def clear(self, name: str) -> int:
        """Discard camera `name`'s queued frames; returns how many."""
        return self._scheduler.clear(name)

    def stats(self, name: str) -> WorkerStats:
        """Camera `name`'s queue counters (/diagnostics)."""
        return self._scheduler.stats(name)

    def wait_published(self) -> None:
        """Wait (at most `PUBLISH_DRAIN_S`) until what was inferred is published."""
        self._engine.wait_delivered(PUBLISH_DRAIN_S)

    def stop(self, step_wait_s: float) -> bool:
        """Stop the inference thread (the step in progress may take `step_wait_s`), publish what was inferred
        and end the pose stage; False when a thread did not end in time."""
        stopped = self._scheduler.stop(step_wait_s)
        return self._engine.stop(PUBLISH_DRAIN_S) and stopped  # publishes what was inferred first

    def _step(self, batch: list[tuple[str, InputFrame]]) -> list[Exception | None]:
        """Inference thread: one round over the cameras that have a frame (its results go to the pose stage
        in order); each camera's error."""
        pipeline = self._pipeline()
        if pipeline is None:  # released meanwhile (cleanup): nothing to step
            return [None] * len(batch)
        # on the CPU a step is synchronous: nothing to overlap (and the failure semantics stay push's)
        overlap = self._params().inference_overlap and pipeline.model.device.type == "cuda"
        errors = step_cameras(self._cameras, batch, self._engine, overlap=overlap)
        stepped = {name for name, _ in batch}
        for name, exc in errors.items():  # a frame in flight of a camera without a frame in this round
            if name not in stepped:
                self._on_inference_error(name, None, exc)
        return [errors.get(name) for name, _ in batch]

    def _flush(self) -> None:
        """Inference thread, no frame waiting: publish the overlapped step in flight (cameras/step.py)."""
        pipeline = self._pipeline()
        if pipeline is None:
            return
        errors = flush_cameras(self._cameras, self._engine)
        for name, exc in errors.items():
            self._on_inference_error(name, None, exc)

    def _on_publish_error(self, name: str, exc: Exception) -> None:
        """Pose stage: camera `name`'s round failed to publish."""
        if self._ok():  # else shutting down: the publishers are gone
            self._cameras[name].causes.publish_failed(exc)

    def _on_inference_error(self, name: str, frame: InputFrame | None, exc: Exception) -> None:
        if self._ok():  # else shutting down: the publishers are gone, the frame is not a failure
            self._cameras[name].inference_failed(exc)
