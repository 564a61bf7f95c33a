"""The mapper's geometry without weights: a stand-in session (test/robot_scene.py) returns the synthetic
room's
true poses and depths in a random Sim(3) with an unknown scale (0.37); the mapper must recover metres, the
robot's base poses and a grid that matches the room's walls."""

from __future__ import annotations

import json

import numpy as np
import pytest
from mapper_steps import locate_and_integrate
from robot_scene import BASE_CAM, StandInSession, floor_plan, make_scene, random_sim3, tolerant_iou

from lingbot_map_ros.engine.geometry import OPTICAL_TO_BODY, invert_rigid
from lingbot_map_ros.engine.mapping.frames import FrameChain, TfMode, camera_rest_pose, choose_tf_mode
from lingbot_map_ros.engine.mapping.grid import GridConfig, read_pgm, write_nav2_map
from lingbot_map_ros.engine.mapping.mapper import Mapper, MapperConfig, RobotSample
from lingbot_map_ros.engine.mapping.scale import ScaleConfig
from lingbot_map_ros.engine.mapping.voxel_map import VoxelMapConfig

UNKNOWN = 0.37  # model units per metre of the stand-in
FRAMES = 60


@pytest.fixture(scope="module")
def scene():
    return make_scene(FRAMES)


def _run(
    scene,
    source: str,
    mode: str = "map_to_odom",
    noise: float = 0.005,
    frames: int = FRAMES,
    min_samples: int = 5,
):
    mapper = Mapper(
        MapperConfig(
            voxel=VoxelMapConfig(voxel_size=0.05, pixel_stride=2),
            scale=ScaleConfig(source=source, min_samples=min_samples, min_baseline=0.3),
        )
    )
    session = StandInSession(scene, random_sim3(3, UNKNOWN))
    rng = np.random.default_rng(0)
    out = []
    for i in range(frames):
        for result in session.push_index(i):
            odom = scene.base[result.index].copy()
            odom[:3, 3] += rng.normal(0.0, noise, 3)
            robot = RobotSample(mode, BASE_CAM if mode != "map_to_camera" else None, odom)
            out.append(
                locate_and_integrate(mapper, result, 0.1 * result.index, robot, scene.depth[result.index])
            )
    return mapper, out


def test_odometry_scale_is_within_2_percent_after_20_keyframes(scene) -> None:
    mapper, out = _run(scene, "odometry", frames=20, min_samples=5)
    state = out[-1].scale
    assert state.converged and state.source == "odometry"
    error = abs(state.value * UNKNOWN - 1.0)
    print(
        f"odometry scale error after 20 keyframes: {100 * error:.3f} % ({state.samples} samples, "
        f"spread {state.spread:.4f})"
    )
    assert error < 0.02
    assert 0 < state.spread < 0.2


def test_depth_scale_is_within_1_percent_and_base_poses_within_1_cm(scene) -> None:
    mapper, out = _run(scene, "depth")
    assert abs(out[0].scale.value * UNKNOWN - 1.0) < 0.01
    assert abs(out[-1].scale.value * UNKNOWN - 1.0) < 0.01
    truth = np.stack([invert_rigid(scene.base[0]) @ b for b in scene.base])  # map = first base frame
    est = np.stack([f.body_pose for f in out])
    err = np.linalg.norm(est[:, :3, 3] - truth[:, :3, 3], axis=1)
    print(f"base pose error (depth scale): max {err.max():.2e} m")
    assert err.max() < 0.01
    rot_err = np.linalg.norm(est[:, :3, :3] - truth[:, :3, :3], axis=(1, 2))
    assert rot_err.max() < 1e-3
    # the camera pose is the base pose times the extrinsics; map -> odom composes back to the base pose
    for f in out:
        np.testing.assert_allclose(f.camera_pose, f.body_pose @ BASE_CAM, atol=1e-9)
    assert out[0].map_odom is not None


def test_map_is_gravity_aligned_and_the_first_base_is_the_origin(scene) -> None:
    _, out = _run(scene, "depth", frames=8)
    np.testing.assert_allclose(out[0].body_pose, np.eye(4), atol=1e-9)
    floor = out[0].points[out[0].points[:, 2] < 0.05]
    assert len(floor) > 100 and abs(np.median(floor[:, 2])) < 0.01  # the floor is z = 0


def test_camera_mode_keeps_todays_frames_and_model_units() -> None:
    assert choose_tf_mode("auto", True, True) == "map_to_odom"
    assert choose_tf_mode("auto", True, False) == "map_to_base"
    assert choose_tf_mode("auto", False, True) == "map_to_camera"
    assert choose_tf_mode("map_to_base", False, False) == "map_to_base"
    # members of the one StrEnum, equal to the parameter's strings both ways
    assert choose_tf_mode("map_to_base", False, False) is TfMode.MAP_TO_BASE
    assert choose_tf_mode(TfMode.AUTO, False, False) is TfMode.MAP_TO_CAMERA
    assert f"{TfMode.MAP_TO_ODOM}" == "map_to_odom" and json.dumps({"m": TfMode.AUTO}) == '{"m": "auto"}'
    with pytest.raises(ValueError, match="auto, map_to_odom, map_to_base, map_to_camera"):
        choose_tf_mode("bogus", True, True)
    pose = np.eye(4)
    pose[:3, 3] = [0.0, 0.0, 2.0]  # 2 units forward along the optical axis
    chain = FrameChain(np.eye(4), camera_rest_pose(), 1.0)
    np.testing.assert_allclose(chain.camera_pose(pose)[:3, 3], [2.0, 0.0, 0.0])  # x forward in map
    np.testing.assert_allclose(chain.camera_pose(pose)[:3, :3], OPTICAL_TO_BODY)
    np.testing.assert_allclose(chain.world_points(np.array([[1.0, 0.0, 0.0]])), [[0.0, -1.0, 0.0]])


def test_grid_matches_the_room_walls_and_saves_as_nav2_map(scene, tmp_path) -> None:
    mapper, _ = _run(scene, "depth")
    grid = mapper.grid.grid()
    occupied = grid.data == 100
    walls, boxes = floor_plan(grid.resolution, grid.origin_xy, grid.data.shape)
    iou = tolerant_iou(occupied, walls, boxes)
    print(f"grid IoU against the rasterised walls (1-cell tolerance, box footprints ignored): {iou:.3f}")
    assert iou >= 0.8
    assert (grid.data == 0).sum() > 5 * occupied.sum()  # the floor between camera and walls is free

    pgm, yaml = write_nav2_map(tmp_path, "map", grid)
    pixels = read_pgm(pgm)
    assert pixels.shape == grid.data.shape
    np.testing.assert_array_equal(np.flipud(pixels) == 0, occupied)
    np.testing.assert_array_equal(np.flipud(pixels) == 254, grid.data == 0)
    assert set(np.unique(pixels)) <= {0, 205, 254}
    meta = dict(line.split(": ", 1) for line in yaml.read_text().splitlines())
    assert meta["image"] == "map.pgm" and meta["mode"] == "trinary" and float(meta["resolution"]) == 0.05
    origin = [float(v) for v in meta["origin"].strip("[]").split(",")]
    assert origin[:2] == pytest.approx(grid.origin_xy) and origin[2] == 0.0
    assert meta["negate"] == "0" and 0 < float(meta["free_thresh"]) < float(meta["occupied_thresh"]) < 1
    # nav2_map_server's loader (map_io.cpp, trinary, negate 0): occ = 1 - p/255; occupied above
    # occupied_thresh, free below free_thresh, unknown otherwise; image row 0 is the top. It must give back
    # the grid exactly (unknown stays unknown: free_thresh 0.196, not nav2 map_saver's 0.25).
    occ = 1.0 - np.flipud(pixels).astype(np.float64) / 255.0
    loaded = np.where(
        occ > float(meta["occupied_thresh"]), 100, np.where(occ < float(meta["free_thresh"]), 0, -1)
    )
    np.testing.assert_array_equal(loaded, grid.data)


def test_keyframe_points_wait_for_the_scale_then_enter_the_map_at_it(scene) -> None:
    mapper, out = _run(scene, "odometry", frames=30, min_samples=5)
    first = next(i for i, f in enumerate(out) if f.scale.converged)
    assert first > 0 and not any(f.map_changed for f in out[:first]) and out[first].map_changed
    xyz, _ = mapper.voxels.points()
    assert abs(np.percentile(xyz[:, 2], 2)) < 0.1  # floor at 0 in metres, held frames included


def test_twist_uses_min_dt_and_counts_bad_stamps(scene) -> None:
    mapper = Mapper(MapperConfig(scale=ScaleConfig(source="fixed", factor=1 / UNKNOWN)))
    session = StandInSession(scene, random_sim3(3, UNKNOWN), scale_frames=1)
    stamps = [0.0, 0.1, 0.1, 0.05, 0.2]
    out = [locate_and_integrate(mapper, session.push_index(i)[0], s) for i, s in enumerate(stamps)]
    assert mapper.stamps_duplicate == 1 and mapper.stamps_backwards == 1
    assert out[0].twist_covariance[0, 0] >= 1e6 and np.all(out[2].twist == 0)
    assert out[1].twist_covariance[0, 0] < 1e6 and np.linalg.norm(out[1].twist[:3]) > 0
    assert np.all(np.diag(out[1].pose_covariance) > 0)


def test_unconverged_scale_grows_the_covariance(scene) -> None:
    _, out = _run(scene, "odometry", frames=12, min_samples=50)
    assert not out[-1].scale.converged
    mapper2, out2 = _run(scene, "depth", frames=12)
    assert out[-1].pose_covariance[0, 0] > 10 * out2[-1].pose_covariance[0, 0] > 0


def test_grid_config_validates() -> None:
    with pytest.raises(ValueError):
        GridConfig(min_height=1.0, max_height=0.5)


def test_epochs_clear_and_reanchors_restart_the_scale_samples(scene) -> None:
    mapper = Mapper(MapperConfig(scale=ScaleConfig(source="depth", min_samples=2)))
    session = StandInSession(scene, random_sim3(3, UNKNOWN), scale_frames=1)
    first = [
        locate_and_integrate(
            mapper, session.push_index(i)[0], 0.1 * i, RobotSample("map_to_base", BASE_CAM), scene.depth[i]
        )
        for i in range(4)
    ]
    assert first[0].new_epoch and not any(f.new_epoch for f in first[1:])
    assert all(f.map_odom is None for f in first) and mapper.scale.state().samples == 4
    value = mapper.scale.value
    moved = session.push_index(4)[0]
    moved.segment = 1  # a long-stream re-anchor: same map, the scale re-collects its samples
    locate_and_integrate(mapper, moved, 0.4, RobotSample("map_to_base", BASE_CAM), None)
    assert mapper.scale.state().samples == 0 and mapper.scale.value == value and len(mapper.trajectory) == 5
    restarted = session.push_index(5)[0]
    restarted.epoch = 1  # a reset: a new map frame, everything cleared
    out = locate_and_integrate(mapper, restarted, 0.5, RobotSample("map_to_base", BASE_CAM), scene.depth[5])
    assert out.new_epoch and len(mapper.trajectory) == 1
    np.testing.assert_allclose(out.body_pose, np.eye(4), atol=1e-9)  # the new map starts at this base


def test_odometry_scaled_base_poses_follow_the_truth_once_converged(scene) -> None:
    _, out = _run(scene, "odometry")
    truth = np.stack([invert_rigid(scene.base[0]) @ b for b in scene.base])
    est = np.stack([f.body_pose for f in out])
    first = next(i for i, f in enumerate(out) if f.scale.converged)
    err = np.linalg.norm(est[first:, :3, 3] - truth[first:, :3, 3], axis=1)
    print(f"base pose error (odometry scale, 5 mm odometry noise) after convergence: max {err.max():.4f} m")
    assert err.max() < 0.02  # measured 0.016 m over a 5.2 x 3 m loop; the scale still settles meanwhile


def test_a_later_camera_starts_in_the_first_cameras_map_frame(scene) -> None:
    """Several cameras, one map (issue 14): a second camera whose stream starts at frame 20 is anchored with
    `map_base` = the first camera's T_map_odom @ its odometry, so both trajectories are one in the map."""
    first, out = _run(scene, "depth", frames=30)
    second = Mapper(first.config)
    session = StandInSession(scene, random_sim3(7, 2.0 * UNKNOWN))  # another model world and scale
    later = []
    for i in range(20, 30):
        for result in session.push_index(i):
            odom = scene.base[result.index]
            map_base = out[19].map_odom @ odom if not later else None  # only the epoch's start reads it
            robot = RobotSample("map_to_odom", BASE_CAM, odom, map_base)
            later.append(
                locate_and_integrate(second, result, 0.1 * result.index, robot, scene.depth[result.index])
            )
    est = np.stack([f.body_pose for f in later])
    ref = np.stack([f.body_pose for f in out[20:30]])
    err = np.linalg.norm(est[:, :3, 3] - ref[:, :3, 3], axis=1)
    print(f"second camera vs first camera base poses in the shared map: max {err.max():.2e} m")
    assert err.max() < 0.02
    lone = Mapper(first.config)  # without map_base the second camera's map would start at its own base
    lone_pose = locate_and_integrate(
        lone,
        StandInSession(scene, random_sim3(7, 2.0 * UNKNOWN), scale_frames=1).push_index(20)[0],
        2.0,
        RobotSample("map_to_odom", BASE_CAM, scene.base[20]),
        scene.depth[20],
    ).body_pose
    np.testing.assert_allclose(lone_pose, np.eye(4), atol=1e-9)
