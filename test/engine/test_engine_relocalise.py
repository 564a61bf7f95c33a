"""Relocalisation without a hint on the kidnapped drifting oracle (engine/loop/relocalise.py through
`reloc-eval`'s scenario, tools/loop/reloc_oracle.py): a kidnap, a cover, twin rooms, a pose hint."""

from __future__ import annotations

import numpy as np

from lingbot_map_ros.engine.health import TrackingHealth, TrackingState
from lingbot_map_ros.engine.loop import LoopCloser, LoopClosureConfig, PairVerifier
from lingbot_map_ros.engine.loop.persist import check_loop, export_loop
from lingbot_map_ros.engine.loop.relocalise import LostAndFound, RelocaliseConfig, Relocaliser
from lingbot_map_ros.tools.bags.synthetic_scene import SceneConfig
from lingbot_map_ros.tools.loop.loop_oracle import DriftConfig, LoopScene, image_descriptor
from lingbot_map_ros.tools.loop.reloc_eval import RelocEvalConfig, evaluate
from lingbot_map_ros.tools.loop.reloc_oracle import kidnap_session

#: Small scenes (a few seconds each on a quiet 2-core machine); the full-size numbers: `reloc-eval`
#: (docs/benchmarks.md).
SMALL = dict(kidnaps=2, frames_per_lap=32, segment=24, width=84, height=56)
#: Twin rooms need a longer lap: their distinct quarter must hold enough frames to relocalise in.
TWINS = {**SMALL, "frames_per_lap": 40, "segment": 40}


def assert_found(result: dict[str, object], kidnaps: int, ate_m: float = 0.1) -> None:
    assert result["kidnaps"] == kidnaps and result["detected"] == kidnaps, result
    assert all(0 <= f <= 3 for f in result["detect_frames"]), result
    assert result["relocalised"] == kidnaps, result
    assert all(0 <= s <= 2.0 for s in result["reloc_seconds"]), result
    assert result["false_relocalisations"] == 0 and result["points_added_while_lost"] == 0, result
    assert result["ate_after_reloc"] < ate_m, result


def test_kidnapped_camera_is_lost_at_once_adds_nothing_and_is_found_again() -> None:
    result, inflation = evaluate(RelocEvalConfig(seed=21, cover_frames=0, **SMALL))
    assert_found(result, 2)
    assert inflation >= 100.0


def test_covered_camera_carried_elsewhere() -> None:
    result, inflation = evaluate(RelocEvalConfig(seed=22, cover_frames=8, **SMALL))
    assert_found(result, 2)
    assert result["detect_frames"] == [0, 0], result  # a black image is seen at once
    assert inflation >= 100.0


def test_twin_rooms_never_relocalise_into_the_wrong_room() -> None:
    """Two identical rooms: only the quarter where they differ relocalises; the same scenario with a
    relocaliser that trusts its first verified candidate (top 1, no agreement) goes wrong."""
    result, _ = evaluate(RelocEvalConfig(seed=23, aliasing="twin-rooms", **TWINS))
    assert_found(result, 2, ate_m=1.0)  # no loop closure after the mapping with twin rooms: the stream drifts
    naive, _ = evaluate(
        RelocEvalConfig(
            seed=23, aliasing="twin-rooms", relocalise=RelocaliseConfig(top_k=1, agree=1), **TWINS
        )
    )
    assert naive["false_relocalisations"] >= 1, naive


def test_a_pose_hint_narrows_the_search_and_places_the_camera_when_nothing_verifies() -> None:
    """`/initialpose`: a hint far from where the camera is excludes the true match, so after `place_after`
    searched frames the camera is placed at the hint (localization mode: the map is never extended)."""
    scene = LoopScene.render(SceneConfig(112, 84, 50, seed=9, supersample=1), 1.25)
    session, oracle = kidnap_session(scene, DriftConfig(), frames=80)
    closer = LoopCloser(LoopClosureConfig(min_similarity=0.5), 112, image_descriptor, PairVerifier(oracle))
    for i in range(40):
        for result in session.push(oracle.images[i], meta=i):
            closer.add(result, float(i))
    keyframes = len(closer.map)
    guard = LostAndFound(TrackingHealth(mapping=False), Relocaliser(closer, RelocaliseConfig()))
    far = np.eye(4)
    far[:3, 3] = closer.map.keyframes[max(closer.map.keyframes)].pose.translation + np.array([50.0, 0, 0])
    states, placed = [], []
    for i in range(20, 35):  # kidnapped back to frame 20
        for result in session.push(oracle.images[i], meta=i):
            if i == 22:
                guard.place_hint(far, radius=1.0, place_after=3)
            states.append(guard.frame(result, float(i)).state)
            if guard.last is not None:
                placed.append(closer.corrected(result.pose_c2w))
    assert TrackingState.LOST in states and states[-1] is TrackingState.TRACKING, states
    assert guard.relocaliser.stats.placed == 1 and guard.relocaliser.stats.relocalised == 0
    assert len(placed) == 1 and np.allclose(placed[0].translation, far[:3, 3], atol=1e-6), placed
    assert len(closer.map) == keyframes  # localization mode: nothing added


def test_localization_mode_on_a_saved_map_starts_lost_is_found_and_never_extends_the_map() -> None:
    """A keyframe map saved and loaded (engine/loop/persist.py), a new stream in localization mode: lost from
    its first frame until a verified match, then the correction places it; the loaded map gains nothing."""
    scene = LoopScene.render(SceneConfig(112, 84, 50, seed=10, supersample=1), 1.25)
    session, oracle = kidnap_session(scene, DriftConfig(), frames=120)
    config = LoopClosureConfig(min_similarity=0.5)
    closer = LoopCloser(config, 112, image_descriptor, PairVerifier(oracle))
    for i in range(40):
        for result in session.push(oracle.images[i], meta=i):
            closer.add(result, float(i))
    arrays, state = export_loop(closer)
    loaded = LoopCloser(config, 112, image_descriptor, PairVerifier(oracle))
    loaded.restore(check_loop(arrays, state, config.depth_stride))
    keyframes, edges = set(loaded.map.keyframes), len(loaded.graph.edges)
    health = TrackingHealth(mapping=False)
    health.reset(lost=True)
    guard = LostAndFound(health, Relocaliser(loaded))
    session.reset()
    states, found = [], []
    for i in range(12, 32):  # a new stream starting somewhere in the mapped room
        for result in session.push(oracle.images[i], meta=i):
            states.append(guard.frame(result, float(i)).state)
            if guard.last is not None:
                found.append((i, loaded.corrected(result.pose_c2w), loaded.map.keyframes[guard.last.match]))
    assert states[0] is TrackingState.LOST and states[-1] is TrackingState.TRACKING, states
    assert len(found) == 1, states
    i, pose, match = found[0]
    # the frame is placed near its true neighbour in the map: the distance to the matched keyframe's pose in
    # map units agrees with the true distance in metres times the map's unit there
    true_m = np.linalg.norm(scene.poses[i][:3, 3] - scene.poses[match.key][:3, 3])
    placed = np.linalg.norm(pose.translation - match.pose.translation) / oracle.unit[match.key]
    assert abs(placed - true_m) < 0.05, (placed, true_m)
    assert set(loaded.map.keyframes) == keyframes and len(loaded.graph.edges) == edges
