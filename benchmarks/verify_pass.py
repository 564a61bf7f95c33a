"""A loop-closure verification pass, eager vs graphed, and the live step with a pass in flight (issue 31).

Builds the node's default pipeline as benchmarks/startup.py does (`build_engine`, random weights unless
--checkpoint, window 64, CUDA graphs, compiled blocks unless --no-compile), warms it up and streams --fill
frames (the window full), then times, with `PairVerifier` / `SidePairPasses` (engine/loop/verify.py,
pair_launch.py) on network-size pairs:

* eager: the scratch-stream pass (`PairVerifier(graphs=False)`), wall ms: what a pass cost the inference
  thread before;
* graphed: the first launch (capture, s), then per pass the launch's host ms (what the inference thread pays
  now, in a gap), its GPU ms (events) and the wall ms until its outputs are on the host;
* live: `session.push` ms alone and with a pass launched right before every --every-th push (as the gap does
  after a live step), p50 / p99 / mean; with --live-priority high both again with the live pushes on a
  high-priority CUDA stream (the side stream has CUDA's lowest priority, the default stream's too).

Memory: allocated / reserved before and after the capture (the graph's pool) and the peak. Prints a table and
one JSON line; --record appends it to a results file (benchmarks/results.py). Usage::

    python benchmarks/verify_pass.py --cache-dir /tmp/cc --passes 30 --record /tmp/verify_h200.json
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np
import torch
from results import record  # benchmarks/results.py

from lingbot_map_ros.engine.builder import EngineSpec, build_engine
from lingbot_map_ros.engine.config import SessionConfig
from lingbot_map_ros.engine.loop import PairVerifier
from lingbot_map_ros.engine.loop.pair_launch import SidePairPasses
from lingbot_map_ros.model.graphed import compile_cache_dir

GIB = 2**30


def _stats(ms: list[float]) -> dict[str, float]:
    values = np.asarray(ms)
    return {
        "n": int(values.size),
        "p50": round(float(np.percentile(values, 50)), 3),
        "p99": round(float(np.percentile(values, 99)), 3),
        "mean": round(float(values.mean()), 3),
        "max": round(float(values.max()), 3),
    }


def _live(session, frames, side, pairs, every: int, stream) -> dict[str, dict[str, float]]:  # noqa: ANN001
    """push ms alone, then with a pass launched before every `every`-th push (launch ms beside)."""
    torch.cuda.synchronize()
    alone, beside, launches = [], [], []
    with torch.cuda.stream(stream):
        for frame in frames:
            t = time.perf_counter()
            session.push(frame)
            alone.append(1e3 * (time.perf_counter() - t))
        for i, frame in enumerate(frames):
            launched = None
            if i % every == 0:
                side.stage(*pairs[i % len(pairs)])
                t = time.perf_counter()
                launched = side.launch()
                launches.append(1e3 * (time.perf_counter() - t))
            t = time.perf_counter()
            session.push(frame)
            beside.append(1e3 * (time.perf_counter() - t))
            if launched is not None:
                launched.wait()
    torch.cuda.synchronize()
    return {
        "push_alone_ms": _stats(alone),
        "push_beside_pass_ms": _stats(beside),
        "launch_ms": _stats(launches),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--preset", default="lingbot-map")
    parser.add_argument("--checkpoint", default=None)
    parser.add_argument("--cache-dir", default="")
    parser.add_argument("--height", type=int, default=378, help="camera image height")
    parser.add_argument("--width", type=int, default=518, help="camera image width")
    parser.add_argument("--no-compile", action="store_true", help="model.compile_blocks false")
    parser.add_argument("--fill", type=int, default=80, help="streaming frames before timing (window full)")
    parser.add_argument("--passes", type=int, default=30, help="timed passes per path")
    parser.add_argument("--live-frames", type=int, default=120, help="pushes timed per live row")
    parser.add_argument("--every", type=int, default=1, help="a pass before every n-th push")
    parser.add_argument("--live-priority", choices=("default", "high"), default="default")
    parser.add_argument("--record", type=Path, help="append the report to this results file (results.py)")
    args = parser.parse_args()
    device = torch.device("cuda")
    if not args.no_compile:
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(compile_cache_dir(args.cache_dir))
    session = build_engine(
        EngineSpec(
            preset=args.preset,
            checkpoint=args.checkpoint,
            device=device,
            seed=None,
            session=SessionConfig(compile_blocks=not args.no_compile),
        )
    ).only
    hw = (args.height, args.width)
    session.warm_up(hw)
    rng = np.random.default_rng(0)
    frames = [rng.integers(0, 256, (*hw, 3), dtype=np.uint8) for _ in range(16)]
    for i in range(session.config.scale_frames + args.fill):
        session.push(frames[i % 16])
    net_hw = session.stats().network_hw
    pairs = [tuple(rng.integers(0, 256, (*net_hw, 3), dtype=np.uint8) for _ in range(2)) for _ in range(4)]
    model = session.model
    report: dict = {"args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}}
    report["network_hw"] = list(net_hw)

    eager = PairVerifier(model, graphs=False)
    eager.pair_pass(*pairs[0])  # the scratch stream's pool and kernels
    torch.cuda.synchronize()
    eager_ms = []
    for i in range(args.passes):
        t = time.perf_counter()
        eager.pair_pass(*pairs[i % len(pairs)])
        eager_ms.append(1e3 * (time.perf_counter() - t))
    report["eager_pass_ms"] = _stats(eager_ms)
    del eager
    torch.cuda.empty_cache()

    torch.cuda.synchronize()
    before = (torch.cuda.memory_allocated(device), torch.cuda.memory_reserved(device))
    side = SidePairPasses(model)
    side.stage(*pairs[0])
    t = time.perf_counter()
    side.launch().wait()
    report["capture_s"] = round(time.perf_counter() - t, 3)
    after = (torch.cuda.memory_allocated(device), torch.cuda.memory_reserved(device))
    report["graph_alloc_gib"] = round((after[0] - before[0]) / GIB, 3)
    report["graph_reserved_gib"] = round((after[1] - before[1]) / GIB, 3)
    launch_ms, gpu_ms, wall_ms = [], [], []
    for i in range(args.passes):
        side.stage(*pairs[i % len(pairs)])
        t = time.perf_counter()
        launched = side.launch()
        launch_ms.append(1e3 * (time.perf_counter() - t))
        _, gpu_s = launched.wait()
        wall_ms.append(1e3 * (time.perf_counter() - t))
        gpu_ms.append(1e3 * gpu_s)
    report["graphed_launch_ms"] = _stats(launch_ms)
    report["graphed_gpu_ms"] = _stats(gpu_ms)
    report["graphed_wall_ms"] = _stats(wall_ms)

    stream = torch.cuda.current_stream(device)
    if args.live_priority == "high":
        stream = torch.cuda.Stream(device, priority=-5)  # mapped to CUDA's greatest priority
    report["live_stream_priority"] = stream.priority
    live_frames = [frames[i % 16] for i in range(args.live_frames)]
    report["live"] = _live(session, live_frames, side, pairs, args.every, stream)
    report["peak_alloc_gib"] = round(torch.cuda.max_memory_allocated(device) / GIB, 3)
    report["reserved_gib"] = round(torch.cuda.memory_reserved(device) / GIB, 3)

    rows = [
        ("eager pass (wall)", report["eager_pass_ms"]),
        ("graphed: launch (host)", report["graphed_launch_ms"]),
        ("graphed: GPU", report["graphed_gpu_ms"]),
        ("graphed: until on host", report["graphed_wall_ms"]),
        (f"live push alone (prio {stream.priority})", report["live"]["push_alone_ms"]),
        ("live push, pass in flight", report["live"]["push_beside_pass_ms"]),
        ("  launch before that push", report["live"]["launch_ms"]),
    ]
    print(f"{'ms':34} {'p50':>8} {'p99':>8} {'mean':>8} {'max':>8} {'n':>5}")
    for name, s in rows:
        print(f"{name:34} {s['p50']:8.2f} {s['p99']:8.2f} {s['mean']:8.2f} {s['max']:8.2f} {s['n']:5d}")
    print(
        f"capture {report['capture_s']} s, graph pool {report['graph_reserved_gib']} GiB reserved "
        f"({report['graph_alloc_gib']} allocated), peak {report['peak_alloc_gib']} GiB"
    )
    print(json.dumps(report), flush=True)
    if args.record:
        record(args.record, report, "cuda")


if __name__ == "__main__":
    main()
