"""Build the model and the streaming session from the node's parameters (the configure step).

The only place where the ROS layer touches model/ and engine/ construction; everything after configure goes
through the set of cameras `build_engine` returns (`MultiStreamSession`; docs/architecture.md).
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from ...engine.face import (
    BatchConfig,
    CheckpointError,
    EngineSpec,
    GpuGaps,
    MultiStreamSession,
    PrecisionPolicy,
    SessionConfig,
    StreamingModel,
    build_engine,
    compile_cache_dir,
    warm_up_pair_pass,
)
from ..params.declare import NodeParams, owner_values, param_reader, parse_image_size
from .process_settings import ProcessSettings

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


class ConfigureError(RuntimeError):
    """Configure failed; the message is the one clear error the node logs."""


@dataclass
class Pipeline:
    """What configure builds: the model (on its device) and the set of cameras that streams frames through
    it (`cameras`: one or several; several share one KV pool)."""

    model: StreamingModel
    cameras: MultiStreamSession
    device: torch.device
    description: str
    #: Process-wide settings configure changed for this pipeline (restored by `release`).
    settings: ProcessSettings
    #: Loop closure's place descriptor of a network image [h, w, 3] uint8 (None: the model's encoder
    #: tokens, engine/loop/descriptor.py); a test's oracle brings its own.
    loop_descriptor: Callable[[np.ndarray], np.ndarray] | None = None
    #: GPU work of other threads (the loop closer's verification passes) that the inference thread runs
    #: between live steps within a time budget (engine/gpu_gaps.py; attached by the node's `NodeRounds`).
    gaps: GpuGaps = field(default_factory=GpuGaps)

    def release(self) -> None:
        """Drop the model and the cameras' sessions, return cached GPU memory and restore the process-wide
        settings (cleanup)."""
        self.settings.restore()
        cuda = self.device.type == "cuda"
        del self.cameras
        del self.model
        gc.collect()  # the model and its caches may sit in reference cycles
        if cuda:
            torch.cuda.empty_cache()


def resolve_device(name: str) -> torch.device:
    """`auto` -> cuda when available, else cpu; otherwise the named device (must exist)."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError as exc:
        raise ConfigureError(f"model.device '{name}' is not a torch device: {exc}") from exc
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ConfigureError(f"model.device '{name}' requested but CUDA is not available")
    return device


def build_pipeline(params: NodeParams, warn: Callable[[str], object]) -> Pipeline:
    """Construct the model (checkpoint or synthetic weights) and the session.

    Args:
        params: the node's parameters.
        warn: logger callback for the synthetic-weights warning.
    Raises:
        ConfigureError: unreadable / mismatching checkpoint, unavailable device, bad combination; one message.
    """
    device = resolve_device(params.model_device)
    precision = None
    if params.model_dtype != "auto":
        precision = PrecisionPolicy(aggregator_dtype=_DTYPES[params.model_dtype])
    checkpoint = Path(params.model_checkpoint).expanduser() if params.model_checkpoint else None
    if checkpoint is None:
        warn(
            f"model.checkpoint is empty: using SYNTHETIC weights of preset '{params.model_preset}' "
            f"(seed {params.model_synthetic_seed}; outputs are not meaningful; set model.checkpoint to a "
            "released LingBot-Map checkpoint)"
        )
    compiling = params.model_compile_blocks and params.model_cuda_graphs and device.type == "cuda"
    try:
        cache_dir = compile_cache_dir(params.model_compile_cache_dir) if compiling else None
    except OSError as exc:
        raise ConfigureError(f"model.compile_cache_dir cannot be used: {exc}") from exc
    # the fields of the `ParamSpec.of(..., SessionConfig, ...)` rows; the rest keep the engine's defaults
    policy = SessionConfig(**owner_values(SessionConfig, param_reader(params)))
    spec = EngineSpec(
        preset=params.model_preset,
        checkpoint=checkpoint,
        device=device,
        precision=precision,
        seed=params.model_synthetic_seed,
        session=policy,
        cameras=tuple(params.cameras),
        batch=BatchConfig(max_wait_ms=params.batch_max_wait_ms, max_batch=params.batch_max_batch),
    )
    try:
        cameras = build_engine(spec)
    except (CheckpointError, OSError) as exc:
        raise ConfigureError(f"cannot load model.checkpoint '{checkpoint}': {exc}") from exc
    except ValueError as exc:
        raise ConfigureError(f"cannot start the streaming session: {exc}") from exc
    description = (
        f"preset {params.model_preset}, weights {checkpoint or 'synthetic'}, device {device}, "
        f"dtype {params.model_dtype}, backend {params.attention_backend}, "
        f"image width {params.model_image_width}, "
        f"compile_blocks {compiling}" + (f" (cache {cache_dir})" if cache_dir else "")
    )
    settings = ProcessSettings()  # set from here on (after the last failure that leaves nothing to restore)
    if cache_dir is not None:
        settings.set_compile_cache_dir(cache_dir)  # before the first compile (the warm-up's)
    if device.type == "cuda":
        # The inference thread gives the GIL back ~60 times a frame (graph replays, waits, the output copy);
        # with Python's default 5 ms switch interval each time it can wait 5 ms behind any busy Python thread
        # of the node (rclpy's executor). Measured on the H200 through the node at 60 Hz: 0.25 FPS posed with
        # 5 ms, 29 FPS with 0.2 ms (docs/benchmarks.md, "Through the node"); inference.gil_switch_interval_ms.
        settings.set_switch_interval(params.inference_gil_switch_interval_ms / 1e3)
    warmup_hw = parse_image_size(params.model_warmup_image_size) if params.model_warmup_image_size else None
    if warmup_hw is not None and device.type == "cuda":
        try:
            seconds = cameras.warm_up(warmup_hw)
        except Exception as exc:  # e.g. out of memory: one clear configure error
            settings.restore()
            raise ConfigureError(f"warm-up at {params.model_warmup_image_size} failed: {exc}") from exc
        description += f", warm-up at {params.model_warmup_image_size} {seconds:.1f} s"
        if params.loop_closure_enabled:  # the verification pass's graph, so no live frame waits for it
            try:
                seconds = warm_up_pair_pass(cameras.model, warmup_hw, params.model_image_width)
            except Exception as exc:  # the verifier captures again at its first pass, else runs it eagerly
                description += f", verification pass not captured ({type(exc).__name__}: {exc})"
            else:
                description += f", verification pass captured in {seconds:.1f} s"
    return Pipeline(
        model=cameras.model, cameras=cameras, device=device, description=description, settings=settings
    )
