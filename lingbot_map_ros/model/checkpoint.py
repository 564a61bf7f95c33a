"""Checkpoint I/O: strict loading of `.pt` (with or without a top-level "model" key) and `.safetensors`.

Every failure (missing file, unreadable or truncated file, a missing or unexpected key, a wrong shape, a
non-tensor entry) raises one `CheckpointError` naming the first offenders. Loading never holds two copies of
the weights: `.pt` files are memory-mapped where the format allows, and `build_model` constructs the network
on the meta device and adopts the loaded tensors (`load_state_dict(assign=True)`).
"""

from __future__ import annotations

import pickle
from collections.abc import Mapping
from pathlib import Path

import torch
from torch import nn

from lingbot_map_ros.model.config import ModelConfig, PrecisionPolicy
from lingbot_map_ros.model.lingbot_map import LingBotMap

MAX_NAMED = 5
"""How many offending keys an error message lists per kind."""


class CheckpointError(ValueError):
    """The checkpoint cannot be read or does not match the model's state-dict layout."""


def _named(items: list[str]) -> str:
    more = f" (+{len(items) - MAX_NAMED} more)" if len(items) > MAX_NAMED else ""
    return ", ".join(items[:MAX_NAMED]) + more


def _torch_load(path: Path, allow_pickle: bool) -> object:
    try:
        try:
            return torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        except RuntimeError as exc:
            if "mmap" not in str(exc):
                raise
            return torch.load(path, map_location="cpu", weights_only=True)  # legacy (non-zip) format
    except pickle.UnpicklingError as exc:
        if "Weights only load failed" not in str(exc):
            raise CheckpointError(f"cannot read checkpoint {path}: {exc}") from exc
        if not allow_pickle:
            raise CheckpointError(
                f"checkpoint {path} holds Python objects besides tensors; it is refused because unpickling "
                "can run arbitrary code. If you trust the file, convert it once with "
                "`python -m lingbot_map_ros.tools.convert IN.pt OUT.safetensors --allow-pickle`."
            ) from exc
        try:
            return torch.load(path, map_location="cpu", weights_only=False)
        except Exception as inner:
            raise CheckpointError(f"cannot read checkpoint {path}: {inner}") from inner
    except CheckpointError:
        raise
    except Exception as exc:  # truncated zip, bad magic number, EOF, ...
        raise CheckpointError(f"cannot read checkpoint {path} (unreadable or truncated file): {exc}") from exc


def read_state_dict(path: str | Path, allow_pickle: bool = False) -> dict[str, torch.Tensor]:
    """Tensors of a `.safetensors` file or a `.pt` file (its "model" entry if present), on the CPU.

    `allow_pickle` permits `.pt` files that hold arbitrary Python objects (unsafe; only for trusted files).
    """
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint {path} does not exist or is not a file")
    if path.suffix == ".safetensors":
        from safetensors.torch import load_file

        try:
            loaded: object = load_file(str(path), device="cpu")
        except Exception as exc:
            raise CheckpointError(
                f"cannot read checkpoint {path} (unreadable or truncated file): {exc}"
            ) from exc
    else:
        loaded = _torch_load(path, allow_pickle)
    if isinstance(loaded, Mapping) and isinstance(loaded.get("model"), Mapping):
        loaded = loaded["model"]
    if not isinstance(loaded, Mapping):
        raise CheckpointError(f"checkpoint {path} holds a {type(loaded).__name__}, expected a state dict")
    not_tensors = [str(k) for k, v in loaded.items() if not isinstance(v, torch.Tensor)]
    if not_tensors:
        raise CheckpointError(f"checkpoint {path}: entries that are not tensors: {_named(not_tensors)}")
    return dict(loaded)


def check_state_dict(
    expected: Mapping[str, tuple[int, ...]],
    state_dict: Mapping[str, torch.Tensor],
    source: str = "checkpoint",
) -> None:
    """Raise `CheckpointError` unless `state_dict` has exactly the keys and shapes of `expected`."""
    missing = [k for k in expected if k not in state_dict]
    unexpected = [k for k in state_dict if k not in expected]
    wrong = [
        f"{k} (expected {list(shape)}, got {list(state_dict[k].shape)})"
        for k, shape in expected.items()
        if k in state_dict and tuple(state_dict[k].shape) != tuple(shape)
    ]
    not_float = [
        f"{k} ({v.dtype})" for k, v in state_dict.items() if k in expected and not v.is_floating_point()
    ]
    problems = []
    if missing:
        problems.append(f"{len(missing)} missing key(s): {_named(missing)}")
    if unexpected:
        problems.append(f"{len(unexpected)} unexpected key(s): {_named(unexpected)}")
    if wrong:
        problems.append(f"{len(wrong)} wrong shape(s): {_named(wrong)}")
    if not_float:
        problems.append(f"{len(not_float)} non-floating tensor(s): {_named(not_float)}")
    if problems:
        raise CheckpointError(f"{source} does not match the model: " + "; ".join(problems))


def expected_shapes(model: nn.Module) -> dict[str, tuple[int, ...]]:
    """key -> shape of the model's state dict (works on the meta device, allocates nothing)."""
    return {k: tuple(v.shape) for k, v in model.state_dict().items()}


def load_state_dict_strict(
    model: nn.Module, state_dict: Mapping[str, torch.Tensor], source: str = "state dict"
) -> None:
    """Check keys/shapes, then load. A model on the meta device adopts the tensors (no copy)."""
    check_state_dict(expected_shapes(model), state_dict, source)
    on_meta = any(p.is_meta for p in model.parameters())
    model.load_state_dict(state_dict, strict=True, assign=on_meta)


def load_checkpoint(model: nn.Module, path: str | Path, allow_pickle: bool = False) -> None:
    """Strictly load the checkpoint at `path` into `model` (see `read_state_dict`)."""
    load_state_dict_strict(model, read_state_dict(path, allow_pickle), source=f"checkpoint {path}")


def meta_model(config: ModelConfig) -> LingBotMap:
    """The network on the meta device: shapes and names only, no memory."""
    with torch.device("meta"):
        return LingBotMap(config)


def build_model(
    config: ModelConfig,
    checkpoint: str | Path | Mapping[str, torch.Tensor] | None = None,
    device: torch.device | str = "cpu",
    precision: PrecisionPolicy | None = None,
    allow_pickle: bool = False,
) -> LingBotMap:
    """An eval-mode `LingBotMap` on `device` in `precision` (default: `PrecisionPolicy.for_device(device)`).

    `checkpoint`: a file path or an in-memory state dict, loaded strictly without a second copy of the
    weights; None keeps PyTorch's random initialisation (tests, demos with the tiny preset).
    """
    device = torch.device(device)
    if checkpoint is None:
        model = LingBotMap(config)
    else:
        model = meta_model(config)
        if isinstance(checkpoint, Mapping):
            load_state_dict_strict(model, checkpoint)
        else:
            load_checkpoint(model, checkpoint, allow_pickle)
    model = model.to(device).eval()
    return model.set_precision(precision or PrecisionPolicy.for_device(device))
