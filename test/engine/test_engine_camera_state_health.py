"""Tracking health through the camera's engine owner (engine/camera_state.py `CameraState` with `health`):
a covered camera is lost at once, its odometry covariance inflated, nothing of it reaches the map or the loop
closer, and when it sees a mapped place again it relocalises through the one correction rule; in `map_to_odom`
a kidnapped robot (the wheels do not see the carry) is found by a jump of `map -> odom` alone."""

from __future__ import annotations

import numpy as np
import pytest

from lingbot_map_ros.engine.camera_state import CameraState
from lingbot_map_ros.engine.health import HealthConfig, TrackingState
from lingbot_map_ros.engine.loop import LoopCloser, LoopClosureConfig, PairVerifier
from lingbot_map_ros.engine.mapping.mapper import MapperConfig
from lingbot_map_ros.engine.mapping.scale import ScaleConfig
from lingbot_map_ros.engine.robot_tf import RobotTfConfig, TransformUnavailable
from lingbot_map_ros.tools.bags.synthetic_scene import SceneConfig
from lingbot_map_ros.tools.loop.loop_oracle import DriftConfig, LoopScene, image_descriptor
from lingbot_map_ros.tools.loop.reloc_oracle import kidnap_session


@pytest.mark.parametrize("threaded", [False, True], ids=["inline", "closer-thread"])
def test_a_covered_camera_adds_no_points_inflates_its_covariance_and_relocalises(threaded: bool) -> None:
    """Inline (tools/) and with the search on the loop closer's thread (the node), waited for per frame."""
    scene = LoopScene.render(SceneConfig(112, 84, 50, seed=9, supersample=1), 1.25)
    session, oracle = kidnap_session(scene, DriftConfig(), frames=80)
    state = CameraState(MapperConfig(scale=ScaleConfig("none")), health=HealthConfig())
    closer = LoopCloser(LoopClosureConfig(min_similarity=0.5), 112, image_descriptor, PairVerifier(oracle))
    state.attach_loop(closer, threaded=threaded)
    black = np.zeros_like(oracle.images[0])

    def push(image: np.ndarray, i: int) -> list[tuple[TrackingState, float, int]]:
        seen = []
        for result in session.push(image, meta=i):
            tracked = state.track(result, "", float(i))
            state.map_side.integrate(tracked.work)
            state.posed(result, tracked, float(i))
            state.join_loop(30.0)  # threaded: the closer's side of this frame is done (at once inline)
            assert tracked.health is not None
            seen.append(
                (tracked.health.report.state, float(tracked.frame.pose_covariance[0, 0]), len(closer.map))
            )
        return seen

    mapped = [s for i in range(40) for s in push(oracle.images[i], i)]
    assert all(state_ is TrackingState.TRACKING for state_, _, _ in mapped[-10:]), mapped
    tracking_cov = mapped[-1][1]
    points, keyframes = state.map_side.size(), len(closer.map)
    assert points > 0 and keyframes > 1

    covered = [s for i in range(40, 48) for s in push(black, i)]
    assert covered[0][0] is not TrackingState.TRACKING and covered[-1][0] is TrackingState.LOST, covered
    assert covered[-1][1] >= 100.0 * tracking_cov
    assert state.tracking_report().state is TrackingState.LOST
    assert state.map_side.size() == points and len(closer.map) == keyframes  # nothing while lost

    corrections = len(state.corrections)
    found = [s for i in range(12, 24) for s in push(oracle.images[i], 48 + i)]  # carried back to frame 12
    states = [s for s, _, _ in found]
    assert TrackingState.LOST in states and states[-1] is TrackingState.TRACKING, states
    assert state.lost_and_found is not None and state.lost_and_found.relocaliser.stats.relocalised == 1
    assert found[-1][1] == tracking_cov  # the covariance is back at once
    assert len(state.corrections) > corrections  # the relocalisation went through apply_correction
    assert len(closer.map) > keyframes  # mapping again: the relocalised frame ties into the keyframe map


class _Wheels:
    """A robot's TF as plain data: `base_link -> camera` identity, `odom -> base_link` from `odom_base`
    (stamp -> [4, 4])."""

    def __init__(self) -> None:
        self.odom_base: dict[float, np.ndarray] = {}

    def lookup(self, target: str, source: str, stamp_s: float, timeout_s: float) -> np.ndarray:
        if (target, source) == ("base_link", "camera"):
            return np.eye(4)
        if (target, source) == ("odom", "base_link") and stamp_s in self.odom_base:
            return self.odom_base[stamp_s]
        raise TransformUnavailable(f"no {target} -> {source} at {stamp_s}", f"{target} -> {source}")


def test_a_kidnapped_robot_is_found_by_a_jump_of_map_to_odom() -> None:
    """`map_to_odom`: the wheels do not see the robot carried from frame 39 back to frame 12's place, so the
    relocalisation is a jump of `map -> odom` alone: afterwards the base is at that place in the map (the
    truth: map = odom at the first frame, and the lap's loops undid the drift)."""
    scene = LoopScene.render(SceneConfig(112, 84, 50, seed=9, supersample=1), 1.25)
    session, oracle = kidnap_session(scene, DriftConfig(), frames=80)
    wheels = _Wheels()
    state = CameraState(
        MapperConfig(scale=ScaleConfig("none")),
        RobotTfConfig(mode="map_to_odom"),
        wheels,
        health=HealthConfig(),
    )
    closer = LoopCloser(LoopClosureConfig(min_similarity=0.5), 112, image_descriptor, PairVerifier(oracle))
    state.attach_loop(closer, threaded=False)
    start = np.linalg.inv(scene.poses[0])
    found: list[tuple[int, np.ndarray, TrackingState]] = []  # (scene frame, T_map_base, state) per frame

    def push(image: np.ndarray, i: int, odom_base: np.ndarray, frame: int | None) -> None:
        wheels.odom_base[float(i)] = odom_base
        for result in session.push(image, meta=i):
            stamp = float(result.meta)
            tracked = state.track(result, "camera", stamp)
            state.map_side.integrate(tracked.work)
            state.posed(result, tracked, stamp)
            assert tracked.health is not None
            if frame is not None and stamp == i:
                found.append((frame, tracked.frame.body_pose, tracked.health.report.state))

    for i in range(40):
        push(oracle.images[i], i, start @ scene.poses[i], i)
    before = state.tracker.estimate()
    carried = start @ scene.poses[39]  # the wheels' pose from the kidnap on: standing at frame 39's place
    for i in range(40, 48):
        push(np.zeros_like(oracle.images[0]), i, carried, None)
    assert state.tracking_report().state is TrackingState.LOST
    found.clear()
    for j in range(12, 24):  # carried back to frame 12; the wheels measure the steps from there
        push(oracle.images[j], 48 + j, carried @ np.linalg.inv(scene.poses[12]) @ scene.poses[j], j)
    states = [s for _, _, s in found]
    assert TrackingState.LOST in states and states[-1] is TrackingState.TRACKING, states
    after = state.tracker.estimate()
    assert before is not None and after is not None
    assert np.linalg.norm(after[:3, 3] - before[:3, 3]) > 1.0, (before, after)  # map -> odom jumped
    frame, base, _ = found[-1]
    truth = (start @ scene.poses[frame])[:3, 3]  # map = odom at the first frame; the loops undid the drift
    assert np.linalg.norm(base[:3, 3] - truth) < 0.3, (base, truth)  # measured 0.09 m; the carry was 3.2 m
