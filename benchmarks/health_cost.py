"""Time of one frame's tracking health (engine/health.py, `TrackingHealth.observe`), CPU: what the node's
pose path pays per frame with `tracking.health` on (the default).

Frames of ``--width`` x ``--height`` (the network size; default the real model's 518 x 378): random RGB,
depth and confidence, a smooth walk; the first 5 of each round are left out (running means, warm-up).
Rounds of ``--frames`` frames are repeated ``--repeats`` times; printed: median / p10 / p90 in ms. Compare
two commits by running it with each tree on PYTHONPATH, interleaved (docs/benchmarks.md "Tracking health
cost")::

    git archive OLD lingbot_map_ros | tar -x -C /tmp/old
    PYTHONPATH=/tmp/old python benchmarks/health_cost.py
    PYTHONPATH=$PWD python benchmarks/health_cost.py
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from lingbot_map_ros.engine.geometry import rigid
from lingbot_map_ros.engine.health import TrackingHealth
from lingbot_map_ros.engine.result import PHASE_STREAMING, FrameResult


def frames(n: int, width: int, height: int, seed: int = 0) -> list[FrameResult]:
    """`n` results of a camera walking 1 cm a frame along x, random image, depth (1-3) and confidence."""
    rng = np.random.default_rng(seed)
    return [
        FrameResult(
            index=i,
            meta=None,
            is_keyframe=True,
            phase=PHASE_STREAMING,
            pose_c2w=rigid(np.eye(3), np.array([0.01 * i, 0.0, 0.0])),
            intrinsics=np.eye(3),
            depth=rng.uniform(1.0, 3.0, (height, width)).astype(np.float32),
            depth_conf=rng.uniform(1.0, 5.0, (height, width)).astype(np.float32),
            rgb=rng.integers(0, 256, (height, width, 3), dtype=np.uint8),
            pose_enc=np.zeros(9, np.float32),
        )
        for i in range(n)
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--width", type=int, default=518)
    parser.add_argument("--height", type=int, default=378)
    parser.add_argument("--frames", type=int, default=40)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    results = frames(args.frames, args.width, args.height)
    times = []
    for _ in range(args.repeats):
        health = TrackingHealth()
        for k, result in enumerate(results):
            start = time.perf_counter()
            health.observe(result)
            if k >= 5:
                times.append(1e3 * (time.perf_counter() - start))
    ms = np.array(times)
    print(
        f"TrackingHealth.observe at {args.width}x{args.height}: median {np.median(ms):.2f} ms, "
        f"p10 {np.percentile(ms, 10):.2f} ms, p90 {np.percentile(ms, 90):.2f} ms (n={len(ms)})"
    )


if __name__ == "__main__":
    main()
