"""A camera pipeline over an in-process node whose pose stage records what it delivers (tests of the node's
inference thread without spinning: test_ros_overlap.py, test_ros_cameras.py, test_node_cameras_gpu.py).

Each camera's `PoseSink` is the camera's own (`CameraStream`: the stale check under its publish lock) with
every delivered round's results recorded; with `publish` they are also tracked and published as the node's
pose stage does.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from lingbot_map_ros.engine.camera_pipeline import CameraPipeline
from lingbot_map_ros.ros.cameras.stream import CameraStream


class RecordingSink:
    """A camera's `PoseSink` that records each delivered round (`rounds`: `(camera, results)`)."""

    def __init__(self, camera: CameraStream, publish: bool, rounds: list[tuple[str, list]]) -> None:
        self.camera, self.publish, self.rounds = camera, publish, rounds

    @contextmanager
    def pose_round(self, stream: int) -> Iterator[object | None]:
        with self.camera.pose_round(stream) as tracker:
            if tracker is None:  # stale: not delivered
                yield None
                return
            self.rounds.append((self.camera.name, []))
            yield self  # the camera's engine as the pipeline sees it (`track`, `posed`)

    def track(self, result, optical: str, stamp_s: float, stream: int | None = None):
        self.rounds[-1][1].append(result)
        return self.camera.outputs.state.track(result, optical, stamp_s, stream) if self.publish else None

    def posed(self, result, frame, stamp_s: float) -> None:
        if self.publish:
            self.camera.outputs.state.posed(result, frame, stamp_s)

    def where(self, result) -> tuple[str, float]:
        return self.camera.where(result)

    def delivered(self, posed) -> None:  # noqa: ANN001
        missing = [item.missing for item in posed if item.missing is not None]
        assert not missing, f"untracked: {missing}"
        if self.publish:
            self.camera.delivered(posed)


def recording_pipeline(node, publish: bool = False) -> tuple[CameraPipeline, list[tuple[str, list]]]:
    """A `CameraPipeline` over `node`'s cameras and the list its pose stage records the rounds in."""
    rounds: list[tuple[str, list]] = []
    sinks = {name: RecordingSink(camera, publish, rounds) for name, camera in node.cameras.items()}
    return CameraPipeline(node._pipeline.cameras, sinks, lambda frame: frame.stream, _raise), rounds


def _raise(name: str, exc: Exception) -> None:
    raise AssertionError(f"camera {name!r}: {exc}")
