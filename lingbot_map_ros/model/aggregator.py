"""Aggregator: DINOv2 patch tokens + 6 special tokens per frame, then alternating frame / global blocks.

Frame blocks attend within each frame (2D RoPE); global blocks attend across frames through the paged KV cache
(`CacheStep.attend`, 3D video RoPE with the frame's temporal index). The outputs of the block pairs in
`config.intermediate_layers` are returned as concat(frame-block output, global-block output) on channels.
"""

from __future__ import annotations

from typing import Protocol

import torch
from torch import nn

from lingbot_map_ros.model.config import ModelConfig
from lingbot_map_ros.model.layers import AttendFn, Block, RotaryEmbedding2D, VideoRotaryEmbedding3D
from lingbot_map_ros.model.layers.rope2d import Rotation2D, patch_positions_2d
from lingbot_map_ros.model.layers.rope3d import Rotation3D, video_positions
from lingbot_map_ros.model.patch_embed import DinoVisionTransformer, RunBlock

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


class GlobalAttentionStep(Protocol):
    """What the aggregator needs from `cache.CacheStep`: q/k/v `[T, H, D]` -> `[T, H, D]` per global layer."""

    def attend(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor: ...


class Aggregator(nn.Module):
    """State-dict prefix `aggregator.`: `patch_embed`, `camera_token` [1,2,1,C], `register_token` [1,2,R,C],
    `scale_token` [1,2,1,C] (index 0 = "first" variant, 1 = "rest"), `frame_blocks.i`, `global_blocks.i`."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        c = config
        self.config = c
        self.patch_embed = DinoVisionTransformer(
            c.img_size,
            c.patch_size,
            c.embed_dim,
            c.dino_depth,
            c.dino_num_heads,
            c.mlp_ratio,
            c.dino_num_register_tokens,
        )
        self.camera_token = nn.Parameter(torch.zeros(1, 2, 1, c.embed_dim))
        self.register_token = nn.Parameter(torch.zeros(1, 2, c.num_register_tokens, c.embed_dim))
        self.scale_token = nn.Parameter(torch.zeros(1, 2, 1, c.embed_dim))
        self.frame_blocks = nn.ModuleList(
            Block(c.embed_dim, c.num_heads, c.mlp_ratio, qk_norm=True) for _ in range(c.depth)
        )
        self.global_blocks = nn.ModuleList(
            Block(c.embed_dim, c.num_heads, c.mlp_ratio, qk_norm=True) for _ in range(c.depth)
        )
        self.rope2d = RotaryEmbedding2D(c.head_dim, c.rope2d_base)
        self.rope3d = VideoRotaryEmbedding3D(c.head_dim, c.rope3d_theta)
        self._normalisation: dict[tuple[torch.device, torch.dtype], tuple[torch.Tensor, torch.Tensor]] = {}

    def backbone_tokens(self, images: torch.Tensor, run_block: RunBlock | None = None) -> torch.Tensor:
        """images `[S, 3, H, W]` RGB in [0, 1] -> normalised -> DINOv2 patch tokens `[S, (H/p)(W/p), C]`."""
        key = (images.device, images.dtype)
        if key not in self._normalisation:  # made once per device/dtype: no host copy per step (CUDA graphs)
            self._normalisation[key] = (
                images.new_tensor(IMAGENET_MEAN).view(1, 3, 1, 1),
                images.new_tensor(IMAGENET_STD).view(1, 3, 1, 1),
            )
        mean, std = self._normalisation[key]
        return self.patch_embed((images - mean) / std, run_block)

    def special_tokens(self, frame_indices: torch.Tensor, num_scale_frames: int) -> torch.Tensor:
        """The 6 special tokens of frames with global indices `frame_indices` `[S]` -> `[S, 6, C]`.

        Camera and register tokens use variant 0 for global frame 0 only; the scale token uses variant 0 for
        the first `num_scale_frames` frames (the anchors), variant 1 afterwards.
        """
        first = (frame_indices == 0).long()
        scale_first = (frame_indices < num_scale_frames).long()
        camera = self.camera_token[0, 1 - first]
        registers = self.register_token[0, 1 - first]
        scale = self.scale_token[0, 1 - scale_first]
        return torch.cat((camera, registers, scale), dim=1)

    def forward(
        self,
        images: torch.Tensor,
        step: GlobalAttentionStep,
        first_frame_index: int | torch.Tensor,
        num_scale_frames: int,
    ) -> tuple[list[torch.Tensor], torch.Tensor]:
        """Run S frames through the aggregator.

        Args:
            images: `[S, 3, H, W]` RGB in [0, 1], H and W multiples of the patch size.
            step: the KV-cache step planned for these S frames (`cache.begin_step(S, keyframe)`).
            first_frame_index: global / temporal index of the first frame (= frames stored in the cache),
                or an int64 tensor `[S]` of every frame's own index (S frames of S streams, `step_batch`).
            num_scale_frames: number of anchor frames (scale-token variant 0 below this index).

        Returns:
            4 tensors `[S, P, 2C]`, P = 6 + (H/p)(W/p), for the block pairs `config.intermediate_layers`, and
            the frames' place descriptors `[S, C]` float32 (`place_descriptor` of their patch tokens).
        """
        c = self.config
        frames = images.shape[0]
        if isinstance(first_frame_index, torch.Tensor):
            indices = first_frame_index.to(images.device)
        else:
            indices = torch.arange(frames, device=images.device) + first_frame_index
        x, rotation_2d, rotation_3d = self.prepare(images, indices, num_scale_frames)
        descriptor = place_descriptor(x[:, c.num_special_tokens :])

        outputs = []
        for layer in range(c.depth):
            x, output = self.block_pair(layer, x, rotation_2d, rotation_3d, _cache_attend(step, layer))
            if output is not None:
                outputs.append(output)
        return outputs, descriptor

    def block_pair(
        self, layer: int, x: torch.Tensor, rotation_2d: Rotation2D, rotation_3d: Rotation3D, attend: AttendFn
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Block pair `layer` on the tokens `[S, P, C]` of S frames (global attention through `attend`) ->
        (tokens `[S, P, C]`, the intermediate output `[S, P, 2C]` when `layer` is one of
        `config.intermediate_layers`, else None)."""
        frames, tokens_per_frame = x.shape[:2]
        x = self.frame_blocks[layer](x, rotate=rotation_2d.rotate)
        frame_out = x
        x = x.reshape(1, frames * tokens_per_frame, -1)
        x = self.global_blocks[layer](x, rotate=rotation_3d.rotate, attend=attend)
        x = x.reshape(frames, tokens_per_frame, -1)
        if layer not in self.config.intermediate_layers:
            return x, None
        return x, torch.cat((frame_out, x), dim=-1)

    def tokens_per_frame(self, image_hw: tuple[int, int]) -> int:
        """Tokens of one frame at `image_hw`: 6 specials + (H/p)(W/p) patches."""
        patch = self.config.patch_size
        return self.config.num_special_tokens + (image_hw[0] // patch) * (image_hw[1] // patch)

    def prepare(
        self,
        images: torch.Tensor,
        indices: torch.Tensor,
        num_scale_frames: int,
        run_block: RunBlock | None = None,
    ) -> tuple[torch.Tensor, Rotation2D, Rotation3D]:
        """Tokens and rotary tables of S frames, everything before the first block pair.

        images `[S, 3, H, W]` RGB in [0, 1]; indices `[S]` int64 global / temporal frame indices (a tensor, so
        a CUDA graph can replay this with new indices). Returns tokens `[S, P, C]` (specials first) and the
        2D (frame blocks) and 3D (global blocks) rotations. `run_block` as in `DinoVisionTransformer.forward`.
        """
        patches = self.backbone_tokens(images, run_block)
        return self.with_special_tokens(patches, images.shape[-2:], indices, num_scale_frames)

    def with_special_tokens(
        self,
        patches: torch.Tensor,
        image_hw: tuple[int, int] | torch.Size,
        indices: torch.Tensor,
        num_scale_frames: int,
    ) -> tuple[torch.Tensor, Rotation2D, Rotation3D]:
        """`prepare` after the backbone: DINOv2 patch tokens `[S, (H/p)(W/p), C]` of S frames of `image_hw`
        -> (tokens `[S, P, C]`, 2D rotation, 3D rotation) as `prepare` returns them."""
        c = self.config
        grid_h, grid_w = image_hw[0] // c.patch_size, image_hw[1] // c.patch_size
        special = self.special_tokens(indices, num_scale_frames).to(patches.dtype)
        x = torch.cat((special, patches), dim=1)
        rotation_2d = self.rope2d(patch_positions_2d(grid_h, grid_w, c.num_special_tokens, x.device), x.dtype)
        rotation_3d = self.rope3d(video_positions(indices, grid_h, grid_w, c.num_special_tokens))
        return x, rotation_2d, rotation_3d


def place_descriptor(patches: torch.Tensor) -> torch.Tensor:
    """The place descriptor of S frames from their DINOv2 patch tokens `[S, N, C]`: each token L2-normalised
    (float32), averaged over the N tokens, L2-normalised -> `[S, C]` float32 (the loop closer's,
    docs/loop_closure.md)."""
    pooled = torch.nn.functional.normalize(patches.float(), dim=-1).mean(dim=1)
    return torch.nn.functional.normalize(pooled, dim=-1)


def to_cache_layout(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Block layout `[1, H, T, D]` -> `CacheStep.attend` layout `[T, H, D]` (contiguous, all in v's dtype)."""
    dtype = v.dtype
    return (
        q[0].transpose(0, 1).to(dtype).contiguous(),
        k[0].transpose(0, 1).to(dtype).contiguous(),
        v[0].transpose(0, 1).contiguous(),
    )


def _cache_attend(step: GlobalAttentionStep, layer: int) -> AttendFn:
    """Adapt `CacheStep.attend` (`[T, H, D]`) to the block's `[1, H, T, D]` layout."""

    def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        out = step.attend(layer, *to_cache_layout(q, k, v))
        return out.transpose(0, 1).unsqueeze(0)

    return attend
