"""lingbot_map_ros.model: the LingBot-Map network, its presets and checkpoint I/O (docs/model.md).

Contract (docs/architecture.md): `ModelConfig.preset("lingbot-map" | "tiny")`, `LingBotMap`,
`load_checkpoint(model, path)` / `CheckpointError`, `model.new_stream(StreamConfig(...)) -> StreamState`,
`model.step(images, state, keyframe) -> StepOutput`.
"""

from lingbot_map_ros.model.checkpoint import CheckpointError, build_model, load_checkpoint, read_state_dict
from lingbot_map_ros.model.config import ModelConfig, PrecisionPolicy
from lingbot_map_ros.model.lingbot_map import LingBotMap
from lingbot_map_ros.model.stream import StepOutput, StreamConfig, StreamState, StreamStats

__all__ = [
    "CheckpointError",
    "LingBotMap",
    "ModelConfig",
    "PrecisionPolicy",
    "StepOutput",
    "StreamConfig",
    "StreamState",
    "StreamStats",
    "build_model",
    "load_checkpoint",
    "read_state_dict",
]
