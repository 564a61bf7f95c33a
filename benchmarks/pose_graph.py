"""Time of a Sim(3) pose-graph optimisation (engine/loop/pose_graph.py, `PoseGraph.optimize`), CPU.

A 1,000-keyframe trajectory (three laps of a 4 x 6 m ellipse) is measured with drift (0.3 deg and 0.5 % of
scale per keyframe step) and closed by 20 verified loop edges between laps (Cauchy kernel). Rows:

* ``closer``: as the loop closer runs it — keyframes arrive one by one (placed by the previous solution and
  their stream edge), each loop edge is followed by `PoseGraph.spread` (the loop's correction spread since
  the previous loop) and `optimize` from there; the time is per loop (median / p90 / max over the 20 loops x
  ``--repeats``), ``last`` is the pass at 1,000 keyframes and 20 loops;
* ``cold``: everything at once from the drifting odometry (nothing corrected yet: the worst case);
* ``isam2``: for comparison, NOT what the closer runs: gtsam's incremental iSAM2 (default settings) fed
  keyframe by keyframe, three updates after each loop edge; time per loop update.

``error`` is the graph's final (robust) error, ``vs optimum`` its excess over the batch optimum (Levenberg-
Marquardt from the odometry to 1e-10), relative. Printed as a table, written as JSON to
benchmarks/results/. Usage::

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
from lingbot_map_ros.engine.loop.similarity import between, compose, to_gtsam


def _yaw(angle: float) -> np.ndarray:
    c, s = np.cos(angle), np.sin(angle)
    return np.array([[c, 0.0, s], [0.0, 1.0, 0.0], [-s, 0.0, c]])


def build(keyframes: int, loops: int) -> PoseGraph:
    """The benchmark graph (module doc), nodes at the drifting odometry, every edge added."""
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
    return graph


def edges_by_end(graph: PoseGraph) -> dict[int, list[Edge]]:
    """The edges of `graph` keyed by their newer node (the order a stream delivers them)."""
    by_b: dict[int, list[Edge]] = {}
    for edge in graph.edges:
        by_b.setdefault(edge.b, []).append(edge)
    return by_b


def optimum(keyframes: int, loops: int) -> float:
    """The batch optimum's error: Levenberg-Marquardt from the odometry to a 1e-10 tolerance."""
    graph = build(keyframes, loops)
    params = gtsam.LevenbergMarquardtParams()
    params.setRelativeErrorTol(1e-10)
    params.setAbsoluteErrorTol(1e-10)
    params.setMaxIterations(500)
    factors, values = gtsam.NonlinearFactorGraph(), gtsam.Values()
    factors.add(graph.prior_factor())
    for edge in graph.edges:
        factors.add(graph.edge_factor(edge))
    for key, pose in graph.poses.items():
        values.insert(key, to_gtsam(pose))
    values = gtsam.LevenbergMarquardtOptimizer(factors, values, params).optimize()
    return graph.error(values)


def measure_closer(keyframes: int, loops: int, repeats: int) -> dict[str, float]:
    """The closer's path (module doc): ms per loop optimisation, wall and CPU."""
    reference = build(keyframes, loops)
    by_b = edges_by_end(reference)
    times, cpu, iterations, last, last_cpu = [], [], [], [], []
    for _ in range(repeats):
        graph = PoseGraph(reference.config)
        graph.add_node(0, reference.poses[0])
        last_loop = None
        for key in range(1, keyframes):
            step = next(e for e in by_b[key] if not e.loop)
            graph.add_node(key, compose(graph.poses[key - 1], step.measured))
            graph.add_edge(step)
            for edge in (e for e in by_b[key] if e.loop):
                graph.add_edge(edge)
                graph.spread(compose(graph.poses[edge.a], edge.measured), key, last_loop)
                last_loop = key
                start, start_cpu = time.perf_counter(), time.process_time()
                result = graph.optimize()
                cpu.append((time.process_time() - start_cpu) * 1e3)
                times.append((time.perf_counter() - start) * 1e3)
                iterations.append(result.iterations)
        last.append(times[-1])
        last_cpu.append(cpu[-1])
    return {
        "cpu_median_ms": float(np.median(cpu)),
        "median_ms": float(np.median(times)),
        "p90_ms": float(np.percentile(times, 90)),
        "max_ms": float(np.max(times)),
        "last_median_ms": float(np.median(last)),
        "last_cpu_median_ms": float(np.median(last_cpu)),
        "iterations": float(np.median(iterations)),
        "final_error": float(result.error),
    }


def measure_isam2(keyframes: int, loops: int) -> dict[str, float]:
    """iSAM2 fed keyframe by keyframe; CPU ms of each update that carried a loop edge (+ 2 extra updates)."""
    graph = build(keyframes, loops)
    isam = gtsam.ISAM2(gtsam.ISAM2Params())
    by_b = edges_by_end(graph)
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
        "last_median_ms": float("nan"),
        "last_cpu_median_ms": float(times[-1]),
        "iterations": 3.0,
        "final_error": float(error),
    }


def measure_cold(keyframes: int, loops: int, repeats: int) -> dict[str, float]:
    """One `optimize` of the whole graph from the drifting odometry."""
    times, cpu, iterations, errors = [], [], [], []
    for _ in range(repeats):
        graph = build(keyframes, loops)
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
        "last_median_ms": float(np.median(times)),
        "last_cpu_median_ms": float(np.median(cpu)),
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
    best = optimum(args.keyframes, args.loops)
    rows = {
        "closer": measure_closer(args.keyframes, args.loops, args.repeats),
        "cold": measure_cold(args.keyframes, args.loops, args.repeats),
        "isam2": measure_isam2(args.keyframes, args.loops),
    }
    for row in rows.values():
        row["vs_optimum"] = row["final_error"] / best - 1.0
    load = os.getloadavg()
    print(
        f"pose graph: {args.keyframes} keyframes, {args.loops} loop edges, {args.repeats} repeats (ms; wall, "
        f"and the process's CPU time: the machine is shared; load average {load[0]:.1f} / {load[1]:.1f}); "
        f"batch optimum error {best:.4f}"
    )
    print(
        f"{'row':<7} {'median':>7} {'p90':>7} {'max':>7} {'cpu med':>7} {'last':>7} {'last cpu':>8} "
        f"{'iters':>5} {'error':>9} {'vs optimum':>10}"
    )
    for name, row in rows.items():
        print(
            f"{name:<7} {row['median_ms']:7.1f} {row['p90_ms']:7.1f} {row['max_ms']:7.1f} "
            f"{row['cpu_median_ms']:7.1f} {row['last_median_ms']:7.1f} {row['last_cpu_median_ms']:8.1f} "
            f"{row['iterations']:5.0f} {row['final_error']:9.4f} {row['vs_optimum']:10.2e}"
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
                "load_average": load,
                "optimum_error": best,
                "rows": rows,
            },
            indent=2,
        )
        + "\n"
    )
    print(f"json: {args.out}")


if __name__ == "__main__":
    main()
