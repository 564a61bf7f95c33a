"""Through the node over DDS: a camera at 30 / 60 Hz into the `lingbot_map` node, pose latency and rate.

The node runs as a child process with its default parameters (model `lingbot-map`, random weights unless
--checkpoint, CUDA graphs + compiled blocks, warm-up at 518x378 during configure, autostart) plus the ones
given with --set. This process is the camera and the listener: one publisher of sensor_msgs/Image (518x378
rgb8, sensor-data QoS: best effort, keep last 5) at each rate of --rates, stamped with the wall clock at
publication, and subscribers of ~/odometry, /tf and /diagnostics. For each rate: --settle-s seconds
unmeasured (the window fills: 72 keyframes at keyframe interval 1), then --seconds measured:

* FPS posed: odometry messages per second; dropped: frames published in the window without odometry;
* latency image stamp -> odometry arrival and -> /tf arrival (p50 / p90 / p99, ms);
* GPU memory of the node (allocated / peak allocated / reserved, from /diagnostics `session.gpu_memory_gib`);
* the loop closer's counters at the end of the window (/diagnostics `loop_closure.*`: keyframes, candidates =
  verification passes, verified, rejected; empty with `loop_closure.enabled` false);
* re-anchors (issue 31): how many in the window (`session.reanchors_total`) and the longest any frame waited
  for re-anchor work (`reanchor.wait_max_ms`: the largest `session.timings_ms.reanchor.max` /diagnostics
  reported during the window; each covers the last 100 frames that had such work, so every such frame of
  the window is in it, and possibly a few from just before it).

Start-up: process start -> first odometry (the camera publishes from the start; frames before the node is
active are lost), and the node's configure line (warm-up seconds). Usage (docs/benchmarks.md)::

    python benchmarks/node_e2e.py --rates 30,60 --seconds 20 --out /tmp/node_e2e
    python benchmarks/node_e2e.py --set model.preset=tiny --set model.device=cpu --set model.image_width=56 \\
        --width 74 --height 42 --rates 10 --seconds 3 --settle-s 3          # CPU smoke

Prints a table and writes node_e2e.json (and node_e2e.log, the node's output) to --out.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from pathlib import Path

import numpy as np
from node_child import REPO, parameter_overrides, thread_cpu, thread_shares, use_isolated_dds

from lingbot_map_ros.tools.node_process import NodeProcess

NODE = "lingbot_map"
#: `--executor single`: the node's main with rclpy's SingleThreadedExecutor patched in (node.py unchanged).
SINGLE_EXECUTOR_NODE = (
    "import sys, rclpy.executors as e\n"
    "e.MultiThreadedExecutor = lambda num_threads=None, **k: e.SingleThreadedExecutor(**k)\n"
    "from lingbot_map_ros.ros.node import main\n"
    "sys.exit(main())\n"
)


def percentiles(values: list[float]) -> dict[str, float]:
    if not values:
        return {"p50": float("nan"), "p90": float("nan"), "p99": float("nan"), "count": 0}
    a = np.asarray(values) * 1e3
    return {
        "p50": float(np.percentile(a, 50)),
        "p90": float(np.percentile(a, 90)),
        "p99": float(np.percentile(a, 99)),
        "count": len(values),
    }


def main(argv: list[str] | None = None) -> int:
    formatter = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=formatter)
    parser.add_argument("--rates", default="30,60", help="camera rates in Hz, comma-separated, in order")
    parser.add_argument("--seconds", type=float, default=20.0, help="measured seconds per rate")
    parser.add_argument("--settle-s", type=float, default=8.0, help="unmeasured seconds before each rate")
    parser.add_argument("--width", type=int, default=518)
    parser.add_argument("--height", type=int, default=378)
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", help="node parameter")
    parser.add_argument(
        "--executor",
        choices=("node", "single"),
        default="node",
        help="single: run the node with rclpy's SingleThreadedExecutor instead of its MultiThreadedExecutor "
        "(patched in at start, node.py unchanged): an experiment on the executor's cost",
    )
    parser.add_argument("--segments", type=int, default=1, help="also report latency per time segment")
    parser.add_argument("--start-timeout-s", type=float, default=300.0)
    parser.add_argument("--out", type=Path, default=REPO / "output" / "node_e2e")
    parser.add_argument("--record", type=Path, help="append the report to this results file (results.py)")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)

    env = use_isolated_dds()
    params = {"model.warmup_image_size": f"{args.width}x{args.height}", **parameter_overrides(args.set)}

    import rclpy
    from builtin_interfaces.msg import Time
    from diagnostic_msgs.msg import DiagnosticArray
    from nav_msgs.msg import Odometry
    from rclpy.context import Context
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.qos import QoSProfile, ReliabilityPolicy, qos_profile_sensor_data
    from sensor_msgs.msg import Image
    from std_msgs.msg import Header

    from lingbot_map_ros.ros.conversions import rgb_to_image

    try:
        from tf2_msgs.msg import TFMessage
    except ImportError:
        TFMessage = None

    script = None
    if args.executor == "single":
        script = args.out / "single_executor_node.py"
        script.write_text(SINGLE_EXECUTOR_NODE)
    log_path = args.out / "node_e2e.log"
    process_start = time.monotonic()
    proc = NodeProcess.start(log_path, params, name=NODE, script=script, env=env)

    context = Context()
    rclpy.init(context=context)
    client = rclpy.create_node("node_e2e_client", context=context)
    lock = threading.Lock()
    odometry: list[tuple[int, float]] = []  # (stamp ns, arrival wall s)
    tf: list[tuple[int, float]] = []
    diagnostics: dict[str, str] = {}
    reanchor_samples: list[tuple[int, float, int]] = []  # (arrival ns, reanchor stage max ms, reanchors)

    def stamp_ns(header: Header) -> int:
        return header.stamp.sec * 1_000_000_000 + header.stamp.nanosec

    def on_odometry(msg: Odometry) -> None:
        now = time.time()
        with lock:
            odometry.append((stamp_ns(msg.header), now))

    def on_tf(msg: object) -> None:
        now = time.time()
        with lock:
            for t in msg.transforms:
                if t.header.frame_id == "map":
                    tf.append((stamp_ns(t.header), now))

    def on_diagnostics(msg: DiagnosticArray) -> None:
        for status in msg.status:
            if status.name.endswith(": mapping"):
                values = {kv.key: kv.value for kv in status.values}
                with lock:
                    diagnostics.clear()
                    diagnostics.update(values)
                    if "session.timings_ms.reanchor.max" in values:
                        reanchor_samples.append(
                            (
                                time.time_ns(),
                                float(values["session.timings_ms.reanchor.max"]),
                                int(values.get("session.reanchors_total", 0)),
                            )
                        )

    reliable = QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE)
    client.create_subscription(Odometry, f"/{NODE}/odometry", on_odometry, reliable)
    if TFMessage is not None:
        client.create_subscription(TFMessage, "/tf", on_tf, reliable)
    client.create_subscription(DiagnosticArray, "/diagnostics", on_diagnostics, reliable)
    pub = client.create_publisher(Image, "/image", qos_profile_sensor_data)
    executor = SingleThreadedExecutor(context=context)
    executor.add_node(client)
    spinner = threading.Thread(target=executor.spin, daemon=True)
    spinner.start()

    rng = np.random.default_rng(0)
    shape = (args.height, args.width, 3)
    messages = [
        rgb_to_image(rng.integers(0, 256, shape, dtype=np.uint8), Header(frame_id="cam")) for _ in range(8)
    ]
    published: list[int] = []  # stamps (ns) of the frames published
    stop = threading.Event()
    rate = {"hz": 30.0}

    def camera() -> None:
        next_t = time.monotonic()
        i = 0
        while not stop.is_set():
            now_ns = time.time_ns()
            msg = messages[i % len(messages)]
            msg.header.stamp = Time(sec=now_ns // 1_000_000_000, nanosec=now_ns % 1_000_000_000)
            pub.publish(msg)
            with lock:
                published.append(now_ns)
            i += 1
            next_t += 1.0 / rate["hz"]
            delay = next_t - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            else:
                next_t = time.monotonic()

    report: dict = {"params": params, "executor": args.executor, "rates": {}}
    report["image"] = f"{args.width}x{args.height} rgb8"
    rates = [float(r) for r in args.rates.split(",")]
    rate["hz"] = rates[0]
    cam = threading.Thread(target=camera, daemon=True)
    cam.start()
    try:
        deadline = time.monotonic() + args.start_timeout_s
        while True:
            with lock:
                first = odometry[0][1] if odometry else None
            if first is not None:
                break
            if not proc.alive() or time.monotonic() > deadline:
                tail = proc.log_tail(30)
                raise SystemExit(f"no odometry (node exit {proc.proc.poll()}); log tail:\n{tail}")
            time.sleep(0.01)
        report["process_start_to_first_pose_s"] = time.monotonic() - process_start
        print(f"first pose {report['process_start_to_first_pose_s']:.1f} s after the node process started")
        for hz in rates:
            rate["hz"] = hz
            time.sleep(args.settle_s)
            with lock:
                t0_ns, n_pub0, n_odo0, n_tf0 = time.time_ns(), len(published), len(odometry), len(tf)
            cpu0 = thread_cpu(proc.pid)
            time.sleep(args.seconds)
            threads = thread_shares(cpu0, thread_cpu(proc.pid), args.seconds)[:8]
            with lock:
                t1_ns = time.time_ns()
                pub_stamps = set(published[n_pub0:])
                window_odo = [o for o in odometry[n_odo0:] if o[0] in pub_stamps]
                window_tf = [t for t in tf[n_tf0:] if t[0] in pub_stamps]
                diag = dict(diagnostics)
            # frames published in the window whose odometry arrived (possibly just after the window)
            time.sleep(0.5)
            with lock:
                posed = {o[0] for o in odometry[n_odo0:]} & pub_stamps
                samples = [r for r in reanchor_samples if t0_ns <= r[0] <= t1_ns + 500_000_000]
            latencies = [o[1] - o[0] / 1e9 for o in window_odo]
            duration = (t1_ns - t0_ns) / 1e9
            result = {
                "published": len(pub_stamps),
                "published_hz": len(pub_stamps) / duration,
                "fps_posed": len(window_odo) / duration,
                "dropped": len(pub_stamps) - len(posed),
                "odometry_latency_ms": percentiles(latencies),
                "odometry_latency_max_ms": 1e3 * max(latencies, default=float("nan")),
                "frames_over_45ms": sum(1 for latency in latencies if latency > 0.045),
                "reanchor": {
                    "reanchors": samples[-1][2] - samples[0][2] if samples else 0,
                    "wait_max_ms": max((r[1] for r in samples), default=None),
                    "samples": len(samples),
                },
                "tf_latency_ms": percentiles([t[1] - t[0] / 1e9 for t in window_tf]),
                "gpu_memory_gib": {k.rsplit(".", 1)[1]: v for k, v in diag.items() if "gpu_memory_gib" in k},
                "node_timings_mean_ms": {
                    k.split(".")[2]: v
                    for k, v in diag.items()
                    if k.startswith("session.timings_ms.") and k.endswith(".mean")
                },
                "diagnostics_dropped_total": diag.get("frames_dropped"),
                "loop_closure": {k: v for k, v in diag.items() if k.startswith("loop_closure.")},
                "node_cpu_total": round(sum(t["cpu"] for t in threads), 3),
                "node_busiest_threads": threads,
            }
            if args.segments > 1:  # latency over time: first segment = first full-window frames
                edges = np.linspace(t0_ns, t1_ns, args.segments + 1)
                result["segments"] = [
                    {
                        "from_s": (lo - t0_ns) / 1e9,
                        "poses_before": n_odo0 + sum(1 for o in window_odo if o[0] < lo),
                        **percentiles([o[1] - o[0] / 1e9 for o in window_odo if lo <= o[0] < hi]),
                    }
                    for lo, hi in zip(edges[:-1], edges[1:], strict=True)
                ]
            report["rates"][f"{hz:g}"] = result
            lat = result["odometry_latency_ms"]
            print(
                f"{hz:g} Hz: {result['fps_posed']:.2f} FPS posed of {result['published_hz']:.1f} published, "
                f"dropped {result['dropped']}, odometry latency p50/p90/p99 {lat['p50']:.1f}/"
                f"{lat['p90']:.1f}/{lat['p99']:.1f} ms (max {result['odometry_latency_max_ms']:.1f}, "
                f"{result['frames_over_45ms']} over 45 ms), tf p99 {result['tf_latency_ms']['p99']:.1f} ms, "
                f"re-anchors {result['reanchor']}, gpu {result['gpu_memory_gib']}, "
                f"node threads (cores): {threads[:4]}",
                flush=True,
            )
        report["diagnostics"] = dict(diagnostics)
    finally:
        stop.set()
        cam.join(2)
        report["node_exit_code"] = proc.stop(30)
        executor.shutdown(timeout_sec=2)
        rclpy.try_shutdown(context=context)
    configured = [line for line in log_path.read_text(errors="replace").splitlines() if "configured:" in line]
    report["configure_line"] = configured[-1] if configured else None
    (args.out / "node_e2e.json").write_text(json.dumps(report, indent=1))
    if args.record:
        from results import record  # benchmarks/results.py

        record(args.record, {k: v for k, v in report.items() if k != "diagnostics"}, "cuda")
    print(json.dumps({k: v for k, v in report.items() if k != "diagnostics"}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
