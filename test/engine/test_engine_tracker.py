"""`CameraTracker` (engine/tracker.py) on plain data, no ROS: one call per frame gives the pose side; the
robot's TF comes in through a `RobotTfSource`. The `auto` decision and the switches as the robot comes up
(extrinsics late: map_to_camera -> map_to_base / map_to_odom; odometry late: map_to_base -> map_to_odom, also
when it starts after the queued frame's stamp) without a jump in `map` and without a reset, the `map -> odom`
estimate (first of a stream, loop-closure jump, restore), the shared robot map of a later camera, and a
missing transform naming the mode that needed it."""

from __future__ import annotations

import numpy as np
import pytest
from robot_scene import BASE_CAM, StandInSession, make_scene, random_sim3

from lingbot_map_ros.engine.geometry import rigid
from lingbot_map_ros.engine.mapping.mapper import MapperConfig
from lingbot_map_ros.engine.mapping.scale import ScaleConfig
from lingbot_map_ros.engine.robot_tf import FrameTooOld, RobotTfConfig, TransformUnavailable
from lingbot_map_ros.engine.tracker import CameraTracker

ODOM_ORIGIN = rigid(np.eye(3), [5.0, -2.0, 0.0])  # odometry's own origin, away from map's


class RobotTf:
    """The robot's TF as a table: static extrinsics base_link -> cam once `now` reaches `extrinsics_from`
    (robot_state_publisher started late), odometry odom -> base_link per image stamp from `odometry_from` (s)
    on, known up to `now` (exact stamps only; 0 = the latest)."""

    def __init__(self, base: np.ndarray, odometry_from: float, extrinsics_from: float = 0.0) -> None:
        self.odom = {1000.0 + j: ODOM_ORIGIN @ b for j, b in enumerate(base) if 1000.0 + j >= odometry_from}
        self.extrinsics_from = extrinsics_from
        self.now = 0.0

    def lookup(self, target: str, source: str, stamp_s: float, timeout_s: float) -> np.ndarray:
        if (target, source) == ("base_link", "cam") and self.now >= self.extrinsics_from:
            return BASE_CAM
        if (target, source) == ("odom", "base_link"):
            known = {t: pose for t, pose in self.odom.items() if t <= self.now}
            if stamp_s == 0.0 and known:
                return known[max(known)]
            if stamp_s in known:
                return known[stamp_s]
        raise TransformUnavailable(f"no {target} -> {source} at {stamp_s}", f"{target} -> {source}")


def _track(tracker: CameraTracker, frames: int = 12, scale_frames: int = 4, lag_s: float = 0.0) -> list:
    """Track every frame; `lag_s`: the robot's TF runs this far ahead of the frame processed (a queue);
    a frame dropped for a missing transform is None."""
    scene = make_scene(frames, 48, 32)
    session = StandInSession(scene, random_sim3(3, 0.37), scale_frames=scale_frames)
    out = []
    for i in range(frames):
        tracker.robot.lookup.now = 1000.0 + i + lag_s  # the robot's TF up to the newest image (+ the lag)
        for result in session.push_index(i):
            try:
                out.append(tracker.track(result, "cam", 1000.0 + result.index))
            except TransformUnavailable:
                out.append(None)
    return out


def _tracker(
    odometry_from: float, mode: str = "auto", extrinsics_from: float = 0.0, **kwargs: object
) -> CameraTracker:
    config = MapperConfig(scale=ScaleConfig(source="fixed", factor=1.0 / 0.37))
    base = make_scene(12, 48, 32).base
    return CameraTracker(config, RobotTfConfig(mode), RobotTf(base, odometry_from, extrinsics_from), **kwargs)


def test_odometry_appearing_switches_to_map_to_odom_without_a_jump() -> None:
    notices: list[tuple[str, str]] = []
    tracker = _tracker(1006.0, on_notice=lambda level, text, throttle: notices.append((level, text)))
    plain = _track(_tracker(1e9))  # odometry never appears: map_to_base throughout
    switched = _track(tracker)
    assert [t.frame.mode for t in switched] == ["map_to_base"] * 6 + ["map_to_odom"] * 6
    assert tracker.switches == 1 and "switched from map_to_base" in tracker.mode_reason
    assert any(level == "warning" and "map_to_base -> map_to_odom" in text for level, text in notices)
    for a, b in zip(plain, switched, strict=True):
        np.testing.assert_allclose(b.frame.body_pose, a.frame.body_pose, atol=1e-9)  # map did not move
    assert [t.first_map_odom for t in switched] == [False] * 6 + [True] + [False] * 5
    np.testing.assert_allclose(tracker.estimate(), switched[-1].frame.map_odom)


def test_the_estimate_jumps_with_a_correction_and_restores_as_a_first() -> None:
    tracker = _tracker(0.0)  # odometry from the start: auto picks map_to_odom
    tracked = _track(tracker)
    assert tracked[0].frame.mode == "map_to_odom" and tracked[0].first_map_odom
    before = tracker.estimate()
    jump = rigid(np.eye(3), [0.0, 1.0, 0.0])
    tracker.jump(lambda map_odom: jump @ map_odom)
    np.testing.assert_allclose(tracker.estimate(), jump @ before)
    tracker.restore_estimate(before)
    np.testing.assert_allclose(tracker.estimate(), before)
    tracker.clear()  # a reset: no estimate, a new stream (first map -> odom again)
    assert tracker.estimate() is None and _track(tracker)[0].first_map_odom


def test_a_later_camera_starts_in_the_driving_cameras_map() -> None:
    alone = _track(_tracker(0.0))[0].frame.map_odom  # its own map: its base at its first frame
    shared = rigid(np.eye(3), [1.0, 2.0, 0.0]) @ alone  # the driving camera's T_map_odom
    later = _track(_tracker(0.0, robot_map=lambda: shared))
    for tracked in later:  # the whole stream in the driving camera's map frame
        np.testing.assert_allclose(tracked.frame.map_odom, shared, atol=1e-9)


def test_a_missing_transform_names_the_mode_that_needed_it() -> None:
    tracker = _tracker(1e9, mode="map_to_odom")
    session = StandInSession(make_scene(4, 48, 32), random_sim3(3, 0.37), scale_frames=4)
    results = [r for i in range(4) for r in session.push_index(i)]
    with pytest.raises(TransformUnavailable) as err:
        tracker.track(results[0], "cam", 1000.0)
    assert err.value.mode == "map_to_odom" and err.value.edge == "odom -> base_link"


def test_a_frame_too_old_stays_too_old_with_its_mode() -> None:
    tracker = _tracker(1e9, mode="map_to_base")

    def pruned(target: str, source: str, stamp_s: float, timeout_s: float) -> np.ndarray:
        raise FrameTooOld("older than the TF history", f"{target} -> {source}")

    tracker.robot.lookup.lookup = pruned
    session = StandInSession(make_scene(4, 48, 32), random_sim3(3, 0.37), scale_frames=4)
    results = [r for i in range(4) for r in session.push_index(i)]
    with pytest.raises(FrameTooOld) as err:
        tracker.track(results[0], "cam", 1000.0)
    assert err.value.mode == "map_to_base" and err.value.edge == "base_link -> cam"


def test_extrinsics_appearing_late_switch_map_to_camera_to_map_to_base_without_a_jump() -> None:
    notices: list[tuple[str, str]] = []
    bare = _track(_tracker(1e9, extrinsics_from=1e9))  # no robot ever: map_to_camera throughout
    tracker = _tracker(1e9, extrinsics_from=1005.0, on_notice=lambda lv, text, th: notices.append((lv, text)))
    late = _track(tracker)
    assert [t.frame.mode for t in late] == ["map_to_camera"] * 5 + ["map_to_base"] * 7
    assert "no base_link -> cam in TF" in notices[0][1] and "without a reset" in notices[0][1]
    for a, b in zip(bare, late, strict=True):
        np.testing.assert_allclose(b.frame.camera_pose, a.frame.camera_pose, atol=1e-9)  # map did not move
    for t in late[5:]:
        np.testing.assert_allclose(t.frame.body_pose @ BASE_CAM, t.frame.camera_pose, atol=1e-9)
    assert tracker.switches == 1 and tracker.gap == ""
    assert any(
        lv == "warning" and "map_to_camera -> map_to_base" in text and "no reset" in text
        for lv, text in notices
    )
    for t in late[:5]:  # the inverted edge `cam -> map` (map below the camera): T_cam_map
        assert t.root == "cam"
        np.testing.assert_allclose(t.root_map @ t.frame.camera_pose, np.eye(4), atol=1e-9)
    assert all(t.root_map is None for t in late[5:])  # map -> base_link from the switch on


def test_the_switch_from_map_to_camera_waits_for_a_stamp_after_the_inverted_edge() -> None:
    """The mount appears while a frame stamped before the newest `cam -> map` is processed (stamps went
    back): that frame stays in map_to_camera (its edge at an older stamp), so no stamp ever has both the
    inverted edge and `map -> base_link` (a loop at that time); the next newer frame switches."""
    tracker = _tracker(1e9, extrinsics_from=1e9)
    session = StandInSession(make_scene(6, 48, 32), random_sim3(3, 0.37), scale_frames=4)
    results = [r for i in range(6) for r in session.push_index(i)]
    tracker.robot.lookup.now = 2000.0
    stamps = [1000.0, 1001.0, 1002.0, 1003.0, 1002.5, 1004.0]  # the fifth went back
    modes = []
    for k, (result, stamp_s) in enumerate(zip(results, stamps, strict=True)):
        if k == 4:
            tracker.robot.lookup.extrinsics_from = 0.0  # robot_state_publisher is up
        tracked = tracker.track(result, "cam", stamp_s)
        modes.append((tracked.frame.mode, tracked.root_map is not None))
    assert modes == [("map_to_camera", True)] * 5 + [("map_to_base", False)]


def test_extrinsics_appearing_with_odometry_there_go_straight_to_map_to_odom() -> None:
    tracker = _tracker(0.0, extrinsics_from=1005.0)
    late = _track(tracker)
    assert [t.frame.mode for t in late] == ["map_to_camera"] * 5 + ["map_to_odom"] * 7
    assert late[5].first_map_odom and tracker.estimate() is not None
    scene = make_scene(12, 48, 32)
    for j, t in enumerate(late[5:], start=5):
        np.testing.assert_allclose(
            t.frame.map_odom @ ODOM_ORIGIN @ scene.base[j], t.frame.body_pose, atol=1e-9
        )


def test_odometry_starting_after_the_queued_frames_switches_at_once_with_its_newest_sample() -> None:
    """The robot's TF runs 2 s ahead of the frame processed; odometry starts at 1008 s: the first frame
    processed after it (stamp 1006) switches with the newest odometry, so `map -> odom` is there at once;
    a queued frame without odometry at its stamp is dropped, the estimate stays; exact from 1008 on."""
    tracker = _tracker(1008.0)
    tracked = _track(tracker, lag_s=2.0)
    modes = [t.frame.mode if t else None for t in tracked]
    assert modes == ["map_to_base"] * 6 + ["map_to_odom", None] + ["map_to_odom"] * 4
    assert tracked[6].first_map_odom and tracker.switches == 1 and tracker.estimate() is not None
    scene = make_scene(12, 48, 32)
    for j, t in enumerate(tracked[8:], start=8):
        np.testing.assert_allclose(
            t.frame.map_odom @ ODOM_ORIGIN @ scene.base[j], t.frame.body_pose, atol=1e-9
        )
