"""Bounded camera-head history: anchors kept, ring over later keyframes, non-keyframes leave no trace."""

from __future__ import annotations

import pytest
import torch

from lingbot_map_ros.model.camera_history import CameraHistory


def _history(capacity: int = 5) -> CameraHistory:
    return CameraHistory(
        num_passes=1, num_blocks=1, num_heads=1, head_dim=2, capacity=capacity, device=torch.device("cpu")
    )


def _push(history: CameraHistory, values: list[float], keyframe: bool = True) -> torch.Tensor:
    """Append tokens whose k = v = (value, 0); returns the attention output (q = 0: mean of visible v)."""
    kv = torch.tensor([[v, 0.0] for v in values]).view(1, 1, len(values), 2)
    step = history.begin(len(values), keyframe)
    out = history.attend(step, 0, 0, torch.zeros_like(kv), kv, kv)
    history.end(step)
    return out[0, 0, :, 0]


def _stored(history: CameraHistory) -> list[float]:
    return sorted(history.v[0, 0, 0, : history.stored, 0].tolist())


def test_under_capacity_attends_everything() -> None:
    history = _history()
    assert _push(history, [1.0, 2.0]).tolist() == pytest.approx([1.5, 1.5])  # anchors: bidirectional
    assert _push(history, [3.0]).item() == pytest.approx(2.0)
    assert history.anchors == 2 and history.stored == 3


def test_ring_overwrites_oldest_non_anchor() -> None:
    history = _history(capacity=5)
    _push(history, [1.0, 2.0])
    for value in (3.0, 4.0, 5.0):
        _push(history, [value])
    assert history.stored == 5
    _push(history, [6.0])  # evicts 3 (oldest non-anchor), anchors 1, 2 stay
    assert _stored(history) == [1.0, 2.0, 4.0, 5.0, 6.0]
    out = _push(history, [7.0])  # evicts 4, attends over {1, 2, 5, 6, 7}
    assert out.item() == pytest.approx((1 + 2 + 5 + 6 + 7) / 5)
    assert _stored(history) == [1.0, 2.0, 5.0, 6.0, 7.0]


def test_non_keyframe_leaves_history_unchanged() -> None:
    history = _history(capacity=4)
    _push(history, [1.0, 2.0])
    assert _push(history, [9.0], keyframe=False).item() == pytest.approx(4.0)
    assert history.stored == 2
    _push(history, [3.0])
    _push(history, [4.0])
    before = history.v.clone()
    assert _push(history, [10.0], keyframe=False).item() == pytest.approx(4.0)  # full: scratch slot
    assert torch.equal(history.v[..., :4, :], before[..., :4, :]) and history.stored == 4
    assert _stored(history) == [1.0, 2.0, 3.0, 4.0]


def test_capacity_errors_and_reset() -> None:
    history = _history(capacity=3)
    with pytest.raises(ValueError, match="raise camera_history"):
        history.begin(4, True)
    _push(history, [1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match="no room"):
        history.begin(1, True)
    history.reset()
    assert history.stored == 0 and history.anchors == 0
    with pytest.raises(ValueError):
        _history(capacity=0)
