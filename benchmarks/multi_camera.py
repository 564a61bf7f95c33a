"""Several cameras through one model and one KV pool: aggregate posed frames/s for 1, 2, 4 cameras.

Every round each camera delivers one frame (cameras at the same rate, as fast as the GPU allows) to a
`MultiStreamSession` (`engine/stream/multi_stream.py`): the streaming frames of all cameras run as one batched
model step (`LingBotMap.step_batch`; one camera alone runs `model.step` with its CUDA graphs, the
single-camera default path), then every camera's result is decoded. Reported per camera count:

* aggregate FPS = posed streaming frames of all cameras / wall time, and FPS per camera;
* latency per camera: p50 / p99 over every camera's frames of the time from the start of the round that took
  the frame in to the end of the round that returned its decoded result (unpipelined: that round's wall time;
  pipelined: up to the end of the next round; in a node a frame may also wait up to one round plus
  ``batch.max_wait_ms`` in its queue);
* GPU memory: the weights (once), the N cameras' KV regions of the one shared pool, the camera histories,
  and the peak allocated over the run (CUDA only; on CPU the weights and pool bytes).
* (issue 22) "x single": the aggregate over one camera on the single-stream path (`StreamingSession.push`,
  same configuration, same process, same frame counts), measured after the camera counts unless
  ``--no-single``; "x single overlapped": over `StreamingSession.push_overlapped` (the node's one-camera
  path on CUDA, issue 22), measured right after. Use ``--warmup`` >= the window (64) so that the timed
  frames see a full window.

The sessions use the node's defaults on CUDA: CUDA graphs and compiled blocks (``--no-compile-blocks``: the
graphs alone; ``--cache-dir``: the compile cache). ``--max-batch 1`` runs every camera's frame as its own
graphed single step instead of one batched step (`batch.max_batch` of the node). Batched steps replay CUDA
graphs per batch size (issue 33); ``--batch-graphs off`` runs them eagerly (the path before issue 33),
``both`` runs every camera count > 1 both ways in the same process (eager first), for a before/after.
``--overlap`` (issue 33): ``on`` runs the rounds as the node does by default on CUDA (`inference.overlap`:
``run_round(..., overlap=True)``, the one-deep pipeline of rounds; one camera: `push_overlapped`), ``off``
one synchronous round at a time, ``both`` every camera count both ways (unpipelined first).
Each row also carries the latency target of issue 33: p99 <= cameras x (one camera's p50) + 10 ms.

The anchor phase and ``--warmup`` streaming rounds per camera count are not timed. Re-anchors (every
``--max-stored-frames`` keyframes) are timed: they are part of a long stream. Model: random weights in the
device's precision policy (bf16 aggregator on CUDA), frames: random uint8 images of ``--height`` x
``--width`` (518 x 378 = the network size, no resize). Usage (docs/benchmarks.md)::

    python benchmarks/multi_camera.py --device cuda --preset lingbot-map --backend flashinfer --frames 300
    python benchmarks/multi_camera.py --device cuda --frames 60 --warmup 70 --overlap both  # issue 33
    python benchmarks/multi_camera.py --device cpu --preset tiny --height 28 --width 56 --frames 4 \\
        --cameras 1,2 --anchors 2 --window 2 --max-window 4 --warmup 1       # CPU smoke
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
from e2e import engine, random_frames, synchronize
from results import record

from lingbot_map_ros.cache.backends import BACKENDS
from lingbot_map_ros.engine.builder import EngineSpec, build_engine
from lingbot_map_ros.engine.config import DEFAULT_MAX_WINDOW, DEFAULT_SLIDING_WINDOW, SessionConfig
from lingbot_map_ros.engine.stream.multi_stream import BatchConfig
from lingbot_map_ros.model.graphed import compile_cache_dir

GIB = 2**30


@dataclass
class CameraRun:
    """One camera count: throughput, per-camera latency and memory (GiB; None where not measured)."""

    cameras: int
    backend: str
    frames_per_camera: int
    wall_s: float
    p50_ms: float
    p99_ms: float
    model_gib: float
    pool_gib: float
    history_gib: float
    peak_gib: float | None
    batches: dict[int, int]
    batch_graphs: bool = True
    overlap: bool = False

    @property
    def aggregate_fps(self) -> float:
        return self.cameras * self.frames_per_camera / self.wall_s

    @property
    def camera_fps(self) -> float:
        return self.frames_per_camera / self.wall_s


def session_config(args: argparse.Namespace) -> SessionConfig:
    """The streaming policy of every camera (and of the single-stream baseline)."""
    return SessionConfig(
        scale_frames=args.anchors,
        sliding_window=args.window,
        max_window=args.max_window,
        keyframe_interval=args.keyframe_interval,
        image_width=args.width,
        max_stored_frames=args.max_stored_frames,
        backend=args.backend,
        cuda_graphs=not args.no_cuda_graphs,
        compile_blocks=args.compile_blocks,
    )


def sessions(model: torch.nn.Module, args: argparse.Namespace, names: tuple[str, ...]) -> object:
    """A `MultiStreamSession` of cameras `names` over `model`; no names: the `StreamingSession` of a set of
    one camera."""
    batch = BatchConfig(max_batch=args.max_batch)
    spec = EngineSpec(session=session_config(args), cameras=names or ("",), batch=batch)
    cameras = build_engine(spec, model)
    return cameras if names else cameras.only


def run_single(model: torch.nn.Module, args: argparse.Namespace, overlapped: bool = False) -> float:
    """FPS of one camera on the single-stream path (`StreamingSession.push`, or `push_overlapped`), timed as
    the rounds are."""
    session = sessions(model, args, ())
    push = session.push_overlapped if overlapped else session.push
    frames = random_frames(args.distinct_frames, (args.height, args.width), seed=0)
    for i in range(args.anchors + args.warmup):
        push(frames[i % len(frames)], meta=i)
    synchronize(model.device)
    start = time.perf_counter()
    for i in range(args.frames):
        push(frames[i % len(frames)], meta=i)
    synchronize(model.device)
    fps = args.frames / (time.perf_counter() - start)
    session.flush()
    return fps


def run_cameras(
    model: torch.nn.Module,
    args: argparse.Namespace,
    cameras: int,
    model_gib: float,
    graphs: bool = True,
    overlap: bool = False,
) -> CameraRun:
    device = model.device
    config = session_config(args)
    names = [f"cam{i}" for i in range(cameras)]
    multi = sessions(model, args, tuple(names))
    multi.batch_graphs = graphs
    feeds = [random_frames(args.distinct_frames, (args.height, args.width), seed=i) for i in range(cameras)]
    rounds = iter(range(10**9))
    started: dict[int, float] = {}  # round (= every camera's meta) -> its start

    def round_() -> list[float]:
        """One frame of every camera; each result's latency (s): its round's start -> now."""
        index = next(rounds)
        frames = {name: (feed[index % len(feed)], index) for name, feed in zip(names, feeds, strict=True)}
        started[index] = time.perf_counter()
        out = multi.run_round(frames, overlap=overlap)
        end = time.perf_counter()
        if out.errors:
            raise RuntimeError(f"camera step failed: {out.errors}")
        return [end - started[r.meta] for results in out.results.values() for r in results]

    for _ in range(args.anchors + args.warmup):
        round_()
    synchronize(device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    latencies = []
    start = time.perf_counter()
    for _ in range(args.frames):
        latencies += round_()
    synchronize(device)
    wall = time.perf_counter() - start
    for name in names:  # the last round's frames in flight (pipelined): out of the timing
        multi.flush(name)
    if args.profile_rounds and device.type == "cuda":
        try:
            label = f"{cameras} cameras, batch graphs {graphs}, pipelined {overlap}"
            profile(round_, args.profile_rounds, label)
        except Exception as exc:  # noqa: BLE001 - a diagnostic: the measurement above stands
            print(f"profile failed: {exc!r}")
    # camera-head K/V per camera: 2 x passes x blocks x (capacity + 1) x 2C float32 (model/camera_history.py)
    c = model.config
    history = cameras * 2 * c.camera_num_iterations * c.camera_trunk_depth * 2 * c.embed_dim * 4
    history *= config.effective_camera_history + 1
    # a set of one camera runs the single-stream path: its own KV pool, no batched steps
    pool = multi.pool_stats() or {
        "pool_bytes": multi.stats(names[0]).cache.kv_cache.pool_bytes,
        "batches": {},
    }
    run = CameraRun(
        cameras=cameras,
        backend=args.backend,
        frames_per_camera=args.frames,
        wall_s=wall,
        p50_ms=1e3 * float(np.percentile(latencies, 50)),
        p99_ms=1e3 * float(np.percentile(latencies, 99)),
        model_gib=model_gib,
        pool_gib=pool["pool_bytes"] / GIB,
        history_gib=history / GIB,
        peak_gib=torch.cuda.max_memory_allocated(device) / GIB if device.type == "cuda" else None,
        batches=pool["batches"],
        batch_graphs=graphs and cameras > 1,
        overlap=overlap,
    )
    return run


def profile(round_: object, rounds: int, label: str) -> None:
    """GPU kernel time vs wall time over `rounds` rounds (torch.profiler), and the costliest kernels."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    with torch_profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        start = time.perf_counter()
        for _ in range(rounds):
            round_()
        torch.cuda.synchronize()
        wall_ms = 1e3 * (time.perf_counter() - start) / rounds
    kernels = [e for e in prof.key_averages() if e.device_time_total > 0 and e.device_type.name == "CUDA"]
    gpu_ms = sum(e.device_time_total for e in kernels) / 1e3 / rounds
    print(f"profile {label}: wall {wall_ms:.1f} ms/round, GPU kernels {gpu_ms:.1f} ms/round")
    for e in sorted(kernels, key=lambda e: -e.device_time_total)[:8]:
        print(f"  {e.device_time_total / 1e3 / rounds:7.2f} ms/round  {e.count // rounds:5d}x  {e.key[:90]}")


def print_table(runs: list[CameraRun], singles: dict[str, float] | None) -> None:
    base = runs[0].aggregate_fps if runs else float("nan")
    for path, fps in (singles or {}).items():
        print(f"one camera on the single-stream path (StreamingSession.{path}): {fps:.2f} FPS")
    print(
        "| cameras | backend | batched steps | rounds | aggregate FPS | x 1 camera | x single (push / "
        "overlapped) | FPS per camera | p50 ms | p99 ms per camera | p99 target ms | weights GiB "
        "| KV pool GiB | camera histories GiB | peak allocated GiB | batched steps (size: n) |"
    )
    print("|" + "---|" * 16)
    one_p50 = runs[0].p50_ms if runs else float("nan")
    for r in runs:
        peak = "-" if r.peak_gib is None else f"{r.peak_gib:.2f}"
        single = " / ".join(f"{r.aggregate_fps / fps:.2f}" for fps in (singles or {}).values()) or "-"
        mode = "-" if r.cameras == 1 else ("graphs" if r.batch_graphs else "eager")
        print(
            f"| {r.cameras} | {r.backend} | {mode} | {'pipelined' if r.overlap else 'sync'} "
            f"| {r.aggregate_fps:.2f} | {r.aggregate_fps / base:.2f} "
            f"| {single} | {r.camera_fps:.2f} | {r.p50_ms:.1f} | {r.p99_ms:.1f} "
            f"| {p99_target(r, one_p50):.1f} | {r.model_gib:.2f} | {r.pool_gib:.2f} | {r.history_gib:.3f} "
            f"| {peak} | {r.batches} |"
        )


def p99_target(run: CameraRun, one_camera_p50_ms: float) -> float:
    """Issue 33's bound on a camera's p99 latency: cameras x one camera's p50 + 10 ms."""
    return run.cameras * one_camera_p50_ms + 10.0


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--preset", default="lingbot-map", choices=("lingbot-map", "tiny"))
    parser.add_argument("--backend", default="auto", choices=BACKENDS)
    parser.add_argument("--cameras", default="1,2,4", help="camera counts, comma-separated")
    parser.add_argument("--frames", type=int, default=300, help="timed streaming frames per camera")
    parser.add_argument("--warmup", type=int, default=10, help="untimed streaming rounds after the anchors")
    parser.add_argument("--height", type=int, default=378)
    parser.add_argument("--width", type=int, default=518)
    parser.add_argument("--anchors", type=int, default=8)
    parser.add_argument("--window", type=int, default=DEFAULT_SLIDING_WINDOW)
    parser.add_argument("--max-window", type=int, default=DEFAULT_MAX_WINDOW)
    parser.add_argument("--keyframe-interval", type=int, default=1)
    parser.add_argument("--max-stored-frames", type=int, default=320)
    parser.add_argument("--no-cuda-graphs", action="store_true", help="eager single-camera steps too")
    parser.add_argument(
        "--compile-blocks", action=argparse.BooleanOptionalAction, default=None, help="default: on CUDA"
    )
    parser.add_argument("--cache-dir", default="", help="torch.compile cache (model.compile_cache_dir)")
    parser.add_argument("--max-batch", type=int, default=8, help="batch.max_batch")
    parser.add_argument(
        "--batch-graphs",
        default="on",
        choices=("on", "off", "both"),
        help="batched steps as CUDA graphs (on), eager (off), or both ways per camera count (both)",
    )
    parser.add_argument(
        "--overlap",
        default="on",
        choices=("on", "off", "both"),
        help="rounds pipelined one deep (on: the node's CUDA default), synchronous (off), or both ways",
    )
    parser.add_argument("--no-single", action="store_true", help="no single-stream baseline rows")
    parser.add_argument(
        "--profile-rounds", type=int, default=0, help="after each timing, profile this many rounds (CUDA)"
    )
    parser.add_argument("--distinct-frames", type=int, default=8, help="random frames cycled per camera")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, help="write the runs here")
    parser.add_argument("--record", type=Path, help="append the runs to this results file (results.py)")
    args = parser.parse_args()

    device = torch.device(args.device)
    if args.compile_blocks is None:
        args.compile_blocks = device.type == "cuda"  # the node's default (model.compile_blocks)
    if args.compile_blocks:
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(compile_cache_dir(args.cache_dir))  # this entry point's
    torch.set_grad_enabled(False)
    model = engine(args, "fast").model  # random weights made on the device (benchmarks/e2e.py)
    weights = sum(p.numel() * p.element_size() for p in model.parameters()) / GIB
    print(
        f"device {device}, preset {args.preset}, {args.height}x{args.width}, backend {args.backend}, "
        f"compiled blocks {args.compile_blocks}, max batch {args.max_batch}"
    )
    ways = {"on": (True,), "off": (False,), "both": (False, True)}
    modes = ways[args.batch_graphs]
    runs = []
    for cameras in args.cameras.split(","):
        for graphs in modes if int(cameras) > 1 else modes[-1:]:
            for overlap in ways[args.overlap]:
                runs.append(run_cameras(model, args, int(cameras), weights, graphs, overlap))
                print(
                    f"{cameras} cameras, batch graphs {graphs}, pipelined {overlap}: "
                    f"{runs[-1].aggregate_fps:.2f} FPS",
                    flush=True,
                )
                gc.collect()  # the previous cameras' pool and histories go before the next count allocates
                if device.type == "cuda":
                    torch.cuda.empty_cache()
    # last: whatever the first session of the process pays once (compilation, cuDNN plans) is paid by then
    singles = None
    if not args.no_single:
        singles = {"push": run_single(model, args), "push_overlapped": run_single(model, args, True)}
    single_fps = singles["push"] if singles else None
    overlapped_fps = singles["push_overlapped"] if singles else None
    print_table(runs, singles)
    rows = [
        {
            **asdict(r),
            "aggregate_fps": r.aggregate_fps,
            "camera_fps": r.camera_fps,
            "single_stream_fps": single_fps,
            "vs_single": None if single_fps is None else r.aggregate_fps / single_fps,
            "single_overlapped_fps": overlapped_fps,
            "vs_single_overlapped": None if overlapped_fps is None else r.aggregate_fps / overlapped_fps,
            "p99_target_ms": p99_target(r, runs[0].p50_ms),
            "compile_blocks": args.compile_blocks,
            "max_batch": args.max_batch,
        }
        for r in runs
    ]
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(rows, indent=2))
    if args.record:
        record(args.record, {"backend": args.backend, "rows": rows}, args.device)


if __name__ == "__main__":
    main()
