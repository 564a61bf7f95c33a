"""Time of one Sim(3) pose-graph optimisation (engine/loop/pose_graph.py, gtsam Levenberg-Marquardt), CPU.

A 1,000-keyframe trajectory (three laps of a 4 x 6 m ellipse) is measured with drift (0.3 deg and 0.5 % of
scale per keyframe step) and closed by 20 verified loop edges between laps (Cauchy kernel). Two starts:

* ``cold``: from the drifting odometry (the worst case: nothing corrected yet);
* ``online``: as the loop closer runs it — the newest loop's correction spread over the keyframes since the
  previous loop first (`LoopCloser._spread`), so LM starts near the solution.
* ``isam2``: for comparison, NOT what the closer runs: gtsam's incremental iSAM2 fed keyframe by keyframe
  (the same factors), three updates after each loop edge; the time is per loop update (median / p90 / max
  over the 20), the error that of its final estimate.

Printed as a table (median / p90 / max over ``--repeats``), written as JSON to benchmarks/results/. Usage::

    .venv/bin/python benchmarks/pose_graph.py [--keyframes 1000] [--loops 20] [--repeats 10]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import time
from pathlib import Path

import gtsam
import numpy as np

from lingbot_map_ros.engine.geometry import Sim3
from lingbot_map_ros.engine.loop import Edge, EdgeSigma, GraphConfig, PoseGraph
from lingbot_map_ros.engine.loop.similarity import between, compose, interpolate, inverse, to_gtsam


def _yaw(angle: float) -> np.ndarray:
    c, s = np.cos(angle), np.sin(angle)
    return np.array([[c, 0.0, s], [0.0, 1.0, 0.0], [-s, 0.0, c]])


def build(keyframes: int, loops: int, spread: bool) -> PoseGraph:
    """The benchmark graph (module doc); `spread`: the online start."""
    phase = 3 * 2 * np.pi * np.arange(keyframes) / keyframes
    truth = [Sim3(_yaw(p), np.array([2.0 * np.sin(p), 0.0, 3.0 * np.cos(p)])) for p in phase]
    graph = PoseGraph(GraphConfig(max_time_ms=1e4, max_iterations=100))
    pose = truth[0]
    graph.add_node(0, pose)
    rng = np.random.default_rng(0)
    for i in range(1, keyframes):
        step = between(truth[i - 1], truth[i])
        measured = Sim3(
            _yaw(np.radians(0.3) + rng.normal(scale=1e-3)) @ step.rotation, step.translation, 1.005
        )
        pose = compose(pose, measured)
        graph.add_node(i, pose)
        graph.add_edge(Edge(i - 1, i, measured, EdgeSigma(0.01, 0.01, 0.01)))
    per_lap = keyframes // 3
    for j, b in enumerate(np.linspace(per_lap + 10, keyframes - 1, loops).astype(int)):
        a = int(b - per_lap * (1 + (j % 2 and b >= 2 * per_lap + 10)))
        graph.add_edge(Edge(a, int(b), between(truth[a], truth[b]), EdgeSigma(0.005, 0.01, 0.005), loop=True))
        if spread:  # the closer's initial guess: this loop's correction spread since the previous one
            fix = compose(compose(graph.poses[a], between(truth[a], truth[b])), inverse(graph.poses[int(b)]))
            start = (
                0 if j == 0 else int(np.linspace(per_lap + 10, keyframes - 1, loops).astype(int)[j - 1]) + 1
            )
            span = max(int(b) - start, 1)
            for k in range(start, keyframes):
                alpha = min(1.0, (k - start) / span)
                graph.set_pose(k, compose(interpolate(Sim3.identity(), fix, alpha), graph.poses[k]))
    return graph


def measure_isam2(keyframes: int, loops: int) -> dict[str, float]:
    """iSAM2 fed keyframe by keyframe; CPU ms of each update that carried a loop edge (+ 2 extra updates)."""
    graph = build(keyframes, loops, spread=False)
    isam = gtsam.ISAM2(gtsam.ISAM2Params())
    by_b: dict[int, list[Edge]] = {}
    for edge in graph.edges:
        by_b.setdefault(edge.b, []).append(edge)
    times = []
    for key in range(keyframes):
        factors, values = gtsam.NonlinearFactorGraph(), gtsam.Values()
        if key == 0:
            factors.add(graph.prior_factor())
            values.insert(0, to_gtsam(graph.poses[0]))
        else:
            step = next(e for e in by_b[key] if not e.loop)
            values.insert(key, isam.calculateEstimateSimilarity3(key - 1).compose(to_gtsam(step.measured)))
        for edge in by_b.get(key, []):
            factors.add(graph.edge_factor(edge))
        loop = any(e.loop for e in by_b.get(key, []))
        start = time.process_time()
        isam.update(factors, values)
        for _ in range(2 if loop else 0):
            isam.update()
        if loop:
            times.append((time.process_time() - start) * 1e3)
    error = graph.error(isam.calculateEstimate())
    return {
        "cpu_median_ms": float(np.median(times)),
        "median_ms": float("nan"),
        "p90_ms": float(np.percentile(times, 90)),
        "max_ms": float(np.max(times)),
        "iterations": 3.0,
        "final_error": float(error),
    }


def measure(keyframes: int, loops: int, repeats: int, spread: bool) -> dict[str, float]:
    times, cpu, iterations, errors = [], [], [], []
    for _ in range(repeats):
        graph = build(keyframes, loops, spread)
        start, start_cpu = time.perf_counter(), time.process_time()
        result = graph.optimize()
        cpu.append((time.process_time() - start_cpu) * 1e3)
        times.append((time.perf_counter() - start) * 1e3)
        iterations.append(result.iterations)
        errors.append(result.error)
    return {
        "cpu_median_ms": float(np.median(cpu)),
        "median_ms": float(np.median(times)),
        "p90_ms": float(np.percentile(times, 90)),
        "max_ms": float(np.max(times)),
        "iterations": float(np.median(iterations)),
        "final_error": float(np.median(errors)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--keyframes", type=int, default=1000)
    parser.add_argument("--loops", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "pose_graph.json")
    args = parser.parse_args()
    rows: dict[str, dict[str, float]] = {
        name: measure(args.keyframes, args.loops, args.repeats, spread)
        for name, spread in (("cold", False), ("online", True))
    }
    rows["isam2"] = measure_isam2(args.keyframes, args.loops)
    print(
        f"pose graph: {args.keyframes} keyframes, {args.loops} loop edges, {args.repeats} repeats (ms; wall, "
        f"and the process's CPU time: the machine is shared; load {os.getloadavg()[0]:.1f})"
    )
    print(f"{'start':<8} {'median':>8} {'p90':>8} {'max':>8} {'cpu med':>8} {'iters':>6} {'error':>10}")
    for name, row in rows.items():
        print(
            f"{name:<8} {row['median_ms']:8.1f} {row['p90_ms']:8.1f} {row['max_ms']:8.1f} "
            f"{row['cpu_median_ms']:8.1f} "
            f"{row['iterations']:6.0f} {row['final_error']:10.4g}"
        )
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps(
            {
                "date": time.strftime("%Y-%m-%d"),
                "commit": commit,
                "machine": platform.processor() or platform.machine(),
                "keyframes": args.keyframes,
                "loops": args.loops,
                "repeats": args.repeats,
                "rows": rows,
            },
            indent=2,
        )
        + "\n"
    )
    print(f"json: {args.out}")


if __name__ == "__main__":
    main()
