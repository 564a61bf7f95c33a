"""The synthetic demo scene (geometry consistent with its ground truth) and Sim(3) ATE."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from lingbot_map_ros.engine.geometry import quat_xyzw_to_matrix
from lingbot_map_ros.engine.mapping.writers import read_tum, write_tum
from lingbot_map_ros.tools.bags.bag_io import iter_frames
from lingbot_map_ros.tools.bags.synthetic_scene import (
    SceneConfig,
    camera_path,
    intrinsics,
    render,
    write_scene_bag,
)
from lingbot_map_ros.tools.evaluation.trajectory import (
    absolute_trajectory_error,
    associate,
    ate,
    umeyama_sim3,
)

SMALL = SceneConfig(width=96, height=72, frames=24, supersample=1)


def test_camera_path_is_a_closed_loop_of_proper_optical_poses() -> None:
    poses = camera_path(SMALL)
    rot = poses[:, :3, :3]
    identity = np.broadcast_to(np.eye(3), rot.shape)
    np.testing.assert_allclose(rot @ rot.transpose(0, 2, 1), identity, atol=1e-12)
    np.testing.assert_allclose(np.linalg.det(rot), 1.0, atol=1e-12)
    steps = np.linalg.norm(np.diff(poses[:, :3, 3], axis=0), axis=1)
    closing = np.linalg.norm(poses[0, :3, 3] - poses[-1, :3, 3])
    assert steps.min() > 0.1 and closing == pytest.approx(steps.mean(), rel=0.5)  # back where it started
    assert np.all(rot[:, 1, 1] > 0.9)  # camera y (down) stays close to world y (down): upright camera


def test_rendered_depth_reprojects_consistently_between_frames() -> None:
    """Unproject frame 0's depth with the ground truth, project into frame 1: the depths agree there."""
    config = SceneConfig(width=96, height=72, frames=24, supersample=1)
    poses, k = camera_path(config), intrinsics(config)
    (rgb0, depth0), (_, depth1) = render(config, poses[0]), render(config, poses[1])
    assert rgb0.dtype == np.uint8 and rgb0.shape == (72, 96, 3) and rgb0.std() > 20  # textured, not flat
    v, u = np.mgrid[0:72, 0:96] + 0.5
    rays = np.stack([(u - k[0, 2]) / k[0, 0], (v - k[1, 2]) / k[1, 1], np.ones_like(u)], -1)
    cam0 = rays * depth0[..., None]
    world = cam0.reshape(-1, 3) @ poses[0, :3, :3].T + poses[0, :3, 3]
    cam1 = (world - poses[1, :3, 3]) @ poses[1, :3, :3]
    px = cam1[:, :2] / cam1[:, 2:] * [k[0, 0], k[1, 1]] + k[:2, 2]
    inside = (cam1[:, 2] > 0.1) & (px[:, 0] >= 0) & (px[:, 0] < 96) & (px[:, 1] >= 0) & (px[:, 1] < 72)
    assert inside.mean() > 0.5
    sampled = depth1[px[inside, 1].astype(int), px[inside, 0].astype(int)]
    relative = np.abs(sampled - cam1[inside, 2]) / cam1[inside, 2]
    assert np.median(relative) < 0.02  # occlusion edges and pixel rounding only


def test_scene_bag_holds_the_frames_and_a_ground_truth_with_matching_stamps(tmp_path: Path) -> None:
    scene = write_scene_bag(SMALL, tmp_path / "scene", tmp_path / "gt.tum", storage="sqlite3", rate_hz=8.0)
    frames = list(iter_frames(scene.bag.path))
    stamps, rows = read_tum(scene.ground_truth)
    assert len(frames) == len(stamps) == SMALL.frames
    np.testing.assert_allclose([f.stamp_ns / 1e9 for f in frames], stamps, atol=1e-6)
    np.testing.assert_array_equal(frames[5].rgb, render(SMALL, camera_path(SMALL)[5])[0])
    np.testing.assert_allclose(rows[:, :3], camera_path(SMALL)[:, :3, 3], atol=1e-6)
    np.testing.assert_allclose(quat_xyzw_to_matrix(rows[:, 3:]), camera_path(SMALL)[:, :3, :3], atol=1e-6)


def test_umeyama_recovers_a_known_similarity_and_ate_is_zero_after_it(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    poses = camera_path(SMALL)
    angle = 0.7
    rot = np.array([[np.cos(angle), 0, np.sin(angle)], [0, 1, 0], [-np.sin(angle), 0, np.cos(angle)]])
    moved = poses.copy()
    moved[:, :3, :3] = rot @ poses[:, :3, :3]
    moved[:, :3, 3] = 0.37 * poses[:, :3, 3] @ rot.T + [1.0, -2.0, 0.5]
    alignment = umeyama_sim3(moved[:, :3, 3], poses[:, :3, 3])
    assert alignment.scale == pytest.approx(1 / 0.37)
    np.testing.assert_allclose(alignment.rotation, rot.T, atol=1e-9)

    stamps = 100.0 + np.arange(len(poses)) * 0.1
    write_tum(tmp_path / "gt.tum", stamps, poses)
    write_tum(tmp_path / "est.tum", stamps[2:] + 0.004, moved[2:])  # two frames missing, stamps jittered
    result = absolute_trajectory_error(tmp_path / "est.tum", tmp_path / "gt.tum")
    assert result.matched == len(poses) - 2 and result.rmse < 1e-6

    noisy = moved.copy()
    noisy[:, :3, 3] += rng.normal(0, 0.01, (len(poses), 3))
    write_tum(tmp_path / "noisy.tum", stamps, noisy)
    noisy_result = absolute_trajectory_error(tmp_path / "noisy.tum", tmp_path / "gt.tum")
    assert 0.005 / 0.37 < noisy_result.rmse < 0.05 / 0.37  # noise measured in ground-truth units


def test_association_and_degenerate_inputs_are_rejected(tmp_path: Path) -> None:
    pairs = associate(np.array([0.0, 0.1, 0.5]), np.array([0.101, 0.0, 0.3]))
    np.testing.assert_array_equal(pairs, [[0, 1], [1, 0]])
    with pytest.raises(ValueError, match="all identical"):
        umeyama_sim3(np.zeros((5, 3)), np.ones((5, 3)))
    write_tum(tmp_path / "a.tum", np.arange(5.0), camera_path(SMALL)[:5])
    write_tum(tmp_path / "b.tum", np.arange(5.0) + 10, camera_path(SMALL)[:5])
    with pytest.raises(ValueError, match="only 0 stamps"):
        absolute_trajectory_error(tmp_path / "a.tum", tmp_path / "b.tum")


def test_rigid_and_no_alignment_modes(tmp_path: Path) -> None:
    poses = camera_path(SMALL)
    angle = 0.3
    rot = np.array([[np.cos(angle), -np.sin(angle), 0], [np.sin(angle), np.cos(angle), 0], [0, 0, 1]])
    centres = poses[:, :3, 3]
    moved = centres @ rot.T + [0.5, 0.0, -1.0]
    assert ate(moved, centres, "se3").rmse < 1e-9  # a rigid motion is undone exactly
    assert ate(moved, centres, "none").rmse > 0.4
    assert ate(centres, centres, "none").rmse == 0.0
    scaled = ate(2.0 * moved, centres, "se3")
    assert scaled.alignment.scale == 1.0 and scaled.rmse > 0.5  # se3 keeps the scale error
    assert ate(2.0 * moved, centres, "sim3").rmse < 1e-9
    with pytest.raises(ValueError, match="alignment must be one of"):
        ate(moved, centres, "affine")


def test_ate_with_an_empty_or_nan_reference_is_a_clear_error_with_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 30: "SVD did not converge" (NaN) and "argmin of an empty sequence" (empty reference)."""
    from lingbot_map_ros.tools import cli

    poses = camera_path(SMALL)[:6]
    write_tum(tmp_path / "est.tum", np.arange(6.0), poses)
    (tmp_path / "empty.tum").write_text("# no poses\n")
    nan = poses.copy()
    nan[3, 0, 3] = np.nan
    write_tum(tmp_path / "nan.tum", np.arange(6.0), nan)
    cases = {"empty.tum": "the reference holds no poses", "nan.tum": "non-finite stamp or value"}
    for name, words in cases.items():
        assert cli.main(["ate", str(tmp_path / "est.tum"), str(tmp_path / name)]) == 2, name
        err = capsys.readouterr().err
        assert words in err and "Traceback" not in err, err
    assert cli.main(["ate", str(tmp_path / "nan.tum"), str(tmp_path / "est.tum")]) == 2
    assert "the estimate has 1 pose(s)" in capsys.readouterr().err
