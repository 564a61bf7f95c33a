"""The TF mode choice and the per-frame lookups (engine/robot_tf.py, over the `RobotTfSource` protocol) on
the node's TF buffer, without DDS."""

from __future__ import annotations

import numpy as np
import pytest

from lingbot_map_ros.engine.geometry import rigid
from lingbot_map_ros.engine.robot_tf import RobotFrames, RobotTfConfig, TransformUnavailable
from lingbot_map_ros.ros.tf.buffer import TfBuffer


class BufferLookup:
    """`TfLookup`'s interface over a plain `TfBuffer` (no waiting)."""

    def __init__(self, buffer: TfBuffer) -> None:
        self.buffer = buffer

    def lookup(self, target: str, source: str, stamp_s: float, timeout_s: float) -> np.ndarray:
        return self.buffer.lookup(target, source, stamp_s)


def robot(odom: bool, extrinsics: bool) -> TfBuffer:
    buf = TfBuffer()
    if extrinsics:
        buf.set_transform("base_link", "cam", 0.0, rigid(np.eye(3), [0.1, 0, 1.0]), static=True)
    if odom:
        for t in (9.0, 11.0):
            buf.set_transform("odom", "base_link", t, rigid(np.eye(3), [t, 0, 0]), static=False)
    return buf


@pytest.mark.parametrize(
    ("odom", "extrinsics", "mode"),
    [
        (True, True, "map_to_odom"),
        (False, True, "map_to_base"),
        (True, False, "map_to_camera"),
        (False, False, "map_to_camera"),
    ],
)
def test_auto_picks_the_mode_whose_chain_is_in_tf(odom: bool, extrinsics: bool, mode: str) -> None:
    frames = RobotFrames(BufferLookup(robot(odom, extrinsics)), RobotTfConfig())
    chosen, why = frames.resolve_mode("cam", 10.0)
    assert chosen == mode and why
    sample = frames.sample(chosen, "cam", 10.0)
    assert sample.mode == mode
    assert (sample.base_cam is not None) == (mode != "map_to_camera")
    assert (sample.odom_base is not None) == (mode == "map_to_odom")
    if mode == "map_to_odom":
        np.testing.assert_allclose(sample.odom_base[:3, 3], [10.0, 0, 0])  # interpolated at the stamp


def test_an_explicit_mode_with_a_missing_edge_raises_naming_it() -> None:
    frames = RobotFrames(BufferLookup(robot(odom=True, extrinsics=False)), RobotTfConfig(mode="map_to_odom"))
    assert frames.resolve_mode("cam", 10.0) == ("map_to_odom", "tf.mode")
    with pytest.raises(TransformUnavailable) as exc:
        frames.sample("map_to_odom", "cam", 10.0)
    assert exc.value.edge == "base_link -> cam"
    with pytest.raises(TransformUnavailable) as exc:  # odometry not yet at this stamp: no extrapolation
        RobotFrames(BufferLookup(robot(True, True)), RobotTfConfig()).sample("map_to_odom", "cam", 12.0)
    assert exc.value.edge == "odom -> base_link"


def test_odometry_scale_needs_odometry_in_every_mode() -> None:
    frames = RobotFrames(BufferLookup(robot(True, True)), RobotTfConfig(odometry_scale=True))
    assert frames.sample("map_to_base", "cam", 10.0).odom_base is not None
    assert frames.sample("map_to_camera", "cam", 10.0).odom_base is not None
