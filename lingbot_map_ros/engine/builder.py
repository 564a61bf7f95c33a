"""`build_engine(EngineSpec)`: the one place where a model and its camera sessions are made.

It always returns a set of cameras, a `MultiStreamSession` (engine/stream/multi_stream.py): one camera is a
set of
one (its lone `StreamingSession`, `.only`, runs exactly as a single stream); several cameras share one model
and one KV pool.

The node (`ros/lifecycle/pipeline.py`), `lingbot-map-ros run` (`tools/run/bag.py`) and the benchmarks describe
what they want as an `EngineSpec` (weights, device, precision, streaming policy) and call `build_engine` once;
the model is `cameras.model`. `test/tools/test_tools_layering.py` keeps it that way (one call site per tool,
no direct `StreamingSession(...)` or `build_model(...)` outside this module and the tests).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import torch

from lingbot_map_ros.model import CheckpointError, LingBotMap, ModelConfig, PrecisionPolicy, build_model
from lingbot_map_ros.model.graphed import compile_cache_dir

from .config import SessionConfig
from .stream.multi_stream import BatchConfig, MultiStreamSession
from .stream.session import StreamingModel

# What a caller of `build_engine` needs of model/ (the node's configure: precision, the compile cache folder,
# the checkpoint error), re-exported so that ros/ imports nothing from model/ or cache/.
__all__ = ["CheckpointError", "EngineSpec", "PrecisionPolicy", "build_engine", "compile_cache_dir"]


@dataclass(frozen=True)
class EngineSpec:
    """Model and streaming policy of one session.

    Attributes:
        preset: `ModelConfig.preset` name ("lingbot-map", "tiny").
        checkpoint: weights file (.pt / .safetensors); None: synthetic weights seeded with ``seed``.
        device: torch device of the model.
        precision: compute dtypes; None: ``PrecisionPolicy.for_device(device)`` (bf16 aggregator on CUDA).
        seed: seed of the synthetic weights, drawn from a forked RNG (the global RNG untouched); None: drawn
            from the global RNG as it is.
        init_on_device: draw synthetic weights directly on ``device`` (fast for the released preset on a GPU;
            other values than the default CPU draw of the same seed). Ignored with a checkpoint.
        session: the streaming policy (anchors, window, keyframes, backend, CUDA graphs, ...).
        cameras: the cameras' names (distinct; the default is one unnamed camera, "").
        batch: how several cameras' streaming frames are batched.
    """

    preset: str = "lingbot-map"
    checkpoint: Path | None = None
    device: torch.device | str = "cpu"
    precision: PrecisionPolicy | None = None
    seed: int | None = 0
    init_on_device: bool = False
    session: SessionConfig = field(default_factory=SessionConfig)
    cameras: tuple[str, ...] = ("",)
    batch: BatchConfig = field(default_factory=BatchConfig)

    @property
    def synthetic(self) -> bool:
        """No checkpoint: the weights are random (outputs are not meaningful)."""
        return self.checkpoint is None


def build_engine(spec: EngineSpec, model: StreamingModel | None = None) -> MultiStreamSession:
    """The set of ``spec.cameras`` over the model of ``spec`` (``cameras.model``).

    Args:
        spec: what to build.
        model: an already built model to stream through instead (one model, several sets: benchmarks,
            `run --topics`); the weight fields of ``spec`` are then unused.
    Raises:
        CheckpointError, OSError: unreadable or mismatching checkpoint.
        ValueError: a streaming policy the model cannot run (e.g. more stored frames than its RoPE table).
    """
    if model is None:
        model = _build_model(spec)
    return MultiStreamSession(model, spec.session, spec.cameras, spec.batch)


def _build_model(spec: EngineSpec) -> LingBotMap:
    if spec.synthetic and spec.seed is not None:
        # The same synthetic weights in every process, drawn from a forked RNG: the process's global RNG
        # state is the same after the build as before it (no process-wide state set here).
        devices = [torch.device(spec.device)] if torch.device(spec.device).type == "cuda" else []
        with torch.random.fork_rng(devices=devices):
            torch.manual_seed(spec.seed)
            return _draw_model(spec)
    return _draw_model(spec)


def _draw_model(spec: EngineSpec) -> LingBotMap:
    device = torch.device(spec.device)
    config = ModelConfig.preset(spec.preset)
    if spec.synthetic and spec.init_on_device:
        with device:
            model = LingBotMap(config)
        return model.eval().set_precision(spec.precision or PrecisionPolicy.for_device(device))
    return build_model(config, spec.checkpoint, device=device, precision=spec.precision)
