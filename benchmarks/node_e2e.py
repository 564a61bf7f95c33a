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

Several cameras (issue 33): ``--cameras front,rear`` sets the node's ``cameras`` parameter and runs one
publisher per camera (``/<name>/image``, frame id ``<name>_optical``, each at the rate; ``--phase``: the
cameras' start offset as a fraction of the period, 0 = hardware-synchronised cameras) and listens on
``~/<name>/odometry``; each rate then reports per camera (``cameras.<name>``): published, FPS posed,
``posed_pct`` (% of its frames published in the window whose odometry arrived), latencies, and the camera's
/diagnostics status (``fps``, ``latency_ms_mean`` / ``p99`` / ``max``, ``session.timings_ms``).

Start-up: process start -> first odometry (the camera publishes from the start; frames before the node is
active are lost), and the node's configure line (warm-up seconds). Usage (docs/benchmarks.md)::

    python benchmarks/node_e2e.py --rates 30,60 --seconds 20 --out /tmp/node_e2e
    python benchmarks/node_e2e.py --set model.preset=tiny --set model.device=cpu --set model.image_width=56 \\
        --width 74 --height 42 --rates 10 --seconds 3 --settle-s 3          # CPU smoke
    python benchmarks/node_e2e.py --cameras front,rear --rates 15 --seconds 20   # issue 33: 2 x 15 Hz

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

from lingbot_map_ros.tools.live.node_process import NodeProcess

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


def camera_window(
    window: tuple[set[int], list, list],
    posed: set[int],
    duration: float,
    diag: dict[str, str],
    t0_ns: int,
    t1_ns: int,
    segments: int,
    poses_before: int,
) -> dict:
    """One camera's measured window: (stamps published, odometry and tf (stamp ns, arrival s) received),
    the stamps posed, its /diagnostics values; `poses_before`: its odometry messages before the window."""
    pub_stamps, odometry, tf = window
    window_odo = [o for o in odometry if o[0] in pub_stamps]
    window_tf = [t for t in tf if t[0] in pub_stamps]
    latencies = [o[1] - o[0] / 1e9 for o in window_odo]
    result = {
        "published": len(pub_stamps),
        "published_hz": len(pub_stamps) / duration,
        "fps_posed": len(window_odo) / duration,
        "dropped": len(pub_stamps) - len(posed),
        "posed_pct": 100.0 * len(posed) / len(pub_stamps) if pub_stamps else float("nan"),
        "odometry_latency_ms": percentiles(latencies),
        "odometry_latency_max_ms": 1e3 * max(latencies, default=float("nan")),
        "frames_over_45ms": sum(1 for latency in latencies if latency > 0.045),
        "tf_latency_ms": percentiles([t[1] - t[0] / 1e9 for t in window_tf]),
        "gpu_memory_gib": {k.rsplit(".", 1)[1]: v for k, v in diag.items() if "gpu_memory_gib" in k},
        "node_timings_mean_ms": {
            k.split(".")[2]: v
            for k, v in diag.items()
            if k.startswith("session.timings_ms.") and k.endswith(".mean")
        },
        "diagnostics_dropped_total": diag.get("frames_dropped"),
        "diagnostics_fps": diag.get("fps"),
        "diagnostics_latency_ms_mean": diag.get("latency_ms_mean"),
        "diagnostics_latency_ms_p99": diag.get("latency_ms_p99"),
        "diagnostics_latency_ms_max": diag.get("latency_ms_max"),
        "loop_closure": {k: v for k, v in diag.items() if k.startswith("loop_closure.")},
    }
    if segments > 1:  # latency over time: first segment = first full-window frames
        edges = np.linspace(t0_ns, t1_ns, segments + 1)
        result["segments"] = [
            {
                "from_s": (lo - t0_ns) / 1e9,
                "poses_before": poses_before + sum(1 for o in window_odo if o[0] < lo),
                **percentiles([o[1] - o[0] / 1e9 for o in window_odo if lo <= o[0] < hi]),
            }
            for lo, hi in zip(edges[:-1], edges[1:], strict=True)
        ]
    return result


def status_suffix(name: str) -> str:
    """How camera `name`'s /diagnostics status name ends (the node's status for one unnamed camera)."""
    return f"/{name}: mapping" if name else ": mapping"


def reanchor_summary(samples: list[tuple[int, float, int, str]]) -> dict:
    """Re-anchors in a window from a camera's /diagnostics samples (arrival ns, the `reanchor` stage's max
    ms over the node's timing window, re-anchors so far): how many, and the longest wait a frame had."""
    return {
        "reanchors": samples[-1][2] - samples[0][2] if samples else 0,
        "wait_max_ms": max((r[1] for r in samples), default=None),
        "samples": len(samples),
    }


def aggregate(
    per_camera: dict[str, dict], windows: dict[str, tuple[set[int], list, list]], duration: float
) -> dict:
    """Several cameras' windows as one row: sums, latencies over every camera's frames, `posed_pct_min`
    (issue 33: every camera >= 99 %), each camera's own row under `cameras`."""
    rows = list(per_camera.values())
    published = sum(r["published"] for r in rows)
    waits = [r["reanchor"]["wait_max_ms"] for r in rows if r["reanchor"]["wait_max_ms"] is not None]

    def latencies(index: int) -> list[float]:
        return [a - s / 1e9 for stamps, *got in windows.values() for s, a in got[index] if s in stamps]

    return {
        "published": published,
        "published_hz": published / duration,
        "fps_posed": sum(r["fps_posed"] for r in rows),
        "dropped": sum(r["dropped"] for r in rows),
        "posed_pct_min": min(r["posed_pct"] for r in rows),
        "odometry_latency_ms": percentiles(latencies(0)),
        "odometry_latency_max_ms": max(r["odometry_latency_max_ms"] for r in rows),
        "frames_over_45ms": sum(r["frames_over_45ms"] for r in rows),
        "reanchor": {
            "reanchors": sum(r["reanchor"]["reanchors"] for r in rows),
            "wait_max_ms": max(waits, default=None),
        },
        "tf_latency_ms": percentiles(latencies(1)),
        "gpu_memory_gib": rows[0]["gpu_memory_gib"],
        "cameras": per_camera,
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
    parser.add_argument(
        "--cameras",
        default="",
        help="camera names, comma-separated (the node's `cameras`); empty: one camera",
    )
    parser.add_argument(
        "--phase", type=float, default=0.0, help="several cameras: start offset between them, x the period"
    )
    parser.add_argument("--start-timeout-s", type=float, default=300.0)
    parser.add_argument("--out", type=Path, default=REPO / "output" / "node_e2e")
    parser.add_argument("--record", type=Path, help="append the report to this results file (results.py)")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)

    env = use_isolated_dds()
    names = [name for name in args.cameras.split(",") if name] or [""]
    params = {"model.warmup_image_size": f"{args.width}x{args.height}", **parameter_overrides(args.set)}
    if names != [""]:
        params["cameras"] = names

    import rclpy
    from builtin_interfaces.msg import Time
    from diagnostic_msgs.msg import DiagnosticArray
    from nav_msgs.msg import Odometry
    from rclpy.context import Context
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.qos import QoSProfile, ReliabilityPolicy, qos_profile_sensor_data
    from sensor_msgs.msg import Image
    from std_msgs.msg import Header

    from lingbot_map_ros.ros.messages.conversions import rgb_to_image

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
    frame_ids = {name: f"{name}_optical" if name else "cam" for name in names}
    odometry: dict[str, list[tuple[int, float]]] = {name: [] for name in names}  # (stamp ns, arrival s)
    tf: dict[str, list[tuple[int, float]]] = {name: [] for name in names}
    statuses: dict[str, dict[str, str]] = {}  # /diagnostics status name -> its values
    # (arrival ns, reanchor stage max ms, reanchors so far, /diagnostics status name)
    reanchor_samples: list[tuple[int, float, int, str]] = []

    def stamp_ns(header: Header) -> int:
        return header.stamp.sec * 1_000_000_000 + header.stamp.nanosec

    def on_odometry(name: str, msg: Odometry) -> None:
        now = time.time()
        with lock:
            odometry[name].append((stamp_ns(msg.header), now))

    def on_tf(msg: object) -> None:
        now = time.time()
        with lock:
            for t in msg.transforms:
                edge = (t.header.frame_id, t.child_frame_id)
                for name, frame_id in frame_ids.items():  # <camera> -> map[_<name>]; map -> odom (one camera)
                    if frame_id in edge or (len(names) == 1 and "map" in edge):
                        tf[name].append((stamp_ns(t.header), now))
                        break

    def on_diagnostics(msg: DiagnosticArray) -> None:
        for status in msg.status:
            if status.name.endswith(": mapping"):
                values = {kv.key: kv.value for kv in status.values}
                with lock:
                    statuses[status.name] = values
                    if "session.timings_ms.reanchor.max" in values:
                        reanchor_samples.append(
                            (
                                time.time_ns(),
                                float(values["session.timings_ms.reanchor.max"]),
                                int(values.get("session.reanchors_total", 0)),
                                status.name,
                            )
                        )

    def diagnostics_of(name: str) -> dict[str, str]:
        """The last /diagnostics values of camera `name` (the node's status for one unnamed camera)."""
        with lock:
            found = [v for k, v in statuses.items() if k.endswith(status_suffix(name))]
        return dict(found[-1]) if found else {}

    reliable = QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE)
    for name in names:
        topic = f"/{NODE}/{name}/odometry" if name else f"/{NODE}/odometry"
        client.create_subscription(Odometry, topic, lambda m, n=name: on_odometry(n, m), reliable)
    if TFMessage is not None:
        client.create_subscription(TFMessage, "/tf", on_tf, reliable)
    client.create_subscription(DiagnosticArray, "/diagnostics", on_diagnostics, reliable)
    pubs = {
        name: client.create_publisher(Image, f"/{name}/image" if name else "/image", qos_profile_sensor_data)
        for name in names
    }
    executor = SingleThreadedExecutor(context=context)
    executor.add_node(client)
    spinner = threading.Thread(target=executor.spin, daemon=True)
    spinner.start()

    rng = np.random.default_rng(0)
    shape = (args.height, args.width, 3)
    messages = {
        name: [
            rgb_to_image(rng.integers(0, 256, shape, dtype=np.uint8), Header(frame_id=frame_ids[name]))
            for _ in range(8)
        ]
        for name in names
    }
    published: dict[str, list[int]] = {name: [] for name in names}  # stamps (ns) of the frames published
    stop = threading.Event()
    rate = {"hz": 30.0}

    def camera(name: str, offset: float) -> None:
        time.sleep(offset / rate["hz"])
        next_t = time.monotonic()
        i = 0
        while not stop.is_set():
            now_ns = time.time_ns()
            msg = messages[name][i % len(messages[name])]
            msg.header.stamp = Time(sec=now_ns // 1_000_000_000, nanosec=now_ns % 1_000_000_000)
            pubs[name].publish(msg)
            with lock:
                published[name].append(now_ns)
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
    cams = [
        threading.Thread(target=camera, args=(name, i * args.phase), daemon=True)
        for i, name in enumerate(names)
    ]
    for cam in cams:
        cam.start()
    try:
        deadline = time.monotonic() + args.start_timeout_s
        while True:
            with lock:
                first = all(odometry.values())
            if first:
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
                t0_ns = time.time_ns()
                start = {n: (len(published[n]), len(odometry[n]), len(tf[n])) for n in names}
            cpu0 = thread_cpu(proc.pid)
            time.sleep(args.seconds)
            threads = thread_shares(cpu0, thread_cpu(proc.pid), args.seconds)[:8]
            with lock:
                t1_ns = time.time_ns()
                window = {
                    n: (set(published[n][start[n][0] :]), odometry[n][start[n][1] :], tf[n][start[n][2] :])
                    for n in names
                }
            # frames published in the window whose odometry arrived (possibly just after the window)
            time.sleep(0.5)
            with lock:
                posed = {n: {o[0] for o in odometry[n][start[n][1] :]} & window[n][0] for n in names}
                samples = [r for r in reanchor_samples if t0_ns <= r[0] <= t1_ns + 500_000_000]
            duration = (t1_ns - t0_ns) / 1e9
            per_camera = {
                n: camera_window(
                    window[n], posed[n], duration, diagnostics_of(n), t0_ns, t1_ns, args.segments, start[n][1]
                )
                | {"reanchor": reanchor_summary([r for r in samples if r[3].endswith(status_suffix(n))])}
                for n in names
            }
            result = per_camera[names[0]] if names == [""] else aggregate(per_camera, window, duration)
            result["node_cpu_total"] = round(sum(t["cpu"] for t in threads), 3)
            result["node_busiest_threads"] = threads
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
            for n, r in per_camera.items() if len(names) > 1 else ():
                print(
                    f"  camera {n}: {r['posed_pct']:.2f} % posed ({r['published'] - r['dropped']} of "
                    f"{r['published']}), {r['fps_posed']:.2f} FPS, odometry p50/p99 "
                    f"{r['odometry_latency_ms']['p50']:.1f}/{r['odometry_latency_ms']['p99']:.1f} ms, "
                    f"/diagnostics fps {r['diagnostics_fps']}, latency mean "
                    f"{r['diagnostics_latency_ms_mean']} ms",
                    flush=True,
                )
        if names == [""]:
            report["diagnostics"] = diagnostics_of("")
        else:
            with lock:
                report["diagnostics"] = dict(statuses)
    finally:
        stop.set()
        for cam in cams:
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
