"""`CameraPipeline` (engine/camera_pipeline.py) on the tiny preset (CPU, fp32), no ROS: ONE `step` call per
round runs the model round and hands the results to the pose stage, whose thread tracks each frame
(`CameraState.track`: its `CameraTracker`, robot TF through a `RobotTfSource` that makes it wait) and
delivers it once to the camera's `PoseSink`; a round stepped in a stream the sink has left (a reset) is not
delivered; a TF lookup that waits does not hold up the next rounds."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import pytest
from robot_scene import BASE_CAM
from tiny_stream import pan_frames, tiny_model

from lingbot_map_ros.engine.camera_pipeline import POSE_QUEUE_ROUNDS, CameraPipeline, PosedResult
from lingbot_map_ros.engine.camera_state import CameraState
from lingbot_map_ros.engine.config import SessionConfig
from lingbot_map_ros.engine.mapping.mapper import MapperConfig
from lingbot_map_ros.engine.mapping.scale import ScaleConfig
from lingbot_map_ros.engine.robot_tf import RobotTfConfig, TransformUnavailable
from lingbot_map_ros.engine.stream.multi_stream import MultiStreamSession
from lingbot_map_ros.engine.tracker import TrackedFrame
from lingbot_map_ros.model import LingBotMap

S0 = 2
PARAMS = dict(scale_frames=S0, sliding_window=3, max_window=6, image_width=56, max_stored_frames=9)


class GatedTf:
    """The robot's TF (static base_link -> cam) behind a gate: a lookup waits until `gate` is set, as the
    node's lookups wait up to `tf.timeout` for odometry newer than the image."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.waiting = threading.Event()

    def lookup(self, target: str, source: str, stamp_s: float, timeout_s: float) -> np.ndarray:
        self.waiting.set()
        if (target, source) == ("base_link", "cam") and self.gate.wait(30.0):
            return BASE_CAM
        raise TransformUnavailable(f"no {target} -> {source}", f"{target} -> {source}")


class Sink:
    """A camera's `PoseSink`: its engine (whose stream token a reset moves on), what was delivered."""

    def __init__(self, state: CameraState) -> None:
        self.state = state
        self.frames: list[tuple[int, TrackedFrame]] = []  # (frame number, tracked frame) delivered
        self.rounds = 0  # `delivered` calls

    @contextmanager
    def pose_round(self, stream: int) -> Iterator[CameraState | None]:
        yield self.state if self.state.is_current(stream) else None

    def where(self, result) -> tuple[str, float]:
        return "cam", 100.0 + result.meta[1]

    def delivered(self, posed: list[PosedResult]) -> None:
        self.rounds += 1
        for item in posed:
            if item.frame is None:
                raise AssertionError(f"frame {item.result.meta[1]} untracked: {item.missing}")
            self.frames.append((item.result.meta[1], item.frame))


@pytest.fixture(scope="module")
def model() -> LingBotMap:
    return tiny_model()


@pytest.fixture
def pipeline(model: LingBotMap) -> Iterator[tuple[CameraPipeline, Sink, GatedTf]]:
    tf = GatedTf()
    mapper = MapperConfig(scale=ScaleConfig(source="fixed", factor=1.0))
    sink = Sink(CameraState(mapper, RobotTfConfig("map_to_base"), tf))
    errors: list[tuple[str, Exception]] = []
    cameras = MultiStreamSession(model, SessionConfig(**PARAMS), ["cam"])
    pipeline = CameraPipeline(
        cameras, {"cam": sink}, lambda meta: meta[0], lambda *error: errors.append(error)
    )
    yield pipeline, sink, tf
    tf.gate.set()
    assert pipeline.stop(30) and errors == []


def _step(pipeline: CameraPipeline, sink: Sink, rgb: np.ndarray, i: int) -> None:
    round_ = pipeline.step({"cam": (rgb, (sink.state.stream, i))}, overlap=False, depth={"cam"})
    assert not round_.errors


def test_one_step_per_round_delivers_each_tracked_frame_once_while_tf_waits(pipeline) -> None:
    pipeline, sink, tf = pipeline
    frames = pan_frames(S0 + POSE_QUEUE_ROUNDS)
    for i, rgb in enumerate(frames):  # rounds: the anchors (taken, waiting for TF), then 2 queued
        _step(pipeline, sink, rgb, i)
    # every step returned while the pose stage waited in its first TF lookup: nothing delivered yet
    assert tf.waiting.is_set() and sink.frames == []
    tf.gate.set()
    assert pipeline.wait_delivered(30)
    assert [i for i, _ in sink.frames] == list(range(len(frames)))  # each frame once, in order
    assert sink.rounds == len(frames) - S0 + 1  # ros/ called once per round (the S0 anchors in one)
    assert all(frame.frame.mode == "map_to_base" for _, frame in sink.frames)
    assert sink.frames[0][1].frame.new_epoch and not any(f.frame.new_epoch for _, f in sink.frames[1:])


def test_a_round_of_a_stream_left_before_its_delivery_is_dropped(pipeline) -> None:
    pipeline, sink, tf = pipeline
    frames = pan_frames(S0 + 3)
    for i, rgb in enumerate(frames[: S0 + 1]):  # the anchors (taken, waiting for TF), one round queued
        _step(pipeline, sink, rgb, i)
    assert tf.waiting.wait(30)
    sink.state.next_stream()  # a reset: the queued round's stream is gone
    pipeline.cameras.reset("cam", "reset requested")
    tf.gate.set()
    for i, rgb in enumerate(frames[S0 + 1 :]):  # the new stream's anchors
        _step(pipeline, sink, rgb, 10 + i)
    assert pipeline.wait_delivered(30)
    # the anchors in flight at the reset were delivered (they had passed the check), frame S0 was not
    assert [i for i, _ in sink.frames] == [*range(S0), 10, 11]
