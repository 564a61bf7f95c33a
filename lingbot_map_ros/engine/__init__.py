"""lingbot_map_ros.engine: streaming session, pre-processing, decoding, map accumulation, file writers.

No rclpy here (see docs/architecture.md, docs/engine.md). Public API:
``StreamingSession``, ``SessionConfig``, ``FrameResult`` (session / result), ``VoxelMap``, ``VoxelMapConfig``,
``Trajectory``, ``write_ply``, ``write_tum`` (mapping).
"""

from .config import SessionConfig
from .mapping.voxel_map import Trajectory, VoxelMap, VoxelMapConfig, write_ply, write_tum
from .result import FrameResult
from .stream.session import StreamingSession

__all__ = [
    "FrameResult",
    "SessionConfig",
    "StreamingSession",
    "Trajectory",
    "VoxelMap",
    "VoxelMapConfig",
    "write_ply",
    "write_tum",
]
