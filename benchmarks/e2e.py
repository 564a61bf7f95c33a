"""End-to-end streaming benchmark: RGB frame in -> pose (and depth) out through `StreamingSession`.

Sections (each optional, run in this order, results in one table at the end and a JSON + PNGs in --out):

* ``check``: the fast path (CUDA graphs, `model/graphed.py`) against the plain eager path on the same frames
  (anchor phase + streaming keyframes and non-keyframes): relative error of pose_enc, depth and depth_conf per
  frame, fails (exit 1) above ``--tolerance``.
* ``split``: per-stage device time of a streaming step with a full window (CUDA events, `stages.py`), per
  path: patch embed, frame blocks, global blocks, attention, depth head, camera head; decode and
  pre-processing are the session's host stages.
* ``stream``: ``--frames`` frames through a `StreamingSession` per path: FPS over all frames, per-frame
  latency p50/p90/p99 (``session.push`` wall time: pre-processing, host-to-device copy, model, device-to-host
  copy, decoding), p99 near frame 200 and at the end, GPU memory allocated/reserved over time.

The model is the released architecture with random weights (no checkpoint is needed for timing), bf16
aggregator and fp32 heads on CUDA (the precision policy). Frames are random uint8 images at the network
resolution. Keyframe interval: ``--keyframe-interval``, default ceil(frames / 320) as the reference's demo
picks for long streams. Usage (docs/benchmarks.md)::

    python benchmarks/e2e.py --frames 10000 --plain-frames 300          # H200
    python benchmarks/e2e.py --device cpu --preset tiny --height 28 --width 56 --frames 12 \\
        --plain-frames 12 --check-frames 4 --split-frames 2 --window 4   # CPU smoke
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import statistics
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch
from e2e_report import plot_latency, plot_memory, plot_stages, print_tables
from stages import StageRecorder

from lingbot_map_ros.cache.backends import BACKENDS
from lingbot_map_ros.engine.builder import EngineSpec, build_engine
from lingbot_map_ros.engine.config import DEFAULT_MAX_WINDOW, DEFAULT_SLIDING_WINDOW, SessionConfig
from lingbot_map_ros.engine.stream.session import StreamingSession
from lingbot_map_ros.model import LingBotMap, StreamConfig

#: path -> (cuda_graphs, compile_blocks): "plain" eager, "fast" CUDA graphs, "compiled" CUDA graphs
#: of torch.compile'd blocks.
MODES = {"fast": (True, False), "compiled": (True, True), "plain": (False, False)}


@dataclass
class StreamRun:
    """One session run: per streaming frame latency (ms) and memory samples (frame, allocated, reserved)."""

    mode: str
    frames: int
    keyframe_interval: int
    wall_s: float
    anchor_ms: float
    latency_ms: list[float] = field(default_factory=list)
    memory: list[tuple[int, int, int]] = field(default_factory=list)
    peak_allocated: int = 0
    host_stages_ms: dict[str, float] = field(default_factory=dict)

    @property
    def fps(self) -> float:
        return self.frames / self.wall_s

    def percentile(self, q: float, start: int = 0, stop: int | None = None) -> float:
        values = self.latency_ms[start:stop]
        return float(np.percentile(values, q)) if values else float("nan")


def engine(
    args: argparse.Namespace, mode: str, model: LingBotMap | None = None, interval: int = 1
) -> StreamingSession:
    """A `StreamingSession` on path ``mode`` (`build_engine`): over ``model``, or over a new random-weight
    network made directly on ``--device`` (fast for 1.16 B parameters) in the device's precision policy."""
    return build_engine(
        EngineSpec(
            preset=args.preset,
            device=args.device,
            seed=args.seed,
            init_on_device=True,
            session=SessionConfig(
                scale_frames=args.anchors,
                sliding_window=args.window,
                max_window=args.max_window,
                keyframe_interval=interval,
                image_width=args.width,
                backend=args.backend,
                cuda_graphs=MODES[mode][0],
                compile_blocks=MODES[mode][1],
            ),
        ),
        model,
    ).only


def random_frames(count: int, hw: tuple[int, int], seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, size=(*hw, 3), dtype=np.uint8) for _ in range(count)]


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def to_images(frames: list[np.ndarray], device: torch.device) -> torch.Tensor:
    batch = np.stack([f.transpose(2, 0, 1) for f in frames]).astype(np.float32) / np.float32(255.0)
    return torch.from_numpy(batch).to(device)


# ---------------------------------------------------------------------------------------------- check
def check(
    model: LingBotMap, args: argparse.Namespace, mode: str, frames: list[np.ndarray]
) -> dict[str, float]:
    """Max relative error of ``mode`` vs the plain path over an anchor step + ``--check-frames`` streaming
    frames (keyframes and non-keyframes alternate)."""
    device = model.device
    stream = dict(scale_frames=args.anchors, sliding_window=args.window, max_window=args.max_window)
    graphs, compiled = MODES[mode]
    plain = model.new_stream(StreamConfig(**stream, backend=args.backend, cuda_graphs=False))
    fast = model.new_stream(
        StreamConfig(**stream, backend=args.backend, cuda_graphs=graphs, compile_blocks=compiled)
    )
    images = to_images(frames[: args.anchors + args.check_frames], device)
    worst: dict[str, float] = {"pose_enc": 0.0, "depth": 0.0, "depth_conf": 0.0}
    for index in range(args.anchors - 1, images.shape[0]):
        anchor = index == args.anchors - 1
        batch = images[: args.anchors] if anchor else images[index : index + 1]
        keyframe = anchor or index % 2 == 0
        a = model.step(batch, plain, keyframe=keyframe)
        b = model.step(batch, fast, keyframe=keyframe)
        for name in worst:
            x, y = getattr(b, name).double(), getattr(a, name).double()
            if not torch.isfinite(x).all() or not torch.isfinite(y).all():
                raise SystemExit(f"check {mode}: non-finite {name} at frame {index}")
            worst[name] = max(worst[name], float((x - y).norm() / y.norm().clamp_min(1e-30)))
    return worst


# ---------------------------------------------------------------------------------------------- split
def split(model: LingBotMap, args: argparse.Namespace, mode: str, frames: list[np.ndarray]) -> dict:
    """Median per-stage ms of ``--split-frames`` keyframe steps after the window is full."""
    device = model.device
    state = model.new_stream(
        StreamConfig(
            scale_frames=args.anchors,
            sliding_window=args.window,
            max_window=args.max_window,
            backend=args.backend,
            cuda_graphs=MODES[mode][0],
            compile_blocks=MODES[mode][1],
        )
    )
    images = to_images(frames, device)
    model.step(images[: args.anchors], state)
    for index in range(args.window + 1):  # fill the window (keyframes), graphs captured on the first
        model.step(images[index % len(frames) : index % len(frames) + 1], state)
    recorder = StageRecorder(device)
    recorder.attach(model, state)
    per_stage: dict[str, list[float]] = {}
    totals = []
    try:
        for index in range(args.split_frames):
            frame = images[index % len(frames) : index % len(frames) + 1]
            synchronize(device)
            recorder.mark("input")
            start = time.perf_counter()
            model.step(frame, state)
            stages = recorder.close()
            totals.append(1e3 * (time.perf_counter() - start))
            for stage, ms in stages.items():
                per_stage.setdefault(stage, []).append(ms)
    finally:
        recorder.detach()
    result = {stage: statistics.median(values) for stage, values in per_stage.items()}
    result["step (host wall)"] = statistics.median(totals)
    return result


# ---------------------------------------------------------------------------------------------- stream
def stream(
    model: LingBotMap, args: argparse.Namespace, mode: str, count: int, frames: list[np.ndarray]
) -> StreamRun:
    """``count`` frames through a fresh `StreamingSession`; the first push call that completes the anchor
    phase is timed separately (``anchor_ms``), every later frame one latency sample."""
    device = model.device
    interval = args.keyframe_interval or max(1, math.ceil(count / 320))
    session = engine(args, mode, model, interval)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    run = StreamRun(mode, count, interval, 0.0, 0.0)
    host: dict[str, list[float]] = {}
    synchronize(device)
    begin = time.perf_counter()
    for index in range(count):
        start = time.perf_counter()
        results = session.push(frames[index % len(frames)])
        ms = 1e3 * (time.perf_counter() - start)
        if len(results) > 1:
            run.anchor_ms = ms
        elif results:
            run.latency_ms.append(ms)
            for stage, value in results[0].timings_ms.items():
                host.setdefault(stage, []).append(value)
        if device.type == "cuda" and (index % args.memory_every == 0 or index == count - 1):
            allocated, reserved = torch.cuda.memory_allocated(device), torch.cuda.memory_reserved(device)
            run.memory.append((index, allocated, reserved))
        if index % 1000 == 999:  # partial results survive a run cut short
            np.save(args.out / f"partial_{mode}_latency_ms.npy", np.asarray(run.latency_ms))
    run.wall_s = time.perf_counter() - begin
    if device.type == "cuda":
        run.peak_allocated = torch.cuda.max_memory_allocated(device)
    run.host_stages_ms = {stage: statistics.median(values) for stage, values in host.items()}
    return run


# ---------------------------------------------------------------------------------------------- main
def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--preset", default="lingbot-map", choices=("lingbot-map", "tiny"))
    parser.add_argument("--height", type=int, default=378)
    parser.add_argument("--width", type=int, default=518)
    parser.add_argument("--frames", type=int, default=1000, help="frames of the fast-path session run")
    parser.add_argument("--plain-frames", type=int, default=300, help="plain-path run frames (0: none)")
    parser.add_argument("--keyframe-interval", type=int, default=0, help="0: ceil(frames / 320)")
    parser.add_argument("--anchors", type=int, default=8)
    parser.add_argument("--window", type=int, default=DEFAULT_SLIDING_WINDOW)
    parser.add_argument("--max-window", type=int, default=DEFAULT_MAX_WINDOW)
    parser.add_argument("--backend", default="auto", choices=BACKENDS)
    parser.add_argument("--modes", default="fast,plain", help=f"paths, comma-separated, of {sorted(MODES)}")
    parser.add_argument("--stream-modes", help="paths of the session runs (default: --modes)")
    parser.add_argument("--check-frames", type=int, default=24, help="streaming frames compared (0: skip)")
    parser.add_argument("--tolerance", type=float, default=1e-2, help="max relative error fast vs plain")
    parser.add_argument("--split-frames", type=int, default=20, help="steps timed per path (0: skip)")
    parser.add_argument("--memory-every", type=int, default=50)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("output/e2e"))
    return parser.parse_args()


def main() -> int:
    args = parse_args()
    device = torch.device(args.device)
    if device.type == "cpu":
        torch.set_num_threads(1)
    args.out.mkdir(parents=True, exist_ok=True)
    hw = (args.height, args.width)
    started = time.perf_counter()
    model = engine(args, "plain").model
    frames = random_frames(16, hw, args.seed)
    summary: dict = {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "args": {k: str(v) for k, v in vars(args).items()},
    }
    print(f"model built in {time.perf_counter() - started:.1f} s on {summary['device']}", flush=True)
    modes = args.modes.split(",")
    if unknown := set(modes) - set(MODES):
        raise SystemExit(f"--modes: unknown {sorted(unknown)}; expected some of {sorted(MODES)}")
    failed = False
    if args.check_frames:
        summary["check"] = {m: check(model, args, m, frames) for m in modes if m != "plain"}
        failed = any(max(c.values()) > args.tolerance for c in summary["check"].values())
        print("check (max rel. error vs plain):", summary["check"], flush=True)
    if args.split_frames:
        summary["split"] = {mode: split(model, args, mode, frames) for mode in modes}
        print("split:", json.dumps(summary["split"]), flush=True)
    gc.collect()  # streams of the sections above (graphs hold reference cycles)
    if device.type == "cuda":
        torch.cuda.empty_cache()
    runs = []
    for mode in args.stream_modes.split(",") if args.stream_modes is not None else modes:
        count = args.plain_frames if mode == "plain" else args.frames
        if count:
            runs.append(stream(model, args, mode, count, frames))
            print(f"stream {mode}: {runs[-1].fps:.2f} FPS over {count} frames", flush=True)
    summary["stream"] = [
        {k: v for k, v in asdict(run).items() if k not in ("latency_ms", "memory")} for run in runs
    ]
    (args.out / "e2e.json").write_text(json.dumps(summary, indent=1))
    np.savez_compressed(
        args.out / "e2e_runs.npz",
        **{f"{r.mode}_latency_ms": np.asarray(r.latency_ms) for r in runs},
        **{f"{r.mode}_memory": np.asarray(r.memory) for r in runs},
    )
    plot_latency(runs, args.out / "latency.png")
    plot_memory(runs, args.out / "memory.png")
    if "split" in summary:
        plot_stages(summary["split"], args.out / "stages.png")
    print_tables(summary, runs)
    if failed:
        print(f"CHECK FAILED: relative error above {args.tolerance}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
