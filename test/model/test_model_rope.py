"""Rotary embeddings: 3D video RoPE (global blocks) and 2D RoPE (frame blocks) against their definitions."""

from __future__ import annotations

import math

import pytest
import torch

from lingbot_map_ros.model.layers.rope2d import RotaryEmbedding2D, patch_positions_2d
from lingbot_map_ros.model.layers.rope3d import VideoRotaryEmbedding3D, video_positions, video_rope_axis_dims


def test_axis_split_of_released_head_dim() -> None:
    assert video_rope_axis_dims(64) == (20, 22, 22)
    assert sum(video_rope_axis_dims(128)) == 128
    for bad in (8, 9):  # no temporal dims left / odd
        with pytest.raises(ValueError):
            video_rope_axis_dims(bad)


def test_video_positions_layout() -> None:
    pos = video_positions(torch.tensor([3, 7]), grid_h=2, grid_w=3, num_special=6)
    assert pos.shape == (2 * 12, 3)
    assert pos[:6].tolist() == [[3, i, i] for i in range(6)]
    assert pos[6].tolist() == [3, 6, 6]  # patch (0, 0)
    assert pos[6 + 5].tolist() == [3, 7, 8]  # patch (1, 2), row-major
    assert pos[12].tolist() == [7, 0, 0]


def test_interleaved_pairs_per_axis() -> None:
    rope = VideoRotaryEmbedding3D(64)
    x = torch.zeros(1, 1, 1, 64)
    x[..., 0] = 1.0  # pair 0 (t axis, inv_freq 1)
    x[..., 20] = 1.0  # pair 10 = first pair of the h axis
    x[..., 42] = 1.0  # pair 21 = first pair of the w axis
    out = rope(torch.tensor([[5, 2, 3]])).rotate(x)[0, 0, 0]
    for dim, angle in ((0, 5.0), (20, 2.0), (42, 3.0)):
        assert out[dim].item() == pytest.approx(math.cos(angle), abs=1e-6)
        assert out[dim + 1].item() == pytest.approx(math.sin(angle), abs=1e-6)
    untouched = torch.ones(64, dtype=torch.bool)
    untouched[[0, 1, 20, 21, 42, 43]] = False
    assert torch.all(out[untouched] == 0)


@pytest.mark.parametrize("shift", [(1, 0, 0), (0, 3, 0), (0, 0, 5), (1000, 2, 1)])
def test_relative_position_property(shift: tuple[int, int, int]) -> None:
    torch.manual_seed(0)
    rope = VideoRotaryEmbedding3D(64)
    q, k = torch.randn(2, 1, 1, 1, 64, dtype=torch.float64).unbind(0)
    base = torch.tensor([[4, 9, 11], [2, 6, 7]])
    moved = base + torch.tensor(shift)
    score = (rope(base[:1]).rotate(q) * rope(base[1:]).rotate(k)).sum()
    score_moved = (rope(moved[:1]).rotate(q) * rope(moved[1:]).rotate(k)).sum()
    assert score_moved.item() == pytest.approx(score.item(), rel=1e-5, abs=1e-5)


def test_frame_indices_past_reference_table_are_finite() -> None:
    """The reference's table ends at 1,024 frames; angles here are computed, so large indices work."""
    rope = VideoRotaryEmbedding3D(64)
    positions = video_positions(torch.tensor([1023, 1024, 250_000]), grid_h=2, grid_w=2, num_special=6)
    x = torch.randn(1, 2, positions.shape[0], 64)
    out = rope(positions).rotate(x)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out.norm(dim=-1), x.norm(dim=-1))


def test_rope2d_rotate_half_and_specials() -> None:
    rope = RotaryEmbedding2D(64, base=100.0)
    positions = patch_positions_2d(grid_h=3, grid_w=4, num_special=6, device=torch.device("cpu"))
    assert positions[:6].tolist() == [[0, 0]] * 6
    assert positions[6].tolist() == [1, 1] and positions[-1].tolist() == [3, 4]
    x = torch.randn(1, 1, positions.shape[0], 64)
    out = rope(positions, torch.float32).rotate(x)
    torch.testing.assert_close(out[:, :, :6], x[:, :, :6])  # specials sit at (0, 0): identity
    e = torch.zeros(1, 1, 1, 64)
    e[..., 0] = 1.0  # y half, dim 0 pairs with dim 16 (rotate-half), inv_freq 1
    e[..., 32] = 1.0  # x half, dim 32 pairs with dim 48
    rotated = rope(torch.tensor([[2, 3]]), torch.float32).rotate(e)[0, 0, 0]
    assert rotated[0].item() == pytest.approx(math.cos(2.0), abs=1e-6)
    assert rotated[16].item() == pytest.approx(math.sin(2.0), abs=1e-6)
    assert rotated[32].item() == pytest.approx(math.cos(3.0), abs=1e-6)
    assert rotated[48].item() == pytest.approx(math.sin(3.0), abs=1e-6)
