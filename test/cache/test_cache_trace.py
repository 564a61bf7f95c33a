"""Cache bookkeeping against the reference's per-frame trace (../shared/parity/case_*/case.json) and input
checks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from cache_steps import run_step

from lingbot_map_ros.cache import KVCacheConfig, PagedKVCache

SHARED = Path(__file__).resolve().parents[2].parent / "shared"


def _step(cache: PagedKVCache, num_frames: int, keyframe: bool, attend: bool = True) -> int:
    """One step of random K/V on every layer (attending, or only writing); returns the visible keys."""
    return run_step(cache, num_frames, keyframe, attend=attend)[0].visible_tokens


@pytest.mark.parametrize("case_name", ["case_a", "case_b"])
def test_visible_tokens_and_rope_index_match_reference_trace(case_name):
    case = json.loads((SHARED / "parity" / case_name / "case.json").read_text())
    h, w = case["patch_grid_hw"]
    config = KVCacheConfig(
        num_layers=2,
        num_heads=2,
        head_dim=8,
        patches_per_frame=h * w,
        scale_frames=case["S0"],
        sliding_window=case["sliding_window"],
        max_window=case["sliding_window"] + 1,
    )
    assert config.tokens_per_frame == case["tokens_per_frame"] == 34
    cache = PagedKVCache(config, backend="torch")
    trace = case["per_frame_trace"]
    s0 = case["S0"]
    assert [t["rope_t"] for t in trace[:s0]] == list(range(s0))
    visible = [_step(cache, s0, keyframe=True)] * s0
    for frame in trace[s0:]:
        assert cache.frames_stored == frame["rope_t"], frame
        visible.append(_step(cache, 1, keyframe=frame["keyframe"]))
    assert visible == [t["global_attn_kv_tokens"] for t in trace]


def test_anchor_phase_sees_exactly_new_frames_then_evicts_excess():
    config = KVCacheConfig(
        num_layers=1,
        num_heads=1,
        head_dim=4,
        patches_per_frame=2,
        num_special=1,
        scale_frames=2,
        sliding_window=3,
        max_window=3,
    )
    cache = PagedKVCache(config, backend="torch")
    cache.set_sliding_window(1)
    assert _step(cache, 5, keyframe=True) == 5 * 3
    stats = cache.stats()
    assert (stats.anchor_frames, stats.window_frames, stats.evicted_special_frames) == (2, 1, 2)
    assert stats.frames_stored == 5
    assert stats.visible_tokens == 3 * 3 + 2 * 1


def test_special_cap_bounds_visible_specials():
    config = KVCacheConfig(
        num_layers=1,
        num_heads=1,
        head_dim=4,
        patches_per_frame=3,
        num_special=2,
        scale_frames=2,
        sliding_window=2,
        max_window=2,
        max_special_frames=7,
    )
    cache = PagedKVCache(config, backend="torch")
    _step(cache, 2, keyframe=True)
    for _ in range(20):
        _step(cache, 1, keyframe=True)
    stats = cache.stats()
    assert stats.frames_stored == 22
    assert stats.special_frames_visible == 7
    assert stats.evicted_special_frames == 7 - 2 - 2
    assert stats.visible_tokens == 4 * 5 + 3 * 2


def test_frames_at_518x378_fill_the_default_window():
    config = KVCacheConfig(num_layers=1, num_heads=1, head_dim=8, patches_per_frame=999)
    cache = PagedKVCache(config, backend="torch")
    _step(cache, 8, keyframe=True, attend=False)
    for _ in range(70):
        _step(cache, 1, keyframe=True, attend=False)
    assert _step(cache, 1, keyframe=False) == 73 * 1005 + (78 - 72) * 6
    assert _step(cache, 1, keyframe=True) == 72 * 1005 + (79 - 72) * 6
    assert cache.stats().window_frames == 64


@pytest.fixture
def cache() -> PagedKVCache:
    config = KVCacheConfig(
        num_layers=2,
        num_heads=2,
        head_dim=4,
        patches_per_frame=3,
        scale_frames=1,
        sliding_window=2,
        max_window=2,
    )
    return PagedKVCache(config, backend="torch")


def test_bad_inputs_raise_value_errors_naming_the_expectation(cache):
    step = cache.begin_step(1, keyframe=True)
    good = torch.zeros(9, 2, 4)
    with pytest.raises(ValueError, match=r"shape \[T, H, D\] = \(9, 2, 4\)"):
        step.attend(0, torch.zeros(8, 2, 4), good, good)
    with pytest.raises(ValueError, match="dtype torch.float32"):
        step.attend(0, good, good.bfloat16(), good)
    with pytest.raises(ValueError, match="layer must be an int in"):
        step.attend(2, good, good, good)
    with pytest.raises(ValueError, match="torch.Tensor"):
        step.attend(0, good, good, good.numpy())
    step.attend(0, good, good, good)
    with pytest.raises(RuntimeError, match="already attended"):
        step.attend(0, good, good, good)
    with pytest.raises(RuntimeError, match="step is open"):
        cache.begin_step(1, keyframe=True)
    step.attend(1, good, good, good)
    cache.end_step(step)
    with pytest.raises(ValueError, match="num_frames must be 1"):
        cache.begin_step(2, keyframe=True)
    with pytest.raises(ValueError, match=r"sliding_window must be an int in \[1, max_window=2\]"):
        cache.set_sliding_window(3)
    with pytest.raises(ValueError, match="backend must be one of"):
        PagedKVCache(cache.config, backend="triton")


def test_flashinfer_backend_needs_cuda(cache):
    with pytest.raises(ValueError, match="needs a CUDA device"):
        PagedKVCache(cache.config, backend="flashinfer")


def test_incomplete_keyframe_step_resets_the_cache(cache):
    _step(cache, 1, keyframe=True)
    step = cache.begin_step(1, keyframe=True)
    step.attend(0, *torch.zeros(3, 9, 2, 4).unbind(0))
    with pytest.raises(RuntimeError, match="1 of 2 layers"):
        cache.end_step(step)
    assert cache.frames_stored == 0


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("sliding_window", 0, "sliding_window must be an int in"),
        ("max_special_frames", 10, "max_special_frames must be >="),
        ("patches_per_frame", 0, "patches_per_frame must be an int >= 1"),
        ("dtype", torch.float64, "dtype must be"),
    ],
)
def test_config_validation(field, value, message):
    with pytest.raises(ValueError, match=message):
        KVCacheConfig(**{field: value})


def test_live_resize_outside_inference_mode_after_steps_inside_it():
    """The model steps under torch.inference_mode (pools become inference tensors); a live resize from a ROS
    parameter callback runs outside it and must still move the window frames."""
    config = KVCacheConfig(
        num_layers=1,
        num_heads=1,
        head_dim=4,
        patches_per_frame=2,
        scale_frames=1,
        sliding_window=3,
        max_window=4,
        max_special_frames=16,
    )
    with torch.inference_mode():
        cache = PagedKVCache(config, backend="torch")
        for i in range(4):
            step = cache.begin_step(1, keyframe=True)
            kv = torch.full((config.tokens_per_frame, 1, 4), float(i))
            step.attend(0, kv, kv, kv)
            cache.end_step(step)
    cache.set_sliding_window(1)
    stats = cache.stats()
    assert (stats.window_frames, stats.evicted_special_frames) == (1, 2)
    newest = cache.k_pool[0, cache.layout.slot_token(1)]
    assert torch.equal(newest, torch.full((1, 4), 3.0))
