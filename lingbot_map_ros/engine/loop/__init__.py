"""Loop closure (issue 23): keyframe map, place recognition from the model's tokens, two-frame verification,
a Sim(3) pose graph in gtsam, and the closer that ties them together off the pose path (docs/loop_closure.md).
"""

from .closer import LoopCloser, LoopEvent, LoopStats
from .config import LoopClosureConfig
from .descriptor import DescriptorIndex, ModelDescriptor
from .keyframes import Keyframe, KeyframeMap, KeyframeVoxels
from .pose_graph import Edge, EdgeSigma, GraphConfig, PoseGraph
from .verify import PairVerifier, Verification, VerifyConfig
from .worker import LoopClosureWorker

__all__ = [
    "DescriptorIndex",
    "Edge",
    "EdgeSigma",
    "GraphConfig",
    "Keyframe",
    "KeyframeMap",
    "KeyframeVoxels",
    "LoopCloser",
    "LoopClosureConfig",
    "LoopClosureWorker",
    "LoopEvent",
    "LoopStats",
    "ModelDescriptor",
    "PairVerifier",
    "PoseGraph",
    "Verification",
    "VerifyConfig",
]
