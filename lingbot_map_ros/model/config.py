"""Model hyper-parameters: `ModelConfig` with the released preset ("lingbot-map") and a small one ("tiny")."""

from __future__ import annotations

from dataclasses import dataclass

import torch

#: Side in pixels of one ViT patch: network input sizes are multiples of it (the one definition).
PATCH_SIZE = 14


def check_image_width(value: object, name: str = "image_width") -> int:
    """``value`` when it is a network input width (a positive int multiple of :data:`PATCH_SIZE`), else
    ValueError naming ``name``: the one check of the patch multiple (`SessionConfig`, pre-processing, the
    node's `model.image_width`)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < PATCH_SIZE or value % PATCH_SIZE:
        raise ValueError(f"{name} must be a positive multiple of {PATCH_SIZE} (patch size), got {value!r}")
    return value


@dataclass(frozen=True)
class ModelConfig:
    """Architecture of `LingBotMap` (the released values are the defaults).

    The aggregator runs `depth` (frame block, global block) pairs of width `embed_dim`; each frame carries
    `num_special_tokens` = 1 camera + `num_register_tokens` + 1 scale token before its patches.
    `max_frame_num` is the reference's 3D-RoPE table length (1,024): this model has no table and runs past it,
    but the engine bounds the frames stored per anchor segment by it (docs/model.md).
    """

    img_size: int = 518
    patch_size: int = PATCH_SIZE
    embed_dim: int = 1024
    depth: int = 24
    num_heads: int = 16
    mlp_ratio: float = 4.0
    num_register_tokens: int = 4
    intermediate_layers: tuple[int, ...] = (4, 11, 17, 23)
    rope2d_base: float = 100.0
    rope3d_theta: float = 10000.0
    max_frame_num: int = 1024
    dino_depth: int = 24
    dino_num_heads: int = 16
    dino_num_register_tokens: int = 4
    camera_num_heads: int = 16
    camera_trunk_depth: int = 4
    camera_num_iterations: int = 4
    dpt_features: int = 256
    dpt_out_channels: tuple[int, int, int, int] = (256, 512, 1024, 1024)
    dpt_head_features: int = 32
    #: Frames per depth-head pass. The reference uses 8; 1 bounds the anchor step's activations (8 frames at
    #: full resolution in fp32 were +2.6 GiB at 518x378, the peak of the whole process) and runs every frame
    #: the way the streaming steps (S = 1) do (issue 13, docs/performance.md).
    dpt_frames_chunk: int = 1

    def __post_init__(self) -> None:
        if self.img_size % self.patch_size:
            raise ValueError(f"img_size {self.img_size} must be a multiple of patch_size {self.patch_size}")
        if self.embed_dim % self.num_heads or self.embed_dim % self.dino_num_heads:
            raise ValueError(f"embed_dim {self.embed_dim} must be a multiple of the head counts")
        if (2 * self.embed_dim) % self.camera_num_heads:
            raise ValueError(f"camera width {2 * self.embed_dim} must be a multiple of camera_num_heads")
        layers = self.intermediate_layers
        if len(layers) != 4 or not all(0 <= i < self.depth for i in layers):
            raise ValueError(f"intermediate_layers must be 4 block-pair indices < depth, got {layers}")

    @property
    def head_dim(self) -> int:
        """Head width of the aggregator blocks (64); the KV cache stores `[T, num_heads, head_dim]`."""
        return self.embed_dim // self.num_heads

    @property
    def num_special_tokens(self) -> int:
        """Tokens before the patches of every frame: camera, registers, scale (6)."""
        return self.num_register_tokens + 2

    @staticmethod
    def preset(name: str) -> ModelConfig:
        """`"lingbot-map"`: the released checkpoints (1,342 tensors, 1,157,943,540 parameters).
        `"tiny"`: the same architecture and state-dict names with ~4 M parameters, for CPU tests and demos."""
        if name not in PRESETS:
            raise ValueError(f"unknown model preset {name!r}; expected one of {sorted(PRESETS)}")
        return PRESETS[name]


PRESETS: dict[str, ModelConfig] = {
    "lingbot-map": ModelConfig(),
    "tiny": ModelConfig(
        embed_dim=128,
        depth=4,
        num_heads=2,
        intermediate_layers=(0, 1, 2, 3),
        dino_depth=2,
        dino_num_heads=2,
        camera_num_heads=2,
        camera_trunk_depth=2,
        dpt_features=32,
        dpt_out_channels=(32, 64, 128, 128),
        dpt_head_features=16,
    ),
}


@dataclass(frozen=True)
class PrecisionPolicy:
    """Compute dtypes: the aggregator (backbone + alternating blocks + global KV cache) and the heads.

    The reference runs the aggregator in bf16 (fp16 below compute capability 8) under autocast and both heads
    in fp32. `for_device` returns that on CUDA and fp32 everywhere on CPU.
    """

    aggregator_dtype: torch.dtype = torch.float32
    heads_dtype: torch.dtype = torch.float32

    @staticmethod
    def for_device(device: torch.device | str) -> PrecisionPolicy:
        device = torch.device(device)
        if device.type != "cuda":
            return PrecisionPolicy()
        major, _ = torch.cuda.get_device_capability(device)
        return PrecisionPolicy(aggregator_dtype=torch.bfloat16 if major >= 8 else torch.float16)
