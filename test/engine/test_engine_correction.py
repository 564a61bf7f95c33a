"""The one loop correction rule (engine/correction.py) and the Sim(3) group operations it is written in
(`geometry.Sim3` `@` / `inverse`, `FrameChain.sim3`): each pose moves by its own keyframe's correction, in the
map, relative to what the previous correction applied."""

from __future__ import annotations

import numpy as np

from lingbot_map_ros.engine.correction import Corrections, LoopCorrection
from lingbot_map_ros.engine.geometry import Sim3, rigid
from lingbot_map_ros.engine.mapping.frames import FrameChain, camera_rest_pose


def rotation(axis: np.ndarray, angle: float) -> np.ndarray:
    axis = axis / np.linalg.norm(axis)
    k = np.array([[0, -axis[2], axis[1]], [axis[2], 0, -axis[0]], [-axis[1], axis[0], 0]])
    return np.eye(3) + np.sin(angle) * k + (1 - np.cos(angle)) * k @ k


def sim(seed: int) -> Sim3:
    rng = np.random.default_rng(seed)
    return Sim3(
        rotation(rng.normal(size=3), rng.uniform(0.1, 1.0)), rng.normal(size=3), rng.uniform(0.5, 2.0)
    )


def test_sim3_group_operations_match_the_matrices() -> None:
    a, b = sim(1), sim(2)
    points = np.random.default_rng(3).normal(size=(5, 3))
    np.testing.assert_allclose(
        (a @ b).apply_points(points), a.apply_points(b.apply_points(points)), atol=1e-12
    )
    np.testing.assert_allclose((a @ a.inverse()).apply_points(points), points, atol=1e-12)
    assert abs((a.inverse() @ a).scale - 1.0) < 1e-12


def test_the_chain_as_a_sim3_places_poses_as_the_chain_does() -> None:
    world_cam0 = rigid(rotation(np.array([0.2, 1.0, 0.1]), 0.4), [0.3, -0.2, 1.0])
    chain = FrameChain(world_cam0, camera_rest_pose(), scale=1.7)
    pose = rigid(rotation(np.array([1.0, 0.0, 0.3]), 0.8), [1.0, 2.0, -0.5])
    np.testing.assert_allclose(chain.sim3().apply_pose(pose), chain.camera_pose(pose), atol=1e-12)


def test_each_pose_moves_by_its_keyframes_correction_relative_to_the_one_applied() -> None:
    g = sim(4)
    old = Corrections(np.array([1.0]), [sim(5)])
    new = Corrections(np.array([1.0, 3.0]), [sim(6), sim(7)])
    correction = LoopCorrection(new.values[-1], new, old, g, [], [], (0.0, 0.0, 1.0))
    stamps = np.array([0.5, 1.0, 2.0, 3.0, 4.0])
    poses = np.stack([rigid(rotation(np.array([0.0, 1.0, 0.0]), 0.1 * i), [i, 0.0, 0.0]) for i in range(5)])
    moved = correction.move(stamps, poses)
    for i, stamp in enumerate(stamps):
        c_new = new.values[0] if stamp < 3.0 else new.values[1]  # the newest keyframe at or before it
        fix = g @ c_new @ old.values[0].inverse() @ g.inverse()  # (before any keyframe: the first one's)
        np.testing.assert_allclose(moved[i], fix.apply_pose(poses[i]), atol=1e-12)
    identity = LoopCorrection(Sim3.identity(), Corrections(), Corrections(), g, [], [], (0.0, 0.0, 1.0))
    np.testing.assert_allclose(identity.move(stamps, poses), poses, atol=1e-12)  # no loop yet: no move
