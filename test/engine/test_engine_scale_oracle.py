"""Metric scale against the drifting oracle's truth (issue 23), which synthetic weights cannot check: the
stream's unit is not metres (0.37 units per metre); `scale.source: odometry` with wheel odometry = the truth
+ 1 % noise gives the trajectory's length within 2 %, `depth` with true depth + 1 % noise within 1 %."""

from __future__ import annotations

import numpy as np
import pytest
from mapper_steps import locate_and_integrate

from lingbot_map_ros.engine.mapping.mapper import Mapper, MapperConfig, RobotSample
from lingbot_map_ros.engine.mapping.scale import ScaleConfig
from lingbot_map_ros.tools.bags.synthetic_scene import SceneConfig
from lingbot_map_ros.tools.loop.loop_oracle import DriftConfig, LoopScene, oracle_session

UNIT = 0.37  # stream units per metre


def _length(positions: np.ndarray) -> float:
    return float(np.linalg.norm(np.diff(positions, axis=0), axis=1).sum())


@pytest.mark.parametrize(("source", "tolerance"), [("odometry", 0.02), ("depth", 0.01)])
def test_trajectory_length_in_metres(source: str, tolerance: float) -> None:
    scene = LoopScene.render(SceneConfig(width=56, height=42, frames=30, supersample=1, seed=3), turns=0.5)
    session, _ = oracle_session(scene, DriftConfig(scale_per_m=0.0, yaw_deg_per_m=0.0, unit=UNIT))
    mapper = Mapper(MapperConfig(scale=ScaleConfig(source=source, min_samples=3)))
    rng = np.random.default_rng(5)
    odom = [scene.poses[0].copy()]
    for i in range(1, len(scene.poses)):  # wheel odometry: every step's length off by 1 % noise
        step = scene.poses[i, :3, 3] - scene.poses[i - 1, :3, 3]
        pose = scene.poses[i].copy()
        pose[:3, 3] = odom[-1][:3, 3] + step * (1.0 + rng.normal(scale=0.01))
        odom.append(pose)
    positions, truth = [], []
    for i, image in enumerate(scene.images):
        for result in session.push(image, meta=i):
            k = result.meta
            robot = RobotSample(mode="map_to_odom", base_cam=np.eye(4), odom_base=odom[k])
            depth = scene.depths[k] * (1.0 + rng.normal(scale=0.01, size=scene.depths[k].shape))
            frame = locate_and_integrate(mapper, result, float(k), robot, depth.astype(np.float32))
            if frame.scale.converged:
                positions.append(frame.camera_pose[:3, 3])
                truth.append(scene.poses[k, :3, 3])
    assert len(positions) > 10
    measured, true = _length(np.array(positions)), _length(np.array(truth))
    assert abs(measured / true - 1.0) <= tolerance, (source, measured, true)
    assert abs(mapper.scale.value * UNIT - 1.0) <= tolerance
