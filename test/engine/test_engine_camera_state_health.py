"""Tracking health through the camera's engine owner (engine/camera_state.py `CameraState` with `health`):
a covered camera is lost at once, its odometry covariance inflated, nothing of it reaches the map or the loop
closer, and when it sees a mapped place again it relocalises through the one correction rule."""

from __future__ import annotations

import numpy as np
import pytest

from lingbot_map_ros.engine.camera_state import CameraState
from lingbot_map_ros.engine.health import HealthConfig, TrackingState
from lingbot_map_ros.engine.loop import LoopCloser, LoopClosureConfig, PairVerifier
from lingbot_map_ros.engine.mapping.mapper import MapperConfig
from lingbot_map_ros.engine.mapping.scale import ScaleConfig
from lingbot_map_ros.tools.loop_oracle import DriftConfig, LoopScene, image_descriptor
from lingbot_map_ros.tools.reloc_oracle import kidnap_session
from lingbot_map_ros.tools.synthetic_scene import SceneConfig


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
