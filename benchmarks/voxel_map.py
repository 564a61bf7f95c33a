"""Cost of `VoxelMap.insert` per frame on this CPU (no model, no ROS): a table of the median and p90 per size.

A slowly panning surface with ~N confident points per frame (the node's map thread inserts one such frame per
keyframe). The speed used to be asserted in a unit test; timings belong here. Usage::

    .venv/bin/python benchmarks/voxel_map.py [--frames 200] [--points 2500,10000,40000] [--voxel-size 0.01]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from lingbot_map_ros.engine.mapping.voxel_map import VoxelMap, VoxelMapConfig


def time_inserts(points: int, frames: int, voxel_size: float, seed: int = 0) -> tuple[list[float], int]:
    """Seconds per `insert` of `frames` frames of ~`points` float32 points [N, 3] + uint8 colours [N, 3]."""
    vm = VoxelMap(VoxelMapConfig(voxel_size=voxel_size, max_points=1_000_000))
    rng = np.random.default_rng(seed)
    cols = max(1, int(round((points / 0.64) ** 0.5)))
    u, v = np.meshgrid(np.linspace(0, 1, cols), np.linspace(0, 0.6, max(1, points // cols)))
    colours = rng.integers(0, 256, size=(u.size, 3), dtype=np.uint8)
    times = []
    for frame in range(frames):
        noise = 0.002 * rng.standard_normal(u.size)
        xyz = np.stack([u.ravel() + 0.005 * frame, v.ravel(), 1 + noise], 1).astype(np.float32)
        start = time.perf_counter()
        vm.insert(xyz, colours)
        times.append(time.perf_counter() - start)
    return times, len(vm)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=200)
    parser.add_argument("--points", default="2500,10000,40000", help="points per frame, comma-separated")
    parser.add_argument("--voxel-size", type=float, default=0.01)
    args = parser.parse_args()
    print("| points per frame | frames | median ms | p90 ms | voxels at the end |")
    print("|---|---|---|---|---|")
    for points in (int(p) for p in args.points.split(",")):
        times, voxels = time_inserts(points, args.frames, args.voxel_size)
        steady = np.asarray(times[min(20, len(times) // 2) :]) * 1e3
        median, p90 = np.median(steady), np.percentile(steady, 90)
        print(f"| {points} | {args.frames} | {median:.2f} | {p90:.2f} | {voxels} |")


if __name__ == "__main__":
    main()
