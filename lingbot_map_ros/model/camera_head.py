"""Causal camera head (`camera_head.`): 4 refinement passes of an AdaLN-modulated trunk over camera tokens.

Input: token 0 of the last aggregator output, `[S, 2C]`. Runs in fp32. Each pass embeds the previous pose
estimate (`empty_pose_tokens` on pass 0), modulates the normalised camera tokens with (shift, scale, gate)
from `poseLN_modulation`, runs the `trunk` blocks (no q/k norm, no RoPE) attending over this pass's camera
history, and adds `pose_branch(trunk_norm(x))` to the estimate. Pose encoding (9): translation (3, linear),
quaternion xyzw (4, linear), fov_h, fov_w (ReLU).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from lingbot_map_ros.model.camera_history import CameraHistory, CameraStep
from lingbot_map_ros.model.layers import AttendFn, Block, Mlp

POSE_ENCODING_DIM = 9


def activate_pose(raw: torch.Tensor) -> torch.Tensor:
    """`[..., 9]` raw accumulated estimate -> pose encoding (translation and quaternion linear, FoV ReLU)."""
    return torch.cat((raw[..., :7], F.relu(raw[..., 7:])), dim=-1)


class CameraHead(nn.Module):
    """Args: dim (2C = 2048), num_heads (16), trunk_depth (4), mlp_ratio (4)."""

    def __init__(self, dim: int, num_heads: int, trunk_depth: int, mlp_ratio: float = 4.0) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        self.trunk = nn.ModuleList(
            Block(dim, num_heads, mlp_ratio, qk_norm=False, init_values=0.01) for _ in range(trunk_depth)
        )
        self.token_norm = nn.LayerNorm(dim)
        self.trunk_norm = nn.LayerNorm(dim)
        self.empty_pose_tokens = nn.Parameter(torch.zeros(1, 1, POSE_ENCODING_DIM))
        self.embed_pose = nn.Linear(POSE_ENCODING_DIM, dim)
        self.poseLN_modulation = nn.Sequential(nn.SiLU(), nn.Linear(dim, 3 * dim))
        self.adaln_norm = nn.LayerNorm(dim, elementwise_affine=False, eps=1e-6)
        self.pose_branch = Mlp(dim, dim // 2, POSE_ENCODING_DIM)

    def forward(
        self, camera_tokens: torch.Tensor, history: CameraHistory, keyframe: bool, num_iterations: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """camera_tokens `[S, 2C]` -> (pose_enc_list `[S, iters, 9]`, raw_list `[S, iters, 9]`), fp32.

        Appends the S tokens to `history` when `keyframe` (else attends and leaves it unchanged).
        """
        step = history.begin(camera_tokens.shape[0], keyframe)
        out = self.refine(camera_tokens, lambda p, b: _history_attend(history, step, p, b), num_iterations)
        history.end(step)
        return out

    def refine(
        self,
        camera_tokens: torch.Tensor,
        attend_for: Callable[[int, int], AttendFn],
        num_iterations: int,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The refinement passes with the history attention of (pass, block) given by `attend_for`.

        `forward` passes the history's prefix attention; the CUDA-graph path (model/graphed.py) a masked
        attention over the whole history buffer. Returns (pose_enc_list, raw_list) as `forward`.
        """
        tokens = self.token_norm(camera_tokens.float()).unsqueeze(0)
        frames = tokens.shape[1]
        estimate: torch.Tensor | None = None
        activated, raw = [], []
        for pass_index in range(num_iterations):
            if estimate is None:
                pose_input = self.empty_pose_tokens.expand(1, frames, -1)
            else:
                pose_input = estimate.detach()
            shift, scale, gate = self.poseLN_modulation(self.embed_pose(pose_input)).chunk(3, dim=-1)
            x = gate * (self.adaln_norm(tokens) * (1 + scale) + shift) + tokens
            for block_index, block in enumerate(self.trunk):
                x = block(x, attend=attend_for(pass_index, block_index))
            delta = self.pose_branch(self.trunk_norm(x))
            estimate = delta if estimate is None else estimate + delta
            raw.append(estimate[0])
            activated.append(activate_pose(estimate[0]))
        return torch.stack(activated, dim=1), torch.stack(raw, dim=1)


def _history_attend(history: CameraHistory, step: CameraStep, pass_index: int, block: int) -> AttendFn:
    def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return history.attend(step, pass_index, block, q, k, v)

    return attend
