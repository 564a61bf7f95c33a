"""Pose outputs first (issue 13): the mapper's pose side and map side run apart and give what one after the
other gives;
each camera's map thread integrates in order, drops its oldest work when full (counted), and stays consistent
with `~/reset` and `~/save_map`; `~/path` is published by its timer, not per frame. No DDS traffic: in-process
publishers, recorded."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import numpy as np
import pytest
import rclpy
from builtin_interfaces.msg import Time
from mapper_steps import locate_and_integrate
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from rclpy.parameter import Parameter
from robot_scene import BASE_CAM, StandInSession, make_scene, random_sim3
from std_msgs.msg import Header

from lingbot_map_ros.engine.mapping.map_side import MapSide
from lingbot_map_ros.engine.mapping.mapper import Mapper, MapperConfig, RobotSample
from lingbot_map_ros.engine.mapping.scale import ScaleConfig
from lingbot_map_ros.engine.mapping.voxel_map import VoxelMapConfig
from lingbot_map_ros.engine.result import PHASE_STREAMING, FrameResult
from lingbot_map_ros.ros.lifecycle.timers import NodeTimers
from lingbot_map_ros.ros.messages.poses import stamp_seconds
from lingbot_map_ros.ros.outputs.config import OutputConfig
from lingbot_map_ros.ros.outputs.map_worker import MapItem, MapWorker
from lingbot_map_ros.ros.outputs.mapping import MappingOutputs
from lingbot_map_ros.ros.params.declare import check_update, declare_parameters, read_parameters
from lingbot_map_ros.ros.tf.listener import TfLookup

HW = (24, 32)


class Recorder:
    """Stands in for a publisher: keeps what was published."""

    def __init__(self) -> None:
        self.messages: list[object] = []

    def publish(self, msg: object) -> None:
        self.messages.append(msg)


def result(index: int, epoch: int = 0, keyframe: bool = True) -> FrameResult:
    """A small frame result: a camera moving along x over a plane 2 units away."""
    rng = np.random.default_rng(index)
    pose = np.eye(4)
    pose[0, 3] = 0.05 * index
    intrinsics = np.array([[30.0, 0, HW[1] / 2], [0, 30.0, HW[0] / 2], [0, 0, 1]])
    return FrameResult(
        index=index, meta=None, is_keyframe=keyframe, phase=PHASE_STREAMING, pose_c2w=pose,
        intrinsics=intrinsics, depth=(2.0 + 0.1 * rng.random(HW)).astype(np.float32),
        depth_conf=np.full(HW, 3.0, np.float32), rgb=rng.integers(0, 256, (*HW, 3), dtype=np.uint8),
        pose_enc=np.zeros(9, np.float32), epoch=epoch,
    )  # fmt: skip


def same_map(a: Mapper, b: Mapper) -> None:
    for got, want in zip(a.voxels.points(), b.voxels.points(), strict=True):
        np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(a.grid.grid().data, b.grid.grid().data)


# ------------------------------------------------------------------------------------------ engine seams
def test_integrating_later_equals_integrating_right_away() -> None:
    """Works integrated after every frame was located (the scale converging meanwhile, keyframes held and
    then flushed) give the same map, grid, clouds and poses as integrating each right after its `locate`."""
    scene = make_scene(30)
    config = MapperConfig(
        voxel=VoxelMapConfig(voxel_size=0.05, pixel_stride=2),
        scale=ScaleConfig(source="depth", min_samples=5),
    )
    now, later = Mapper(config), Mapper(config)
    session = StandInSession(scene, random_sim3(3, 0.37))
    mapped, works = [], []
    for i in range(30):
        for r in session.push_index(i):
            robot = RobotSample("map_to_base", BASE_CAM)
            mapped.append(locate_and_integrate(now, r, 0.1 * r.index, robot, scene.depth[r.index]))
            works.append(later.locate(r, 0.1 * r.index, robot, scene.depth[r.index]))
    clouds = [later.integrate(work) for _, work in works]
    assert any(m.map_changed for m in mapped) and not mapped[0].map_changed  # held, then integrated
    same_map(later, now)
    for m, (posed, _), cloud in zip(mapped, works, clouds, strict=True):
        np.testing.assert_array_equal(posed.body_pose, m.body_pose)
        np.testing.assert_array_equal(cloud.points, m.points)
        assert cloud.map_changed == m.map_changed
    np.testing.assert_array_equal(later.trajectory.full_history()[1], now.trajectory.full_history()[1])


def test_a_new_epoch_clears_the_map_even_when_its_first_work_is_dropped() -> None:
    mapper = Mapper(MapperConfig(voxel=VoxelMapConfig(voxel_size=0.05)))
    for i in range(3):
        mapper.integrate(mapper.locate(result(i), 0.1 * i)[1])
    first_epoch = len(mapper.voxels)
    _, dropped = mapper.locate(result(10, epoch=1), 1.0)  # never integrated (dropped from the queue)
    frame, work = mapper.locate(result(11, epoch=1), 1.1)
    assert not frame.new_epoch and first_epoch > 0
    mapper.integrate(work)
    fresh = Mapper(MapperConfig(voxel=VoxelMapConfig(voxel_size=0.05)))
    fresh.locate(result(10, epoch=1), 1.0)
    fresh.integrate(fresh.locate(result(11, epoch=1), 1.1)[1])
    same_map(mapper, fresh)  # only the new epoch's points


# --------------------------------------------------------------------------------------------- MapWorker
def worker(queue_size: int = 4) -> tuple[MapWorker, Mapper, dict[str, Recorder], list[Exception]]:
    mapper = Mapper(MapperConfig(voxel=VoxelMapConfig(voxel_size=0.05)))
    pubs = {name: Recorder() for name in ("frame_cloud", "map_cloud", "grid")}
    errors: list[Exception] = []
    return MapWorker(MapSide(mapper), pubs, queue_size, errors.append), mapper, pubs, errors


def items(mapper: Mapper, indices: range) -> list[MapItem]:
    header = lambda i: Header(stamp=Time(sec=i), frame_id="map")  # noqa: E731
    return [MapItem(mapper.locate(result(i), float(i))[1], header(i), frame_cloud=True) for i in indices]


def test_map_thread_integrates_in_order_and_publishes_each_frame_cloud() -> None:
    map_worker, mapper, pubs, errors = worker(queue_size=16)
    reference = Mapper(MapperConfig(voxel=VoxelMapConfig(voxel_size=0.05)))
    for item in items(mapper, range(10)):
        assert map_worker.submit(item)
    for i in range(10):
        locate_and_integrate(reference, result(i), float(i))
    assert map_worker.drain(10.0) and not errors
    assert [m.header.stamp.sec for m in pubs["frame_cloud"].messages] == list(range(10))
    same_map(mapper, reference)
    stats = map_worker.stats()
    counts = (stats["map_worker.processed"], stats["map_worker.dropped"], stats["map_worker.queued"])
    assert counts == (10, 0, 0)
    assert len(map_worker.recent_ms(True)) == 10 and map_worker.recent_ms(False) == []
    assert map_worker.publish_map(Time(sec=9), "map") == len(mapper.voxels) > 0
    assert map_worker.publish_map(Time(sec=9), "map") == -1  # unchanged since
    map_worker.stop()


def test_a_full_map_queue_drops_its_oldest_work_and_counts_it() -> None:
    map_worker, mapper, pubs, _ = worker(queue_size=4)
    work = items(mapper, range(10))
    with map_worker.side.lock:  # the map thread is busy (e.g. the map timer reads the map)
        map_worker.submit(work[0])
        deadline = time.monotonic() + 5.0
        while map_worker.stats()["map_worker.queued"] and time.monotonic() < deadline:
            time.sleep(0.01)  # the thread took it and waits for the lock
        accepted = [map_worker.submit(item) for item in work[1:]]  # 9 into a queue of 4: the 5 oldest go
    assert accepted == [True] * 4 + [False] * 5
    assert map_worker.drain(10.0)
    assert [m.header.stamp.sec for m in pubs["frame_cloud"].messages] == [0, 6, 7, 8, 9]
    stats = map_worker.stats()
    assert (stats["map_worker.submitted"], stats["map_worker.processed"], stats["map_worker.dropped"]) == (
        10, 5, 5)  # fmt: skip
    assert stats["map_worker.max_queued"] == 4
    map_worker.stop()


# ------------------------------------------------------------------------------------- MappingOutputs
@pytest.fixture
def outputs() -> Iterator[MappingOutputs]:
    """One camera's outputs on an in-process node (not spinning), publishers recorded."""
    context = rclpy.Context()
    rclpy.init(context=context)
    node = rclpy.create_node(
        "map_worker_test", context=context, parameter_overrides=[Parameter("map.stride", value=1)]
    )
    declare_parameters(node)
    config = OutputConfig.from_params(read_parameters(node)).with_params(
        tf_mode="map_to_camera", map_voxel_size=0.05
    )
    out = MappingOutputs(node, config, TfLookup(node))
    for name in ("path", "frame_cloud", "map_cloud", "grid"):
        out._pubs[name].publish = Recorder().publish  # recorded, not sent
    yield out
    out.destroy()
    node.destroy_node()
    rclpy.shutdown(context=context)


def published(outputs: MappingOutputs, name: str) -> list[object]:
    return outputs._pubs[name].publish.__self__.messages


def slow_integrate(outputs: MappingOutputs) -> tuple[threading.Event, threading.Event]:
    """The map thread's integration waits for the returned `go` event (set it to let it go on); `started` is
    set once the map thread is inside its first integration."""
    go, started = threading.Event(), threading.Event()
    integrate = outputs.mapper.integrate

    def wait_then_integrate(work: object) -> object:
        started.set()
        assert go.wait(10.0)
        return integrate(work)

    outputs.mapper.integrate = wait_then_integrate
    return go, started


def header(i: int) -> Header:
    return Header(stamp=Time(sec=100 + i), frame_id="cam")


def publish(outputs: MappingOutputs, result: FrameResult, header: Header) -> None:
    """What the camera pipeline's pose stage does with one result: track it (engine), then publish it."""
    tracked = outputs.tracker.track(result, outputs.camera_frame(header), stamp_seconds(header.stamp))
    outputs.publish(result, header, tracked)


def test_pose_outputs_do_not_wait_for_map_work_and_save_sees_every_keyframe(outputs: MappingOutputs) -> None:
    go, _ = slow_integrate(outputs)
    for i in range(5):
        publish(outputs, result(i), header(i))  # returns while the map thread is stuck
    assert published(outputs, "frame_cloud") == [] and outputs.mapper.trajectory.history_length == 5
    threading.Timer(0.3, go.set).start()
    xyz, _, stamps, _, _ = outputs.snapshot()  # ~/save_map: waits for the queued works first
    reference = Mapper(outputs.config.mapper_config())
    for i in range(5):
        locate_and_integrate(reference, result(i), 100.0 + i)
    assert len(xyz) == len(reference.voxels) > 0 and len(stamps) == 5
    assert [m.header.stamp.sec for m in published(outputs, "frame_cloud")] == [100, 101, 102, 103, 104]


def test_reset_drops_the_queued_map_works_and_leaves_an_empty_map(outputs: MappingOutputs) -> None:
    go, started = slow_integrate(outputs)
    for i in range(5):
        publish(outputs, result(i), header(i))
    assert started.wait(5.0)  # the map thread holds the first work (under load it may not have taken it yet)
    threading.Timer(0.3, go.set).start()  # the work in progress finishes, then the reset clears
    outputs.clear()
    assert outputs.map.drain(5.0)
    assert outputs.map_size() == 0 and outputs.mapper.trajectory.history_length == 0
    assert len(published(outputs, "frame_cloud")) == 1  # the one in progress; the 4 queued were dropped
    assert outputs.publish_map(Time(sec=1)) == 0  # the cleared map is published (empty)
    publish(outputs, result(0, epoch=1), header(10))  # the next stream maps normally
    assert outputs.map.drain(5.0) and outputs.map_size() > 0


def test_path_is_published_by_its_timer_with_the_last_frames_header(outputs: MappingOutputs) -> None:
    for i in range(4):
        publish(outputs, result(i), header(i))
    assert published(outputs, "path") == []  # not per frame
    assert outputs.publish_path()
    assert not outputs.publish_path()  # nothing new since
    (path,) = published(outputs, "path")
    assert [p.header.stamp.sec for p in path.poses] == [100, 101, 102, 103]
    assert path.header.stamp.sec == 103 and path.header.frame_id == "map"
    publish(outputs, result(4), header(4))
    assert outputs.publish_path() and len(published(outputs, "path")[-1].poses) == 5


def test_path_timer_runs_at_path_publish_rate() -> None:
    context = rclpy.Context()
    rclpy.init(context=context)
    node = rclpy.create_node(
        "path_rate_test", context=context, parameter_overrides=[Parameter("path.publish_rate", value=4.0)]
    )
    try:
        declare_parameters(node)
        params = read_parameters(node)
        timers = NodeTimers(
            node,
            MutuallyExclusiveCallbackGroup(),
            params,
            list,
            list,
            lambda: None,
            lambda: True,
            lambda name, exc: None,
        )
        assert timers._timers["path_timer"].timer_period_ns == 250_000_000
        for bad in (0.0, 1000.0):  # validated: a rate in (0, 100] Hz
            (result,) = node.set_parameters([Parameter("path.publish_rate", value=bad)])
            refused = check_update([Parameter("path.publish_rate", value=bad)], params, configured=False)
            assert not result.successful and "path.publish_rate must be in" in refused.reason
    finally:
        node.destroy_node()
        rclpy.shutdown(context=context)


def test_a_reset_waits_for_a_path_being_sent_and_nothing_old_follows(outputs: MappingOutputs) -> None:
    sent: list[float] = []

    def slow_publish(msg: object) -> None:  # 1,000 poses take milliseconds to serialise
        time.sleep(0.3)
        sent.append(time.monotonic())

    outputs._pubs["path"].publish = slow_publish
    for i in range(3):
        publish(outputs, result(i), header(i))
    timer = threading.Thread(target=outputs.publish_path)
    timer.start()
    time.sleep(0.05)  # the timer is sending the old stream's path
    start = time.monotonic()
    publish(outputs, result(3), header(3))  # the pose path does not wait for it
    assert time.monotonic() - start < 0.25
    outputs.clear()
    cleared = time.monotonic()
    timer.join()
    assert len(sent) == 1 and sent[0] <= cleared  # sent before the reset returned
    assert not outputs.publish_path() and len(sent) == 1  # nothing of the old stream afterwards
