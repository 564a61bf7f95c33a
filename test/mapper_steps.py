"""`locate_and_integrate`: one frame through a `Mapper`'s two sides at once, as `run` does (`locate`, then
`integrate` of its work right away), for tests that check a frame's poses and cloud together."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from lingbot_map_ros.engine.mapping.frame_records import RobotSample
from lingbot_map_ros.engine.mapping.mapper import Mapper
from lingbot_map_ros.engine.result import FrameResult


def locate_and_integrate(
    mapper: Mapper,
    result: FrameResult,
    stamp_s: float,
    robot: RobotSample | None = None,
    sensor_depth: np.ndarray | None = None,
) -> SimpleNamespace:
    """The frame's `PosedFrame` fields and its `FrameCloud` fields (points, colors, map_changed) in one."""
    frame, work = mapper.locate(result, stamp_s, robot, sensor_depth)
    return SimpleNamespace(**vars(frame), **vars(mapper.integrate(work)))
