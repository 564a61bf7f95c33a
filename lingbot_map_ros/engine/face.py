"""The engine's face: every engine name the node (ros/) and the tools (tools/) use, by role, from here only.

ros/ and tools/ import nothing else of engine/ (test/tools/test_tools_layering_face.py); what only the offline
tools need (evaluation, oracles, reading result files back, `run`'s flags) is engine/offline.py. A name no
caller uses leaves the face (the same test). The face adds no code: it re-exports, so the engine's modules
keep their names and `__all__` below is the one list, by role, that a reader of ros/ or tools/ has to know.
docs/architecture.md "The engine's face" says what each role is for.
"""

from __future__ import annotations

from . import persistence
from .builder import CheckpointError, EngineSpec, PrecisionPolicy, build_engine, compile_cache_dir
from .camera_pipeline import CameraPipeline, PosedResult
from .camera_state import CameraState, loop_closer
from .config import PATCH_SIZE, PRESET_NAMES, SessionConfig, check_image_width
from .contracts import SessionStats
from .correction import LoopCorrection
from .geometry import interpolate_pose, invert_rigid, matrix_to_quat_xyzw, pose_from_quat, quat_xyzw_to_matrix
from .gpu_gaps import GpuGaps
from .health import HealthConfig, HealthReport, TrackingState
from .lane_worker import LaneWorker, WorkerStopped
from .lanes import Lane, WorkerStats
from .lock_order import OrderedLock
from .loop import LoopCloser
from .loop.config import LoopClosureConfig
from .loop.gtsam_import import gtsam_missing
from .loop.pair_launch import warm_up_pair_pass
from .loop.persist import STATE_KEY as LOOP_STATE_KEY
from .loop.persist import check_loop
from .loop.pose_graph import GraphConfig
from .mapping.frames import TfMode
from .mapping.fusion import fuse_grids, fuse_points
from .mapping.grid import Grid, GridConfig, write_nav2_map
from .mapping.map_side import MapSide
from .mapping.mapper import FrameCloud, MapWork
from .mapping.mapper_config import CovarianceConfig, MapperConfig
from .mapping.scale import ScaleConfig
from .mapping.tf_graph import TfGraph
from .mapping.tf_tree import TfEdgeGuard
from .mapping.trajectory import Trajectory
from .mapping.voxel_map import VoxelMapConfig
from .mapping.writers import write_ply, write_tum
from .npz_input import bounded_names
from .persistence.check import check_loadable
from .persistence.store import (
    SessionError,
    SessionLimits,
    SessionSnapshot,
    clean_stale_temporaries,
    load_session,
    resolve_under,
    save_session,
)
from .result import FrameResult
from .robot_tf import FrameTooOld, RobotTfConfig, TransformUnavailable
from .settings import Owned, owned
from .stream.multi_stream import BatchConfig, MultiStreamSession
from .stream.preprocess import preprocess_geometry
from .stream.session import StreamingModel, StreamingSession
from .tracker import CameraTracker, TrackedFrame

__all__ = [
    # building: a model and its set of cameras (`build_engine`, the one constructor)
    "CheckpointError",
    "EngineSpec",
    "MultiStreamSession",
    "PrecisionPolicy",
    "StreamingModel",
    "StreamingSession",
    "build_engine",
    "compile_cache_dir",
    # one camera: its engine owner, its round through the pipeline, what a round hands back to ros/
    "CameraPipeline",
    "CameraState",
    "CameraTracker",
    "FrameCloud",
    "FrameResult",
    "HealthReport",
    "LoopCloser",
    "LoopCorrection",
    "MapSide",
    "MapWork",
    "PosedResult",
    "SessionStats",
    "TrackedFrame",
    "TrackingState",
    "Trajectory",
    "Grid",
    "gtsam_missing",
    "loop_closer",
    "warm_up_pair_pass",
    # settings: dataclasses whose fields own default, range and description (node parameters, run flags)
    "BatchConfig",
    "CovarianceConfig",
    "GraphConfig",
    "GridConfig",
    "HealthConfig",
    "LoopClosureConfig",
    "MapperConfig",
    "Owned",
    "PATCH_SIZE",
    "PRESET_NAMES",
    "RobotTfConfig",
    "ScaleConfig",
    "SessionConfig",
    "TfMode",
    "VoxelMapConfig",
    "check_image_width",
    "owned",
    # frames and the robot's TF in, as plain data
    "FrameTooOld",
    "TfEdgeGuard",
    "TfGraph",
    "TransformUnavailable",
    "preprocess_geometry",
    # geometry a message needs (quaternions, rigid inverses, interpolation; no Sim(3): engine/correction.py)
    "interpolate_pose",
    "invert_rigid",
    "matrix_to_quat_xyzw",
    "pose_from_quat",
    "quat_xyzw_to_matrix",
    # threads, queues and locks the node runs the engine's work on
    "GpuGaps",
    "Lane",
    "LaneWorker",
    "OrderedLock",
    "WorkerStats",
    "WorkerStopped",
    # files and sessions: writers, a session folder to and from a stream (`persistence`: its own small face)
    "LOOP_STATE_KEY",
    "SessionError",
    "SessionLimits",
    "SessionSnapshot",
    "bounded_names",
    "check_loadable",
    "check_loop",
    "clean_stale_temporaries",
    "fuse_grids",
    "fuse_points",
    "load_session",
    "persistence",
    "resolve_under",
    "save_session",
    "write_nav2_map",
    "write_ply",
    "write_tum",
]
