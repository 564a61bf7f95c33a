"""lingbot_map_ros.engine: streaming session, pre-processing, decoding, map accumulation, file writers.

No rclpy here (see docs/architecture.md). Public API:
``StreamingSession``, ``SessionConfig``, ``FrameResult`` (session / result), ``VoxelMap``, ``VoxelMapConfig``,
``Trajectory``, ``write_ply``, ``write_tum`` (mapping).
"""

from .mapping import Trajectory, VoxelMap, VoxelMapConfig, write_ply, write_tum
from .result import FrameResult

__all__ = ["FrameResult", "Trajectory", "VoxelMap", "VoxelMapConfig", "write_ply", "write_tum"]
