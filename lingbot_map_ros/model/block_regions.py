"""The four block regions a graphed streaming step runs (model/graphed.py), plain or compiled.

A region is one kind of block call with the block as an input: a DINOv2 backbone block, a frame block, a
global block up to its attention's q, k, v (in the cache layout), and a global block after its attention.
Compiled through `torch.compile` (`block_regions(compiled=True)`), one compiled region serves all 24 layers of
its kind, fusing their element-wise work (norms, RoPE, casts); compiled once per process, on the first step.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch

from lingbot_map_ros.model.aggregator import to_cache_layout
from lingbot_map_ros.model.layers import Block
from lingbot_map_ros.model.layers.rope2d import Rotation2D
from lingbot_map_ros.model.layers.rope3d import Rotation3D


def block_regions(compiled: bool) -> tuple[Callable | None, Callable, Callable, Callable]:
    """(backbone block, frame block, global inputs, global finish): compiled, or plain (the backbone region
    None: `Aggregator.prepare` runs its blocks as they are)."""
    return _compiled_regions() if compiled else (None, frame_block, global_inputs, global_finish)


def backbone_block(block: Block, x: torch.Tensor) -> torch.Tensor:
    return block(x)


def frame_block(block: Block, x: torch.Tensor, rotation: Rotation2D) -> torch.Tensor:
    return block(x, rotate=rotation.rotate)


def global_inputs(
    block: Block, x: torch.Tensor, rotation: Rotation3D
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return to_cache_layout(*block.attention_inputs(x, rotate=rotation.rotate))


def global_finish(block: Block, x: torch.Tensor, attended: torch.Tensor) -> torch.Tensor:
    return block.finish(x, attended)


@functools.cache
def _compiled_regions() -> tuple[Callable, ...]:
    """The four block regions compiled once per process (blocks are inputs, so all layers share them)."""
    regions = (backbone_block, frame_block, global_inputs, global_finish)
    return tuple(torch.compile(fn, dynamic=False) for fn in regions)
