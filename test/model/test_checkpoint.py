"""Checkpoint layout and strict loading: released key list (meta device), file formats (tiny), errors."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from lingbot_map_ros.model import CheckpointError, ModelConfig, build_model, load_checkpoint, read_state_dict
from lingbot_map_ros.model.checkpoint import expected_shapes, load_state_dict_strict, meta_model
from lingbot_map_ros.tools import convert

SHARED = Path(__file__).resolve().parents[2].parent / "shared"
TSV = SHARED / "parity" / "state_dict_keys.tsv"
RELEASED_TENSORS = 1342
RELEASED_PARAMS = 1_157_943_540


def _tsv() -> dict[str, tuple[int, ...]]:
    sys.path.insert(0, str(SHARED / "parity"))
    try:
        from synthetic_weights import load_keys_and_shapes
    finally:
        sys.path.pop(0)
    return {k: tuple(s) for k, s in load_keys_and_shapes(str(TSV))}


@pytest.fixture(scope="module")
def released_meta():
    return meta_model(ModelConfig.preset("lingbot-map"))


@pytest.fixture(scope="module")
def tiny_state() -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    model = build_model(ModelConfig.preset("tiny"))
    return {k: v.clone() for k, v in model.state_dict().items()}


def _meta_state(shapes: dict[str, tuple[int, ...]]) -> dict[str, torch.Tensor]:
    return {k: torch.empty(s, device="meta") for k, s in shapes.items()}


def test_released_layout_matches_tsv(released_meta) -> None:
    shapes = expected_shapes(released_meta)
    tsv = _tsv()
    assert len(tsv) == RELEASED_TENSORS
    assert shapes == tsv
    assert sum(torch.Size(s).numel() for s in shapes.values()) == RELEASED_PARAMS
    assert sum(p.numel() for p in released_meta.parameters()) == RELEASED_PARAMS
    assert not list(released_meta.buffers()), "the released checkpoint has no buffers"


def test_tsv_state_dict_loads_strictly() -> None:
    model = meta_model(ModelConfig.preset("lingbot-map"))
    state = _meta_state(_tsv())
    load_state_dict_strict(model, state)
    name = "aggregator.global_blocks.23.attn.qkv.weight"
    assert model.get_parameter(name) is not None and model.get_parameter(name).shape == (3072, 1024)


@pytest.mark.parametrize(
    ("mutate", "needle"),
    [
        (lambda s: s.pop("camera_head.trunk.2.ls1.gamma"), "missing key(s): camera_head.trunk.2.ls1.gamma"),
        (
            lambda s: s.__setitem__(
                "aggregator.frame_blocks.0.attn.q_nrm.weight",
                s.pop("aggregator.frame_blocks.0.attn.q_norm.weight"),
            ),
            "unexpected key(s): aggregator.frame_blocks.0.attn.q_nrm.weight",
        ),
        (
            lambda s: s.__setitem__(
                "depth_head.projects.1.weight", torch.empty(512, 2048, 3, 3, device="meta")
            ),
            "depth_head.projects.1.weight (expected [512, 2048, 1, 1], got [512, 2048, 3, 3])",
        ),
    ],
    ids=["dropped", "renamed", "reshaped"],
)
def test_layout_errors_name_the_offender(released_meta, mutate, needle) -> None:
    state = _meta_state(_tsv())
    mutate(state)
    with pytest.raises(CheckpointError) as info:
        load_state_dict_strict(released_meta, state)
    assert needle in str(info.value)


def test_renamed_key_reports_both_sides(released_meta) -> None:
    state = _meta_state(_tsv())
    state["aggregator.scale_tokens"] = state.pop("aggregator.scale_token")
    pattern = "missing key.*aggregator.scale_token.*unexpected.*aggregator.scale_tokens"
    with pytest.raises(CheckpointError, match=pattern):
        load_state_dict_strict(released_meta, state)


def _assert_same(model: torch.nn.Module, state: dict[str, torch.Tensor]) -> None:
    loaded = model.state_dict()
    assert loaded.keys() == state.keys()
    for k, v in state.items():
        assert torch.equal(loaded[k], v), k


@pytest.mark.parametrize("layout", ["pt", "pt_model_key", "safetensors"])
def test_file_round_trip(tmp_path: Path, tiny_state, layout: str) -> None:
    if layout == "safetensors":
        path = tmp_path / "tiny.safetensors"
        save_file(tiny_state, str(path))
    else:
        path = tmp_path / "tiny.pt"
        torch.save({"model": tiny_state, "epoch": 3} if layout == "pt_model_key" else tiny_state, path)
    model = build_model(ModelConfig.preset("tiny"), path)
    _assert_same(model, tiny_state)
    assert not any(p.is_meta for p in model.parameters())
    fresh = build_model(ModelConfig.preset("tiny"))
    load_checkpoint(fresh, path)  # copy into an allocated model
    _assert_same(fresh, tiny_state)


@pytest.mark.parametrize("suffix", [".pt", ".safetensors"])
def test_truncated_file_is_a_clear_error(tmp_path: Path, tiny_state, suffix: str) -> None:
    path = tmp_path / f"tiny{suffix}"
    if suffix == ".pt":
        torch.save(tiny_state, path)
    else:
        save_file(tiny_state, str(path))
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match="unreadable or truncated"):
        read_state_dict(path)


def test_missing_file_and_wrong_preset(tmp_path: Path, tiny_state) -> None:
    with pytest.raises(CheckpointError, match="does not exist"):
        read_state_dict(tmp_path / "nope.pt")
    path = tmp_path / "tiny.pt"
    torch.save(tiny_state, path)
    with pytest.raises(CheckpointError, match="wrong shape"):
        build_model(ModelConfig.preset("lingbot-map"), path)


def test_pickled_objects_need_explicit_permission(tmp_path: Path, tiny_state) -> None:
    path = tmp_path / "with_args.pt"
    torch.save({"model": tiny_state, "args": Path("/some/run")}, path)
    with pytest.raises(CheckpointError, match="allow-pickle"):
        read_state_dict(path)
    assert read_state_dict(path, allow_pickle=True).keys() == tiny_state.keys()


def test_non_tensor_entries_rejected(tmp_path: Path) -> None:
    path = tmp_path / "bad.pt"
    torch.save({"a.weight": torch.zeros(2), "b": 3}, path)
    with pytest.raises(CheckpointError, match="not tensors: b"):
        read_state_dict(path)


def test_convert_cli(tmp_path: Path, tiny_state, capsys) -> None:
    src, dst = tmp_path / "tiny.pt", tmp_path / "tiny.safetensors"
    torch.save({"model": tiny_state}, src)
    assert convert.main([str(src), str(dst), "--preset", "tiny"]) == 0
    assert "tensors" in capsys.readouterr().out
    _assert_same(build_model(ModelConfig.preset("tiny"), dst), tiny_state)
    bad = dict(tiny_state)
    bad.pop("camera_head.empty_pose_tokens")
    torch.save(bad, src)
    assert convert.main([str(src), str(tmp_path / "bad.safetensors"), "--preset", "tiny"]) == 1
    assert "missing key(s): camera_head.empty_pose_tokens" in capsys.readouterr().err
    assert not list(tmp_path.glob("*bad*"))


def test_legacy_pt_format_loads_without_mmap(tmp_path: Path, tiny_state) -> None:
    path = tmp_path / "legacy.pt"
    torch.save({"model": tiny_state}, path, _use_new_zipfile_serialization=False)
    _assert_same(build_model(ModelConfig.preset("tiny"), path), tiny_state)
