"""2D rotary position embedding of the frame blocks (VGGT's RotaryPositionEmbedding2D, "rotate-half").

Per head of D dims, the first D/2 dims are rotated by the token's row y, the last D/2 by its column x.
Within each half of d = D/2 dims, dim i pairs with dim i + d/2 ("rotate-half"), with inverse frequencies
`base^(-2j/d)`, j = 0..d/2-1, duplicated over both quarters. Angles are computed in float32 and the
rotation runs in the tokens' dtype, as in the reference.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


def patch_positions_2d(grid_h: int, grid_w: int, num_special: int, device: torch.device) -> torch.Tensor:
    """(y, x) positions of one frame's tokens, `[num_special + grid_h*grid_w, 2]` int64.

    Special tokens sit at (0, 0); the patch at grid cell (y, x) (row-major) at (y + 1, x + 1).
    """
    ys, xs = torch.meshgrid(
        torch.arange(grid_h, device=device), torch.arange(grid_w, device=device), indexing="ij"
    )
    patches = torch.stack([ys.reshape(-1), xs.reshape(-1)], dim=-1) + 1
    special = torch.zeros(num_special, 2, dtype=torch.long, device=device)
    return torch.cat([special, patches], dim=0)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


@dataclass(frozen=True)
class Rotation2D:
    """cos/sin tables `[N, D/2]` per axis for N token positions; `rotate(x)` for x `[B, H, N, D]`."""

    cos_y: torch.Tensor
    sin_y: torch.Tensor
    cos_x: torch.Tensor
    sin_x: torch.Tensor

    def rotate(self, x: torch.Tensor) -> torch.Tensor:
        vertical, horizontal = x.chunk(2, dim=-1)
        vertical = vertical * self.cos_y + _rotate_half(vertical) * self.sin_y
        horizontal = horizontal * self.cos_x + _rotate_half(horizontal) * self.sin_x
        return torch.cat((vertical, horizontal), dim=-1)


class RotaryEmbedding2D:
    """Builds `Rotation2D` tables for integer (y, x) positions (no parameters, nothing in the state dict).

    Args:
        head_dim: D, a multiple of 4.
        base: frequency base (100 in the released model).
    """

    def __init__(self, head_dim: int, base: float = 100.0) -> None:
        if head_dim % 4:
            raise ValueError(f"2D RoPE needs head_dim divisible by 4, got {head_dim}")
        self.head_dim = head_dim
        self.base = base

    def _axis(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        dim = self.head_dim // 2
        exponents = torch.arange(0, dim, 2, device=positions.device).float() / dim
        inv_freq = 1.0 / (self.base**exponents)
        angles = positions.to(torch.float32)[:, None] * inv_freq[None, :]
        angles = torch.cat((angles, angles), dim=-1)
        return angles.cos().to(dtype), angles.sin().to(dtype)

    def __call__(self, positions: torch.Tensor, dtype: torch.dtype) -> Rotation2D:
        """positions `[N, 2]` int (y, x) -> tables for tokens of dtype `dtype`."""
        cos_y, sin_y = self._axis(positions[:, 0], dtype)
        cos_x, sin_x = self._axis(positions[:, 1], dtype)
        return Rotation2D(cos_y, sin_y, cos_x, sin_x)
