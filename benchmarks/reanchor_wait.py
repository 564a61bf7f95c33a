"""Per-frame wait for re-anchors (issue 31): one-step re-anchors vs re-anchors prepared beside the stream.

A `StreamingSession` (random weights) streams --frames frames of a panning image, once per value of
--reanchor-steps (`SessionConfig.reanchor_steps`; 0 = the one-step re-anchor at the cache bound), with a
small --max-stored-frames so that a short run crosses several re-anchors. Per frame it records the session's
"reanchor" stage (the time the frame waited for re-anchor work before its own step) and the wall time of
`push` / `push_overlapped`. Prints one table row per setting:

* re-anchors, and frames with re-anchor work per re-anchor;
* the per-frame re-anchor wait: max and median over the frames that had some (ms);
* frame time (push wall time) median / p99 / max over all frames (ms), and the sum of all re-anchor work
  (ms, what the preparation costs in total against the one step).

    python benchmarks/reanchor_wait.py --device cpu --preset tiny --frames 400 --reanchor-steps 0,24
    python benchmarks/reanchor_wait.py --device cuda --preset lingbot-map --frames 1000 \\
        --max-stored-frames 320
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch
from results import record  # benchmarks/results.py

from lingbot_map_ros.engine.builder import EngineSpec, build_engine
from lingbot_map_ros.engine.config import SessionConfig
from lingbot_map_ros.engine.contracts import StreamingModel
from lingbot_map_ros.engine.stream.session import StreamingSession


def panning(n: int, height: int, width: int) -> list[np.ndarray]:
    """``n`` frames of a smooth random texture panning right 2 pixels a frame (views overlap: a camera)."""
    rng = np.random.default_rng(0)
    small = rng.integers(0, 256, (height // 8 + 1, (width + 2 * n) // 8 + 2, 3), dtype=np.uint8)
    big = np.repeat(np.repeat(small, 8, axis=0), 8, axis=1)[:height]
    return [np.ascontiguousarray(big[:, 2 * i : 2 * i + width]) for i in range(n)]


def session_for(
    args: argparse.Namespace, steps: int, model: StreamingModel | None = None
) -> StreamingSession:
    """One camera's session with `--reanchor-steps` value ``steps`` (random weights seeded 0), over
    ``model`` when given (one model for every setting)."""
    config = SessionConfig(
        scale_frames=args.scale_frames,
        image_width=args.image_width,
        max_stored_frames=args.max_stored_frames,
        reanchor_steps=steps,
        device=args.device,
        compile_blocks=False,
    )
    spec = EngineSpec(preset=args.preset, device=args.device, seed=0, session=config)
    return build_engine(spec, model).only


def run(model: StreamingModel, args: argparse.Namespace, steps: int, images: list[np.ndarray]) -> dict:
    session = session_for(args, steps, model)
    if args.device.startswith("cuda"):
        session.warm_up(images[0].shape[:2])
    push = session.push_overlapped if args.push == "overlapped" else session.push
    waits, frame_ms = [], []
    for image in images:
        start = time.perf_counter()
        results = push(image)
        frame_ms.append(1e3 * (time.perf_counter() - start))
        waits += [r.timings_ms["reanchor"] for r in results if "reanchor" in r.timings_ms]
    stats = session.stats()
    frame = np.asarray(frame_ms[args.scale_frames :])  # after the anchor phase
    reanchors = max(stats.reanchors_total, 1)
    return {
        "reanchor_steps": steps,
        "reanchors": stats.reanchors_total,
        "frames_with_work_per_reanchor": len(waits) / reanchors,
        "wait_max_ms": max(waits, default=0.0),
        "wait_median_ms": float(np.median(waits)) if waits else 0.0,
        "work_total_per_reanchor_ms": sum(waits) / reanchors,
        "frame_ms": {
            "p50": float(np.percentile(frame, 50)),
            "p99": float(np.percentile(frame, 99)),
            "max": float(frame.max()),
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--height", type=int, default=378)
    parser.add_argument("--width", type=int, default=518)
    parser.add_argument("--image-width", type=int, default=518, help="network input width")
    parser.add_argument("--scale-frames", type=int, default=8)
    parser.add_argument("--max-stored-frames", type=int, default=64)
    parser.add_argument("--frames", type=int, default=400)
    parser.add_argument("--reanchor-steps", default="0,24", help="comma-separated values to compare")
    parser.add_argument("--push", choices=("sync", "overlapped"), default="overlapped")
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--record", type=Path, help="append the report to this results file (results.py)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    model = session_for(args, 0).model
    images = panning(args.frames, args.height, args.width)
    rows = [run(model, args, int(steps), images) for steps in args.reanchor_steps.split(",")]
    report = {"args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}, "rows": rows}
    print(
        "| reanchor_steps | re-anchors | frames with work / re-anchor | wait max / median ms | "
        "work per re-anchor ms | frame p50 / p99 / max ms |"
    )
    print("|---|---|---|---|---|---|")
    for r in rows:
        f = r["frame_ms"]
        print(
            f"| {r['reanchor_steps']} | {r['reanchors']} | {r['frames_with_work_per_reanchor']:.1f} | "
            f"{r['wait_max_ms']:.1f} / {r['wait_median_ms']:.1f} | {r['work_total_per_reanchor_ms']:.1f} | "
            f"{f['p50']:.1f} / {f['p99']:.1f} / {f['max']:.1f} |"
        )
    if args.out:
        args.out.write_text(json.dumps(report, indent=1))
    if args.record:
        record(args.record, report, args.device)


if __name__ == "__main__":
    main()
