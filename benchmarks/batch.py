"""`lingbot-map-ros batch` throughput: the same bags through 1, 2, ... workers (issue 24).

Renders `--bags` synthetic-scene bags (different texture seeds and start times; cached under `--bags-dir`),
then maps all of them with `tools.batch.run_batch` once per worker count, each time into a fresh output
folder and with a fresh Ray instance (or `--address`), and reports per worker count: wall time of the whole
job (Ray start, model loads, mapping, summaries), frames / s over that wall time, bags / min, the ratio to the
first worker count, and the mean per-bag engine FPS. Prints a table; writes JSON to benchmarks/results/.

    python benchmarks/batch.py                                            # CPU here: tiny, 1 vs 2 workers
    python benchmarks/batch.py --device cuda --preset lingbot-map --gpus-per-worker 1 --workers 1,2,4,8 \\
        --width 518 --scene-width 518 --scene-height 378 --frames 120          # 8 GPUs of one host
    python benchmarks/batch.py --address HEAD:6379 --device cuda --gpus-per-worker 1 --workers 8,16 ...
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from lingbot_map_ros.tools.bags.synthetic_scene import SceneConfig, write_scene_bag
from lingbot_map_ros.tools.batch.command import run_batch
from lingbot_map_ros.tools.batch.pool import BatchConfig
from lingbot_map_ros.tools.run.options import RunConfig, run_session_config

RESULTS = Path(__file__).resolve().parent / "results"


def make_bags(args: argparse.Namespace) -> Path:
    """`--bags` scene bags under `--bags-dir` (reused when already rendered with these settings)."""
    folder = Path(
        args.bags_dir
        or Path(tempfile.gettempdir())
        / (f"lmr_batch_bench_{args.bags}x{args.frames}f_{args.scene_width}x{args.scene_height}")
    )
    for i in range(args.bags):
        bag = folder / f"bag_{i:02d}"
        if not (bag / "metadata.yaml").is_file():
            shutil.rmtree(bag, ignore_errors=True)
            scene = SceneConfig(width=args.scene_width, height=args.scene_height, frames=args.frames, seed=i)
            write_scene_bag(
                scene,
                bag,
                folder / f"{bag.name}.gt.tum",
                start_time_ns=1_700_000_000_000_000_000 + i * 10**12,
            )
    return folder


def measure(args: argparse.Namespace, bags: Path, workers: int, out: Path) -> dict[str, object]:
    options = RunConfig(
        bag=Path(),
        output_dir=Path(),
        preset=args.preset,
        checkpoint=args.checkpoint,
        device=args.device,
        session=run_session_config(image_width=args.width, scale_frames=args.scale_frames),
        threads=args.threads,
    )
    config = BatchConfig(
        inputs=(bags,),
        output=out,
        options=options,
        address=args.address,
        workers=workers,
        gpus_per_worker=args.gpus_per_worker,
        cpus_per_worker=args.cpus_per_worker,
    )
    start = time.perf_counter()
    rows = run_batch(config)
    wall_s = time.perf_counter() - start
    ok = [r for r in rows if r.status == "ok"]
    frames = sum(r.frames for r in ok)
    return {
        "workers": workers,
        "bags": len(rows),
        "ok": len(ok),
        "frames": frames,
        "wall_s": round(wall_s, 2),
        "fps": round(frames / wall_s, 3),
        "bags_per_min": round(60 * len(ok) / wall_s, 2),
        "engine_fps_mean": round(sum(r.fps for r in ok) / len(ok), 3) if ok else None,
        "errors": [r.error for r in rows if r.status != "ok"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--workers", default="1,2", help="comma-separated worker counts")
    parser.add_argument("--bags", type=int, default=8)
    parser.add_argument("--frames", type=int, default=24, help="frames per bag")
    parser.add_argument("--scene-width", type=int, default=128)
    parser.add_argument("--scene-height", type=int, default=96)
    parser.add_argument("--bags-dir", type=Path, default=None, help="where the bags are rendered (cached)")
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--checkpoint", type=Path, default=None)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--width", type=int, default=112, help="network input width")
    parser.add_argument("--scale-frames", type=int, default=8)
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads per worker")
    parser.add_argument("--repeat", type=int, default=1, help="runs of every worker count, interleaved")
    parser.add_argument("--address", default=None, help="Ray cluster (default: a local instance per run)")
    parser.add_argument("--gpus-per-worker", type=float, default=0.0)
    parser.add_argument("--cpus-per-worker", type=float, default=1.0)
    parser.add_argument(
        "--json", type=Path, default=None, help="default: benchmarks/results/batch_<time>.json"
    )
    args = parser.parse_args()

    bags = make_bags(args)
    counts = [int(w) for w in args.workers.split(",")]
    runs = []
    with tempfile.TemporaryDirectory(prefix="lmr_batch_bench_out_") as scratch:
        for repeat in range(args.repeat):  # interleaved, so a change of the machine's load hits every count
            for workers in counts:
                load_before = os.getloadavg()[0]
                out = Path(scratch) / f"w{workers}_r{repeat}"
                runs.append({**measure(args, bags, workers, out), "load_before": round(load_before, 2)})
    print(
        f"\n{args.bags} bags x {args.frames} frames {args.scene_width}x{args.scene_height}, "
        f"preset {args.preset}, width {args.width}, {args.device}\n"
    )
    print("| workers | wall s | frames/s | bags/min | engine FPS per bag (mean) | load before |")
    print("|---|---|---|---|---|---|")
    for run in runs:
        print(
            f"| {run['workers']} | {run['wall_s']} | {run['fps']} | {run['bags_per_min']} | "
            f"{run['engine_fps_mean']} | {run['load_before']} |"
        )
    medians = {w: statistics.median(r["fps"] for r in runs if r["workers"] == w) for w in counts}
    print(
        f"\nmedian frames/s over {args.repeat} run(s): "
        + ", ".join(
            f"{w} worker(s) {fps:.3f} (x{fps / medians[counts[0]]:.2f})" for w, fps in medians.items()
        )
    )
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=Path(__file__).parent
    ).stdout.strip()
    record = {
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "commit": commit,
        "host": platform.node(),
        "cpus": os.cpu_count(),
        "command": " ".join(sys.argv),
        "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "runs": runs,
        "median_fps": {str(w): round(v, 3) for w, v in medians.items()},
        "ratio_to_first": {str(w): round(v / medians[counts[0]], 3) for w, v in medians.items()},
    }
    path = args.json or RESULTS / f"batch_{time.strftime('%Y%m%d_%H%M%S', time.gmtime())}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=2) + "\n")
    print(f"\nJSON: {path}")


if __name__ == "__main__":
    main()
