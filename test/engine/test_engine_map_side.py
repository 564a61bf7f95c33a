"""`MapSide` (engine/mapping/map_side.py), the map's one owner, without ROS: integration with the frame cloud
under its lock, each reader's change tracking (a new epoch, `mark_changed`), the robot-map parts the fused map
reads, a rebuild that replaces the map, and a work of a stream left since (the stream token) dropped."""

from __future__ import annotations

import threading

import numpy as np

from lingbot_map_ros.engine.camera_state import CameraState
from lingbot_map_ros.engine.mapping.map_side import MapSide
from lingbot_map_ros.engine.mapping.mapper import Mapper, MapperConfig, RobotSample
from lingbot_map_ros.engine.mapping.voxel_map import VoxelMapConfig
from lingbot_map_ros.engine.result import PHASE_STREAMING, FrameResult

HW = (24, 32)


def result(index: int, epoch: int = 0) -> FrameResult:
    """A camera moving along x over a plane 2 units away."""
    rng = np.random.default_rng(index)
    pose = np.eye(4)
    pose[0, 3] = 0.05 * index
    intrinsics = np.array([[30.0, 0, HW[1] / 2], [0, 30.0, HW[0] / 2], [0, 0, 1]])
    return FrameResult(
        index=index, meta=None, is_keyframe=True, phase=PHASE_STREAMING, pose_c2w=pose, intrinsics=intrinsics,
        depth=(2.0 + 0.1 * rng.random(HW)).astype(np.float32), depth_conf=np.full(HW, 3.0, np.float32),
        rgb=rng.integers(0, 256, (*HW, 3), dtype=np.uint8), pose_enc=np.zeros(9, np.float32), epoch=epoch,
    )  # fmt: skip


def test_each_reader_takes_the_map_once_per_change() -> None:
    mapper = Mapper(MapperConfig(voxel=VoxelMapConfig(voxel_size=0.05)))
    side = MapSide(mapper)
    assert side.take_points() is None and side.take_grid() is None  # nothing yet
    held: list[bool] = []
    cloud = side.integrate(mapper.locate(result(0), 0.0)[1], lambda c: held.append(side.lock.locked()))
    assert held == [True] and len(cloud.points) > 0  # the frame cloud's callback runs under the lock
    xyz, rgb = side.take_points()
    assert len(xyz) == side.size() > 0 and rgb.dtype == np.uint8
    assert side.take_points() is None and side.take_grid() is not None  # the grid reader had not taken it
    assert side.take_points(force=True) is not None
    with side.lock:
        side.mark_changed()
    assert side.take_points() is not None and side.take_grid() is not None
    np.testing.assert_array_equal(side.snapshot()[0], xyz)
    assert side.robot_parts() is None  # map_to_camera: not in the robot's map frame


def test_robot_parts_and_a_rebuild() -> None:
    mapper = Mapper(MapperConfig(voxel=VoxelMapConfig(voxel_size=0.05)))
    side = MapSide(mapper)
    robot = RobotSample("map_to_base", np.eye(4))
    for i in range(3):
        side.integrate(mapper.locate(result(i), 0.1 * i, robot)[1])
    (xyz, _), (hits, passes, origin) = side.robot_parts()
    assert len(xyz) == side.size() and hits.shape == passes.shape and origin.shape == (2,)
    side.take_points(), side.take_grid()
    moved = np.array([[1.0, 0.0, 0.0], [1.0, 0.5, 0.0]], np.float32)
    side.rebuild([(moved, np.full((2, 3), 7, np.uint8), np.zeros(3))])
    points = side.take_points()
    assert points is not None and side.size() == 2 and side.take_grid() is not None
    np.testing.assert_allclose(np.sort(points[0], axis=0), np.sort(moved, axis=0), atol=0.05)


def test_a_reader_waits_for_an_integration_in_progress() -> None:
    mapper = Mapper(MapperConfig(voxel=VoxelMapConfig(voxel_size=0.05)))
    side = MapSide(mapper)
    work = mapper.locate(result(0), 0.0)[1]
    started, release = threading.Event(), threading.Event()
    thread = threading.Thread(target=side.integrate, args=(work, lambda c: (started.set(), release.wait(5))))
    thread.start()
    assert started.wait(5)
    sizes: list[int] = []
    reader = threading.Thread(target=lambda: sizes.append(side.size()))
    reader.start()
    reader.join(0.2)
    assert reader.is_alive() and sizes == []  # blocked on the map's lock
    release.set()
    thread.join(5), reader.join(5)
    assert sizes == [side.size()] and sizes[0] > 0


def test_a_map_work_from_before_a_new_stream_is_dropped() -> None:
    """The camera's stream token (`CameraState.stream`) is carried by each `MapWork`: a work located before
    `next_stream` (a reset, a loaded session) never enters the map, one of the new stream does."""
    state = CameraState(MapperConfig(voxel=VoxelMapConfig(voxel_size=0.05)))
    old = state.track(result(0), "cam", 0.0).work
    assert old.stream == state.stream == 0
    assert state.next_stream() == state.stream == 1 and not state.is_current(old.stream)
    clouds: list[object] = []
    assert state.map_side.integrate(old, clouds.append) is None  # stale: dropped, no frame cloud
    assert clouds == [] and state.map_side.size() == 0 and state.map_side.stale_dropped == 1
    with state.tracker.lock, state.map_side.lock:
        state.tracker.clear()  # what the reset does next (the node's `MappingOutputs.clear`)
    new = state.track(result(1, epoch=1), "cam", 1.0).work
    assert new.stream == 1 and new.epoch == 1
    cloud = state.map_side.integrate(new, clouds.append)
    assert cloud is not None and clouds == [cloud] and state.map_side.size() > 0
    # a round of the old stream tracked late (its token given explicitly) is dropped too
    late = state.track(result(2, epoch=1), "cam", 2.0, stream=0).work
    size = state.map_side.size()
    assert state.map_side.integrate(late) is None and state.map_side.size() == size
