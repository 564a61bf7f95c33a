"""Transformer building blocks shared by the backbone, the aggregator and the camera head."""

from lingbot_map_ros.model.layers.attention import AttendFn, Attention, RotateFn
from lingbot_map_ros.model.layers.block import Block
from lingbot_map_ros.model.layers.layer_scale import LayerScale
from lingbot_map_ros.model.layers.mlp import Mlp
from lingbot_map_ros.model.layers.rope2d import RotaryEmbedding2D
from lingbot_map_ros.model.layers.rope3d import VideoRotaryEmbedding3D

__all__ = [
    "AttendFn",
    "Attention",
    "Block",
    "LayerScale",
    "Mlp",
    "RotateFn",
    "RotaryEmbedding2D",
    "VideoRotaryEmbedding3D",
]
