"""Tracking health (engine/health.py): each signal, the hysteresis, the covariance factor and the map gate."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from lingbot_map_ros.engine.geometry import rigid
from lingbot_map_ros.engine.health import HealthConfig, TrackingHealth, TrackingState
from lingbot_map_ros.engine.result import PHASE_STREAMING, FrameResult

H, W = 48, 64
RNG = np.random.default_rng(3)
TEXTURE = RNG.integers(30, 220, size=(H, W, 3), dtype=np.uint8)


def frame(
    index: int,
    x: float = 0.0,
    rgb: np.ndarray | None = None,
    conf: float = 3.0,
    depth: float = 2.0,
) -> FrameResult:
    """A frame at x (stream units) looking along z, textured unless `rgb` is given."""
    return FrameResult(
        index=index,
        meta=None,
        is_keyframe=True,
        phase=PHASE_STREAMING,
        pose_c2w=rigid(np.eye(3), np.array([x, 0.0, 0.0])),
        intrinsics=np.array([[50.0, 0, W / 2], [0, 50.0, H / 2], [0, 0, 1]]),
        depth=np.full((H, W), depth, np.float32),
        depth_conf=np.full((H, W), conf, np.float32),
        rgb=TEXTURE if rgb is None else rgb,
        pose_enc=np.zeros(9, np.float32),
    )


def walk(health: TrackingHealth, frames: list[FrameResult]) -> list[TrackingState]:
    return [health.observe(f).state for f in frames]


def test_one_bad_frame_is_degraded_a_run_is_lost_and_lost_is_sticky() -> None:
    health = TrackingHealth(HealthConfig(lost_after=3, recover_after=2))
    good = [frame(i, 0.01 * i) for i in range(5)]
    assert walk(health, good) == [TrackingState.TRACKING] * 5
    black = np.zeros((H, W, 3), np.uint8)
    report = health.observe(frame(5, 0.05, rgb=black))
    assert report.state is TrackingState.DEGRADED and "black image" in report.reasons
    assert report.inflation == HealthConfig().degraded_inflation and not report.maps
    assert walk(health, [frame(6, 0.06), frame(7, 0.07)]) == [TrackingState.DEGRADED, TrackingState.TRACKING]
    states = walk(health, [frame(8 + i, 0.08, rgb=black) for i in range(3)])
    assert states == [TrackingState.DEGRADED, TrackingState.DEGRADED, TrackingState.LOST]
    report = health.observe(frame(11, 0.09))  # good again, but a lost stream stays lost
    assert report.state is TrackingState.LOST and not report.maps
    assert report.inflation >= 100.0
    assert walk(health, [frame(12 + i, 0.1 + 0.01 * i) for i in range(20)]) == [TrackingState.LOST] * 20
    report = health.relocalised()
    assert report.state is TrackingState.RELOCALISED and report.maps and report.inflation == 1.0
    assert health.observe(frame(40, 0.4)).state is TrackingState.TRACKING


def test_each_signal_fires() -> None:
    saturated = np.full((H, W, 3), 255, np.uint8)
    covered = np.full((H, W, 3), 90, np.uint8)
    ramp = np.linspace(40, 200, W, dtype=np.float32)  # bright enough, contrast, but no detail: out of focus
    blurred = np.repeat(np.tile(ramp, (H, 1))[..., None], 3, axis=2).astype(np.uint8)
    cases = {
        "saturated image": dict(rgb=saturated),
        "covered image": dict(rgb=covered),
        "blurred image": dict(rgb=blurred),
        "low confidence": dict(conf=1.05),
        "jump": dict(x=5.0),
    }
    for reason, kwargs in cases.items():
        health = TrackingHealth()  # 8 good frames: past the motion warm-up (HealthConfig.motion_warmup)
        walk(health, [frame(i, 0.01 * i) for i in range(8)])
        report = health.observe(frame(8, **({"x": 0.08} | kwargs)))
        assert report.state is TrackingState.DEGRADED, (reason, report)
        assert any(r.startswith(reason) for r in report.reasons), (reason, report.reasons)


def test_confidence_drop_is_relative_to_the_tracking_mean() -> None:
    """A model whose confidence is high while tracking: half of it is bad although above the floor."""
    health = TrackingHealth()
    walk(health, [frame(i, 0.01 * i, conf=10.0) for i in range(10)])
    assert health.observe(frame(10, 0.1, conf=4.0)).state is TrackingState.DEGRADED
    assert health.observe(frame(11, 0.11, conf=9.0)).state is TrackingState.DEGRADED
    assert health.observe(frame(12, 0.12, conf=9.0)).state is TrackingState.TRACKING


def test_wheel_odometry_disagreement() -> None:
    health = TrackingHealth()
    assert health.observe(frame(0), odometry_step_m=0.05, stream_step_m=0.06).state is TrackingState.TRACKING
    report = health.observe(frame(1, 0.01), odometry_step_m=0.0, stream_step_m=0.5)
    assert report.state is TrackingState.DEGRADED and "disagrees with odometry" in report.reasons


def test_new_segment_only_in_mapping_mode() -> None:
    config = HealthConfig(new_segment_after=4)
    black = np.zeros((H, W, 3), np.uint8)
    for mapping, expected in ((True, TrackingState.TRACKING), (False, TrackingState.LOST)):
        health = TrackingHealth(config, mapping=mapping)
        walk(health, [frame(i, rgb=black) for i in range(3)])
        assert health.lost
        states = walk(health, [frame(3 + i, 0.01 * i) for i in range(4)])
        assert states[:3] == [TrackingState.LOST] * 3 and states[3] is expected, (mapping, states)


def turned(index: int, yaw_deg: float) -> FrameResult:
    """`frame(index)` turned by `yaw_deg` about the camera's vertical (the stream's heading, degrees)."""
    a = np.radians(yaw_deg)
    rotation = np.array([[np.cos(a), 0.0, np.sin(a)], [0.0, 1.0, 0.0], [-np.sin(a), 0.0, np.cos(a)]])
    return replace(frame(index), pose_c2w=rigid(rotation, np.zeros(3)))


def test_a_jump_is_measured_against_the_streams_own_motion() -> None:
    """A smooth stream (2 deg a frame) turning 50 deg at once jumps; a stream whose poses already turn 25-60
    deg a frame (synthetic weights) is not judged lost for its usual motion, only for a turn far beyond it."""
    smooth = TrackingHealth()
    walk(smooth, [turned(i, 2.0 * i) for i in range(10)])
    report = smooth.observe(turned(10, 18.0 + 50.0))
    assert report.state is TrackingState.DEGRADED and "jump (turn)" in report.reasons, report

    erratic = TrackingHealth()
    rng = np.random.default_rng(5)
    heading, states = 0.0, []
    for i in range(60):
        heading += float(rng.choice([-1.0, 1.0]) * rng.uniform(25.0, 60.0))
        states.append(erratic.observe(turned(i, heading)).state)
    assert TrackingState.LOST not in states and states.count(TrackingState.TRACKING) >= 55, states
    report = erratic.observe(turned(60, heading + 179.0))
    assert "jump (turn)" in report.reasons, report

    fresh = TrackingHealth()  # a stream's first steps (its anchor frames) have no motion to be judged against
    assert walk(fresh, [turned(0, 0.0), turned(1, 150.0), turned(2, 10.0)]) == [TrackingState.TRACKING] * 3


def test_a_verdict_of_an_ended_loss_is_stale() -> None:
    """The closer's side runs behind the pose path: a search verdict of a loss that a match ended, or of a
    stream before a reset, must not end a later loss (`TrackingHealth.current`, `LostAndFound.follow`)."""
    health = TrackingHealth()
    black = np.zeros((H, W, 3), np.uint8)
    verdicts = [health.assess(frame(i, rgb=black)) for i in range(3)]
    first = health.assess(frame(3))
    assert verdicts[-1].lost_started and first.search and health.current(first)
    health.relocalised()
    assert not health.current(first)  # found: the queued searches of that loss are skipped
    for i in range(4, 7):
        health.assess(frame(i, rgb=black))
    second = health.assess(frame(7))
    assert health.lost and health.current(second) and not health.current(first)
    health.reset(lost=True)  # a loaded session in localization mode: lost, a new loss
    assert health.lost and not health.current(second)
    assert health.current(health.assess(frame(8)))
