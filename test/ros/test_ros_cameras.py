"""Several cameras in one node (issue 14), without DDS traffic: the `cameras` parameter's validation, the
per-camera scheduler (one thread, a drop-oldest queue per camera), the per-camera `CameraStream` on a
configured in-process node (one model, one session per camera, independent streams and resets), and the
fusion of several cameras' maps and grids."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import replace

import numpy as np
import pytest
from builtin_interfaces.msg import Time
from pose_recorder import recording_pipeline
from rclpy.lifecycle import TransitionCallbackReturn
from rclpy.parameter import Parameter
from ros_helpers import in_process_node, load_frames
from std_msgs.msg import Header

from lingbot_map_ros.engine.mapping.fusion import fuse_grids, fuse_points
from lingbot_map_ros.engine.mapping.grid import GridConfig, OccupancyGridBuilder
from lingbot_map_ros.engine.mapping.voxel_map import VoxelMapConfig
from lingbot_map_ros.engine.stream.multi_stream import MultiStreamSession
from lingbot_map_ros.engine.stream.session import StreamingSession
from lingbot_map_ros.ros.cameras.scheduler import StreamScheduler
from lingbot_map_ros.ros.cameras.step import flush_cameras, step_cameras
from lingbot_map_ros.ros.cameras.stream import CameraStream
from lingbot_map_ros.ros.input.intake import InputFrame
from lingbot_map_ros.ros.node import LingBotMapNode
from lingbot_map_ros.ros.params.declare import (
    PARAMETERS,
    NodeParams,
    camera_names_problems,
    check_update,
    cross_check,
    field_name,
)

DEFAULTS = {spec.name: spec.default for spec in PARAMETERS}


# ----------------------------------------------------------------------------------------------- params
def test_camera_names_are_validated() -> None:
    assert camera_names_problems(("",)) == []  # the default: one unnamed camera
    assert camera_names_problems(("front", "rear_2")) == []
    assert camera_names_problems(()) and "at least one" in camera_names_problems(())[0]
    for bad in ("", "2cam", "front/left", "a b", "front-1", "_x"):
        assert camera_names_problems(("front", bad)), bad
    assert "more than once" in camera_names_problems(("front", "rear", "front"))[0]
    assert cross_check({**DEFAULTS, "cameras": ["front", "rear"]}) == []
    assert any(
        "scale.source" in p for p in cross_check({**DEFAULTS, "cameras": ["a", "b"], "scale.source": "depth"})
    )
    assert any(
        "camera_frame" in p for p in cross_check({**DEFAULTS, "cameras": ["a", "b"], "camera_frame": "cam"})
    )


def test_cameras_is_a_start_up_string_array() -> None:
    current = NodeParams(**{field_name(s.name): s.default for s in PARAMETERS})
    same = check_update([Parameter("cameras", value=[""])], current, configured=True)
    assert same.successful, same.reason
    for configured in (False, True):  # new topics and services need a new node, configured or not
        changed = check_update([Parameter("cameras", value=["front"])], current, configured=configured)
        assert not changed.successful and "restart" in changed.reason
    wrong = check_update([Parameter("cameras", value="front")], current, configured=False)
    assert not wrong.successful and "string array" in wrong.reason


# -------------------------------------------------------------------------------------------- scheduler
def test_scheduler_steps_every_ready_camera_and_drops_per_camera() -> None:
    release = threading.Event()
    batches: list[list[tuple[str, int]]] = []

    def step(batch: list[tuple[str, int]]) -> list[Exception | None]:
        release.wait(5)
        batches.append(batch)
        return [ValueError("bad") if item == 99 else None for _, item in batch]

    errors: list[tuple[str, int]] = []
    scheduler = StreamScheduler(["front", "rear"], step, 2, lambda key, item, exc: errors.append((key, item)))
    try:
        scheduler.submit("front", 0)  # taken at once: the step waits on `release`
        deadline = time.monotonic() + 5
        while scheduler.stats("front").in_flight == 0:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        for i in range(1, 6):  # a fast camera: only its own two newest frames are kept
            assert scheduler.submit("front", i) == (i <= 2)
        scheduler.submit("rear", 99)  # the slow camera's frame is not evicted by the fast one
        release.set()
        deadline = time.monotonic() + 5
        while scheduler.stats("front").processed + scheduler.stats("rear").processed < 4:
            assert time.monotonic() < deadline
            time.sleep(0.01)
    finally:
        assert scheduler.stop(5)
    assert batches[0] == [("front", 0)]
    assert batches[1] == [("rear", 99), ("front", 4)]  # round robin: rear served first this time
    assert batches[2] == [("front", 5)]
    front, rear = scheduler.stats("front"), scheduler.stats("rear")
    assert (front.submitted, front.processed, front.dropped, front.failed, front.max_queued) == (
        6,
        3,
        3,
        0,
        2,
    )
    assert (rear.submitted, rear.processed, rear.dropped, rear.failed) == (1, 1, 0, 1)
    assert errors == [("rear", 99)]  # a failure is its camera's only


# -------------------------------------------------------------------------------------- camera stream
@pytest.fixture(scope="module")
def node() -> Iterator[LingBotMapNode]:
    """An in-process node with two cameras, configured and active (not spinning: no callbacks run)."""
    params = {
        "autostart": False,
        "kv_cache.scale_frames": 2,
        "tf.mode": "map_to_camera",
        "cameras": ["front", "rear"],
    }
    with in_process_node(params) as node:
        yield node


def frame(camera: CameraStream, rgb: np.ndarray, i: int, frame_id: str = "") -> InputFrame:
    """A frame of `camera` in its current stream, stamped `i` s, frame id `<name>_optical` by default."""
    header = Header(stamp=Time(sec=i), frame_id=frame_id or f"{camera.name}_optical")
    return InputFrame(header, rgb, time.monotonic(), camera.outputs.state.stream)


def step(
    node: LingBotMapNode, *frames: tuple[str, InputFrame], publish: bool = False, overlap: bool = False
) -> dict[str, list]:
    """One round of the node's inference thread (camera_step.py) and its pose stage (published with
    `publish`; `overlap`: the one-deep pipeline of rounds): the results delivered, per camera that produced
    any."""
    pipeline, rounds = recording_pipeline(node, publish)
    try:
        assert not step_cameras(node.cameras, list(frames), pipeline, overlap=overlap)
    finally:
        assert pipeline.stop(10)
    return dict(rounds)


def test_each_camera_has_its_own_session_on_the_one_model_and_pool(node: LingBotMapNode) -> None:
    front, rear = node.cameras["front"], node.cameras["rear"]
    multi = node._pipeline.cameras
    assert isinstance(multi, MultiStreamSession) and multi.sessions == {
        "front": front.session,
        "rear": rear.session,
    }
    assert front.session is not rear.session and front.session.model is node._pipeline.model
    assert front.intake.subscribe(node._facade, node.params, None)[0].topic_name.endswith("/front/image")
    config = front.output_config(node.params, primary=True)
    assert (config.camera_map_frame, config.publish_robot_tf) == ("map_front", True)
    assert not rear.output_config(node.params, primary=False).publish_robot_tf
    services = {name for name, _ in node.get_service_names_and_types()}
    assert {"/lingbot_map/front/reset", "/lingbot_map/rear/reset", "/lingbot_map/reset"} <= services


def test_interleaved_cameras_equal_separate_sessions_and_reset_alone(node: LingBotMapNode) -> None:
    images = load_frames(12, step=2)
    front, rear = node.cameras["front"], node.cameras["rear"]
    poses: dict[str, list[np.ndarray]] = {"front": [], "rear": []}
    for i in range(6):  # rear pauses for frames 2 and 3: then front steps alone
        batch = [("front", frame(front, images[i], i))]
        if i not in (2, 3):
            batch.append(("rear", frame(rear, images[6 + i], i)))
        for name, out in step(node, *batch).items():
            poses[name] += [r.pose_c2w for r in out]
    multi = node._pipeline.cameras
    assert multi.pool_stats()["batches"].get(2, 0) >= 1  # the two streaming frames went as one batch
    reference = StreamingSession(node._pipeline.model, multi.config)
    expected = [r.pose_c2w for i in range(6) for r in reference.push(images[i])]
    assert len(poses["front"]) == 6 and len(poses["rear"]) == 4
    np.testing.assert_allclose(np.stack(poses["front"]), np.stack(expected), atol=1e-5)

    # resetting rear: its old frames are dropped, its session restarts; front goes on
    old = frame(rear, images[0], 9)
    assert node.reset_camera("rear") == 0
    assert step(node, ("rear", old)) == {}  # inferred after the reset: dropped
    out = step(node, ("rear", frame(rear, images[0], 10)), ("front", frame(front, images[6], 6)))
    assert list(out) == ["front"]  # rear: anchor 1 of 2
    assert [r.index for r in out["front"]] == [6] and out["front"][0].epoch == 0

    # another frame_id on the front camera's topic (confirmed by the intake) starts a new stream there
    epoch = front.session_stats.epoch
    step(node, ("front", frame(front, images[7], 7, "other_optical")))
    assert front.session_stats.epoch == epoch + 1 and rear.session_stats.epoch == 1


def test_deactivate_activate_keeps_each_cameras_map_and_path(node: LingBotMapNode) -> None:
    images = load_frames(6, step=2)
    rear = node.cameras["rear"]
    node.reset_camera("rear")
    for i in range(4):
        step(node, ("rear", frame(rear, images[i], 100 + i)), publish=True)
    outputs, poses = rear.outputs, rear.outputs.mapper.trajectory.history_length
    assert poses == 4
    assert node.trigger_deactivate() == TransitionCallbackReturn.SUCCESS
    assert node.trigger_activate() == TransitionCallbackReturn.SUCCESS
    assert rear.outputs is outputs  # kept: same mapper, map and path
    out = step(node, ("rear", frame(rear, images[4], 104)), publish=True)["rear"]
    assert out[0].index == 4 and outputs.mapper.trajectory.history_length == poses + 1


def test_overlapped_rounds_deliver_each_frame_in_flight_once_and_none_after_a_reset(
    node: LingBotMapNode,
) -> None:
    """Issue 33's pipeline of rounds through `step_cameras`: a round decodes the round before, also the frame
    of a camera without a frame in it; a reset drops that camera's frame in flight; `flush_cameras`
    ends it."""
    images = load_frames(8, step=2)
    front, rear = node.cameras["front"], node.cameras["rear"]
    for name in ("front", "rear"):
        node.reset_camera(name)

    def both(i: int) -> dict[str, list]:
        batch = ("front", frame(front, images[i], 200 + i)), ("rear", frame(rear, images[4 + i], 200 + i))
        return step(node, *batch, overlap=True)

    assert [len(r) for r in [*both(0).values(), *both(1).values()]] == [2, 2]  # the anchor phases
    assert both(2) == {}  # both streaming frames in flight
    out = step(node, ("front", frame(front, images[3], 203)), overlap=True)
    assert {name: [r.meta.header.stamp.sec for r in out[name]] for name in out} == {
        "front": [202],
        "rear": [202],
    }
    node.reset_camera("front")  # its frame 203 in flight: dropped unread
    assert step(node, ("rear", frame(rear, images[7], 207)), overlap=True) == {}
    pipeline, rounds = recording_pipeline(node)
    try:
        assert not flush_cameras(node.cameras, pipeline)
    finally:
        assert pipeline.stop(10)
    assert [(name, [r.meta.header.stamp.sec for r in results]) for name, results in rounds] == [
        ("rear", [207])
    ]
    assert node._pipeline.cameras.stats("front").frames == 0  # the new stream has decoded nothing


# ---------------------------------------------------------------------------------------------- fusion
def test_fused_points_are_one_voxel_map() -> None:
    config = VoxelMapConfig(voxel_size=0.1, conf_threshold=0.0, pixel_stride=1, max_points=1000)
    a = (np.array([[0.0, 0, 0], [1, 0, 0]], np.float32), np.full((2, 3), 200, np.uint8))
    b = (np.array([[0.01, 0, 0], [0, 2, 0]], np.float32), np.full((2, 3), 100, np.uint8))
    xyz, rgb = fuse_points([a, b], config)
    assert len(xyz) == 3  # the two points in one voxel are one
    assert sorted(map(tuple, np.round(xyz, 1))) == [(0.0, 0.0, 0.0), (0.0, 2.0, 0.0), (1.0, 0.0, 0.0)]


def _cells(grid: object) -> dict[tuple[int, int], int]:
    """World cell index -> value of every known cell."""
    res = grid.resolution
    ox, oy = (round(v / res) for v in grid.origin_xy)
    rows, cols = np.nonzero(grid.data != -1)
    return {(ox + c, oy + r): int(grid.data[r, c]) for r, c in zip(rows, cols, strict=True)}


def test_fused_grid_equals_one_grid_of_both_cameras() -> None:
    config = replace(GridConfig(), resolution=0.1)
    rng = np.random.default_rng(0)
    wall = np.column_stack([np.full(200, 2.0), rng.uniform(-1, 1, 200), rng.uniform(0.0, 1.0, 200)])
    floor = np.column_stack([rng.uniform(-3, -1, 200), rng.uniform(-1, 1, 200), np.zeros(200)])
    front, rear, both = (OccupancyGridBuilder(config) for _ in range(3))
    front.integrate(wall, np.zeros(3))
    rear.integrate(floor, np.array([-0.5, 0.0, 0.5]))
    both.integrate(wall, np.zeros(3))
    both.integrate(floor, np.array([-0.5, 0.0, 0.5]))
    fused = fuse_grids([front.counts(), rear.counts()], config)
    assert _cells(fused) == _cells(both.grid())
    assert 100 in _cells(fused).values() and 0 in _cells(fused).values()
    assert _cells(fuse_grids([], config)) == {}


def test_scheduler_waits_a_bounded_time_for_the_other_cameras() -> None:
    batches: list[list[str]] = []
    scheduler = StreamScheduler(
        ["front", "rear"],
        lambda b: batches.append([k for k, _ in b]) or [None] * len(b),
        4,
        lambda *a: None,
        max_wait_s=0.5,
    )
    try:
        scheduler.submit("front", 0)
        time.sleep(0.1)
        scheduler.submit("rear", 0)  # within max_wait: stepped together with front's frame
        time.sleep(0.2)
        start = time.monotonic()
        scheduler.submit("front", 1)  # rear pauses: front goes alone after at most max_wait
        while len(batches) < 2:
            assert time.monotonic() - start < 2
            time.sleep(0.01)
        waited = time.monotonic() - start
    finally:
        assert scheduler.stop(5)
    assert batches == [["front", "rear"], ["front"]] and 0.4 < waited < 1.5
