"""3D "video" rotary position embedding of the global blocks (Wan-style, interleaved complex pairs).

Per head of D dims (64 in the released model) the D/2 complex pairs (dims 2j, 2j+1) are split into a temporal,
a row and a column group of `t/h/w` dims = 20/22/22 for D = 64 (h = w = 2*ceil(D/6), t = D - 2h). Axis a with
d_a dims rotates its pairs by `pos_a * theta^(-2j/d_a)`, j = 0..d_a/2-1, theta = 10000.

Token positions (t, h, w): special token i of frame f is (f, i, i); the patch at grid cell (y, x) of frame f
is (f, num_special + y, num_special + x). f is the frame's temporal index (frames cached before it).

The reference looks angles up in a table of `max_frame_num` (1024) rows and crashes at f >= 1024. Here angles
are computed directly from the positions (float64, then float32), so any f works: past the table length the
model simply extrapolates RoPE beyond anything it was trained on (training used ~320 views), which is the
engine's reason to restart the stream before that (docs/model.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch


def video_rope_axis_dims(head_dim: int) -> tuple[int, int, int]:
    """(t, h, w) dims of the 3D RoPE split, e.g. (20, 22, 22) for head_dim 64; all even."""
    spatial = 2 * math.ceil(head_dim / 6)
    temporal = head_dim - 2 * spatial
    if head_dim % 2 or temporal <= 0 or temporal % 2:
        raise ValueError(f"3D RoPE cannot split head_dim {head_dim} into even t/h/w parts")
    return temporal, spatial, spatial


def video_positions(frame_indices: torch.Tensor, grid_h: int, grid_w: int, num_special: int) -> torch.Tensor:
    """(t, h, w) positions `[S * (num_special + grid_h*grid_w), 3]` int64 for frames `frame_indices` `[S]`.

    Frame-major, each frame's special tokens first, patches row-major.
    """
    device = frame_indices.device
    special = torch.arange(num_special, device=device)
    ys, xs = torch.meshgrid(
        torch.arange(grid_h, device=device), torch.arange(grid_w, device=device), indexing="ij"
    )
    rows = torch.cat([special, ys.reshape(-1) + num_special])
    cols = torch.cat([special, xs.reshape(-1) + num_special])
    tokens = rows.numel()
    t = frame_indices.to(torch.long)[:, None].expand(-1, tokens)
    return torch.stack([t, rows[None].expand_as(t), cols[None].expand_as(t)], dim=-1).reshape(-1, 3)


@dataclass(frozen=True)
class Rotation3D:
    """cos/sin `[N, D/2]` float32 per complex pair; `rotate(x)` for x `[B, H, N, D]` (any float dtype)."""

    cos: torch.Tensor
    sin: torch.Tensor

    def rotate(self, x: torch.Tensor) -> torch.Tensor:
        pairs = x.float().unflatten(-1, (-1, 2))
        real, imag = pairs[..., 0], pairs[..., 1]
        out = torch.stack((real * self.cos - imag * self.sin, real * self.sin + imag * self.cos), dim=-1)
        return out.flatten(-2).to(x.dtype)


class VideoRotaryEmbedding3D:
    """Builds `Rotation3D` tables for (t, h, w) positions (no parameters, nothing in the state dict)."""

    def __init__(self, head_dim: int, theta: float = 10000.0) -> None:
        self.head_dim = head_dim
        self.theta = theta
        self.axis_dims = video_rope_axis_dims(head_dim)

    def __call__(self, positions: torch.Tensor) -> Rotation3D:
        """positions `[N, 3]` int (t, h, w) -> tables `[N, head_dim/2]`."""
        angles = []
        for axis, dim in enumerate(self.axis_dims):
            exponents = torch.arange(0, dim, 2, dtype=torch.float64, device=positions.device) / dim
            inv_freq = self.theta**-exponents
            angles.append(positions[:, axis].to(torch.float64)[:, None] * inv_freq[None, :])
        angle = torch.cat(angles, dim=-1)
        return Rotation3D(angle.cos().to(torch.float32), angle.sin().to(torch.float32))
