"""Start-up, memory and streaming rate of the node's default pipeline, in one fresh process.

What the node's configure does (`ros/lifecycle/pipeline.py`), without ROS: point torch.compile at the
persistent cache, build the model and the `StreamingSession` (`build_engine`, random weights unless
--checkpoint) with the node's defaults (window 64 in a pool sized for it, CUDA graphs, compiled blocks), warm
it up at the camera size; then push the anchor frames (configure -> first pose) and stream --frames frames
with `push` or the one-deep `push_overlapped` (a camera faster than the model: a next frame is always at
hand). Run it twice with the same --cache-dir for the cold and the warm start. Prints one JSON line (also
written to --out).

    python benchmarks/startup.py --cache-dir /tmp/cc --frames 300 --push overlapped --out /tmp/a.json
"""

from __future__ import annotations

import time

T0 = time.perf_counter()

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
from dataclasses import asdict  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
from results import record  # noqa: E402  (benchmarks/results.py)

from lingbot_map_ros.engine.builder import EngineSpec, build_engine  # noqa: E402
from lingbot_map_ros.engine.config import (  # noqa: E402
    DEFAULT_MAX_WINDOW,
    DEFAULT_SLIDING_WINDOW,
    SessionConfig,
)
from lingbot_map_ros.model.graphed import compile_cache_dir  # noqa: E402

GIB = 2**30


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--preset", default="lingbot-map")
    parser.add_argument("--checkpoint", default=None)
    parser.add_argument("--cache-dir", default="")
    parser.add_argument("--height", type=int, default=378, help="camera image height")
    parser.add_argument("--width", type=int, default=518, help="camera image width")
    parser.add_argument("--image-width", type=int, default=518, help="network input width")
    parser.add_argument("--window", type=int, default=DEFAULT_SLIDING_WINDOW)
    parser.add_argument("--max-window", type=int, default=DEFAULT_MAX_WINDOW)
    parser.add_argument("--keyframe-interval", type=int, default=1)
    parser.add_argument("--no-compile", action="store_true", help="model.compile_blocks false")
    parser.add_argument("--no-warmup", action="store_true")
    parser.add_argument("--push", choices=("sync", "overlapped"), default="overlapped")
    parser.add_argument("--frames", type=int, default=300, help="streaming frames after the anchor phase")
    parser.add_argument("--steady-from", type=int, default=100, help="first steady-state frame")
    parser.add_argument("--grow-window", type=int, default=0, help="then grow the window live")
    parser.add_argument("--depth-every-n", type=int, default=1, help="SessionConfig.depth_every_n")
    parser.add_argument(
        "--window-frames", type=int, default=300, help="frames of each latency window (first steady, last)"
    )
    parser.add_argument("--out", type=Path)
    parser.add_argument("--record", type=Path, help="append the report to this results file (results.py)")
    args = parser.parse_args()
    device = torch.device(args.device)
    cuda = device.type == "cuda"
    report: dict = {"args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}}
    report["import_s"] = time.perf_counter() - T0
    configure = time.perf_counter()
    if not args.no_compile:
        cache_dir = compile_cache_dir(args.cache_dir)
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(cache_dir)  # process-wide: set by this entry point
        report["cache_dir"] = str(cache_dir)
    session = build_engine(
        EngineSpec(
            preset=args.preset,
            checkpoint=args.checkpoint,
            device=device,
            seed=None,
            session=SessionConfig(
                sliding_window=args.window,
                max_window=args.max_window,
                keyframe_interval=args.keyframe_interval,
                image_width=args.image_width,
                compile_blocks=not args.no_compile,
                depth_every_n=args.depth_every_n,
            ),
        )
    ).only
    if cuda:
        torch.cuda.synchronize(device)
        report["weights_gib"] = torch.cuda.memory_allocated(device) / GIB  # + the camera history (small)
    report["build_s"] = time.perf_counter() - configure
    hw = (args.height, args.width)
    if not args.no_warmup:
        report["warmup_s"] = session.warm_up(hw)
    report["configure_s"] = time.perf_counter() - configure
    if cuda:
        report["after_configure_alloc_gib"] = torch.cuda.memory_allocated(device) / GIB
        report["configure_peak_gib"] = torch.cuda.max_memory_allocated(device) / GIB
        torch.cuda.reset_peak_memory_stats(device)
    rng = np.random.default_rng(0)
    frames = [rng.integers(0, 256, (*hw, 3), dtype=np.uint8) for _ in range(16)]
    push = session.push_overlapped if args.push == "overlapped" else session.push
    results = []
    for i in range(session.config.scale_frames):
        results += session.push(frames[i % 16])
    report["first_pose_s"] = time.perf_counter() - configure
    report["first_pose_since_process_start_s"] = time.perf_counter() - T0
    if cuda:
        report["anchor_peak_gib"] = torch.cuda.max_memory_allocated(device) / GIB
        torch.cuda.reset_peak_memory_stats(device)
    calls, delivered = [], []  # wall time of each call; (frame index, seconds from its call to its delivery)
    started: dict[int, float] = {}
    begin = time.perf_counter()
    base = session.stats().frames
    for i in range(args.frames):
        t = time.perf_counter()
        started[base + i] = t
        out = push(frames[i % 16], meta=base + i)
        now = time.perf_counter()
        calls.append(now - t)
        delivered += [(r.meta, now - started[r.meta], now) for r in out]
    if args.push == "overlapped":
        now_out = session.flush()
        now = time.perf_counter()
        delivered += [(r.meta, now - started[r.meta], now) for r in now_out]
    if cuda:
        torch.cuda.synchronize(device)
    wall = time.perf_counter() - begin
    steady = [d for d in delivered if d[0] - base >= args.steady_from]
    steady_wall = steady[-1][2] - steady[0][2]
    latency = np.asarray([d[1] for d in steady]) * 1e3
    report.update(
        frames=len(delivered),
        fps_all=len(delivered) / wall,
        fps_steady=(len(steady) - 1) / steady_wall,
        ms_per_frame_steady=1e3 * steady_wall / (len(steady) - 1),
        latency_ms_p50=float(np.percentile(latency, 50)),
        latency_ms_p90=float(np.percentile(latency, 90)),
        latency_ms_p99=float(np.percentile(latency, 99)),
        latency_windows=latency_windows(delivered, base, args.steady_from, args.window_frames),
        reanchors=session.stats().reanchors_total,
        stages_ms={k: round(v["mean"], 3) for k, v in session.stats().timings_ms.items()},
        kv=asdict(session.stats().cache.kv_cache),
    )
    if cuda:
        report["stream_peak_gib"] = torch.cuda.max_memory_allocated(device) / GIB
        report["stream_alloc_gib"] = torch.cuda.memory_allocated(device) / GIB
        report["reserved_gib"] = torch.cuda.memory_reserved(device) / GIB
    if args.grow_window:
        session.flush()
        session.set_sliding_window(args.grow_window)
        for i in range(20):
            session.push(frames[i % 16])
        kv = session.stats().cache.kv_cache
        keys = ("pool_window", "pool_reallocations", "window_frames", "pool_bytes")
        report["grown"] = {k: getattr(kv, k) for k in keys}
        if cuda:
            report["grown"]["peak_gib"] = torch.cuda.max_memory_allocated(device) / GIB
    if cuda:
        report["process_peak_gib"] = max(
            report.get(k, 0.0) for k in ("configure_peak_gib", "anchor_peak_gib", "stream_peak_gib")
        )
    line = json.dumps(report)
    print(line, flush=True)
    if args.out:
        args.out.write_text(line + "\n")
    if args.record:
        record(args.record, report, args.device)


def latency_windows(
    delivered: list[tuple[int, float, float]], base: int, first: int, frames: int
) -> dict[str, dict[str, float]]:
    """Latency p50 / p99 (ms) of the first `frames` steady frames (from streaming frame `first`: the window
    is full) and of the last `frames` (re-anchors included), and the ratio of their p99s (issue 22: p99 at
    frame 5,000 within 10 % of the first full-window frames)."""
    latency = {index - base: seconds * 1e3 for index, seconds, _ in delivered}
    last = max(latency) + 1 if latency else 0
    spans = {"first": (first, first + frames), "last": (max(first, last - frames), last)}
    out: dict[str, dict[str, float]] = {}
    for name, (start, end) in spans.items():
        values = np.asarray([latency[i] for i in range(start, end) if i in latency])
        if values.size:
            out[name] = {
                "frames": f"{start}-{end - 1}",
                "p50": float(np.percentile(values, 50)),
                "p99": float(np.percentile(values, 99)),
                "max": float(values.max()),
            }
    if len(out) == 2:
        out["p99_last_over_first"] = {"ratio": out["last"]["p99"] / out["first"]["p99"]}
    return out


if __name__ == "__main__":
    main()
