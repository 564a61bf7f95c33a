"""Odometry rate of the node against a robot's TF traffic (issue 19): does TF ingestion starve the pose path?

One node (`python -m lingbot_map_ros.ros.node`, tiny preset on CPU by default, `tf.mode auto`) as a child
process; this process is the camera (rgb8 images at --camera-hz, stamped with the wall clock) and counts the
node's `~/odometry`; a second child process (this script with `--robot`) is the robot: the static extrinsics
`base_link -> camera_link -> camera_optical` on `/tf_static`, `odom -> base_link` on `/tf` at ODOM Hz (one
transform a message), JOINTS Hz messages of `JOINT_FRAMES` joint transforms (`base_link -> wheel_i`, as
robot_state_publisher sends them) and `camera_info` at INFO Hz, all stamped with the wall clock. Scenarios
run back to back on the same node: the robot's rates are set, `~/reset` makes `auto` choose the mode again
(bare camera: `map_to_camera`, images in frame `bare_optical`; with odometry: `map_to_odom`, which looks up TF
for every frame), --settle-s unmeasured, then --seconds measured: odometry messages per second of frames
published in the window.

    python benchmarks/tf_rates.py                                    # the default table (docs/benchmarks.md)
    python benchmarks/tf_rates.py --scenarios bare:0:0:0,odom30:30:0:0 --seconds 8 --settle-s 4
    python benchmarks/tf_rates.py --scenarios odom30:30:0:0,joints10k:30:5:0 --joint-frames 10000  # issue 30

A scenario is NAME:ODOM_HZ:JOINTS_HZ:INFO_HZ; the first one is the reference of the ratio column (the bare
camera). `--rounds N` runs the scenarios N times in turn (a shared machine's load drifts over tens of seconds;
interleaving spreads it over all of them) and each row sums its rounds. Prints a table and writes
tf_rates_<UTC time>.json into --out (default benchmarks/results/).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from node_child import REPO, parameter_overrides, thread_cpu, thread_shares, use_isolated_dds

from lingbot_map_ros.tools.live.node_process import NodeProcess

NODE = "lingbot_map"
JOINT_FRAMES = 6
DEFAULT_SCENARIOS = "bare:0:0:0,odom30:30:0:0,robot:200:100:30"
#: The node's parameters (tiny preset on CPU, a small window; reliable input: no frame lost on the way).
NODE_PARAMS: dict[str, object] = {
    "model.preset": "tiny",
    "model.device": "cpu",
    "model.image_width": 56,
    "kv_cache.scale_frames": 4,
    "kv_cache.sliding_window": 8,
    "kv_cache.max_window": 16,
    "qos.reliability": "reliable",
    "qos.depth": 10,
    "diagnostics_rate": 2.0,
    "tf.mode": "auto",
}


@dataclass(frozen=True)
class Scenario:
    name: str
    odom_hz: float
    joints_hz: float
    info_hz: float

    @classmethod
    def parse(cls, text: str) -> Scenario:
        name, odom, joints, info = text.split(":")
        return cls(name, float(odom), float(joints), float(info))


def cpu_share(before: dict, after: dict, seconds: float) -> tuple[float, list[dict]]:
    """(process total, busiest threads) in cores over a window."""
    rows = thread_shares(before, after, seconds)
    return round(sum(r["cpu"] for r in rows), 3), rows[:5]


# ------------------------------------------------------------------------------------------- the robot
def robot_main(camera_info_topic: str, joint_frames: int) -> int:
    """`--robot`: publish the robot's TF and camera_info at the rates read from stdin lines
    `ODOM JOINTS INFO` (Hz; 0 = off) until stdin closes; each line is answered with the counts so far."""
    import rclpy
    from builtin_interfaces.msg import Time
    from geometry_msgs.msg import Transform, TransformStamped, Vector3
    from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
    from rclpy.serialization import serialize_message
    from sensor_msgs.msg import CameraInfo
    from std_msgs.msg import Header
    from tf2_msgs.msg import TFMessage

    from lingbot_map_ros.ros.tf.broadcaster import TF_QOS

    rclpy.init()
    node = rclpy.create_node("tf_rates_robot")
    tf_pub = node.create_publisher(TFMessage, "/tf", TF_QOS)
    static_qos = QoSProfile(
        depth=10, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL
    )
    static_pub = node.create_publisher(TFMessage, "/tf_static", static_qos)
    info_pub = node.create_publisher(CameraInfo, camera_info_topic, 10)

    def now() -> Time:
        ns = time.time_ns()
        return Time(sec=ns // 1_000_000_000, nanosec=ns % 1_000_000_000)

    def edge(parent: str, child: str, stamp: Time, x: float = 0.0, yaw: float = 0.0) -> TransformStamped:
        tf = Transform(translation=Vector3(x=x, y=0.1, z=0.2))
        tf.rotation.z, tf.rotation.w = float(np.sin(yaw / 2)), float(np.cos(yaw / 2))
        return TransformStamped(
            header=Header(stamp=stamp, frame_id=parent), child_frame_id=child, transform=tf
        )

    optical = TransformStamped(
        header=Header(stamp=Time(), frame_id="camera_link"), child_frame_id="camera_optical"
    )
    optical.transform.rotation.x, optical.transform.rotation.y = -0.5, 0.5
    optical.transform.rotation.z, optical.transform.rotation.w = -0.5, 0.5
    statics = TFMessage(transforms=[edge("base_link", "camera_link", Time(), 0.1), optical])
    big_tree = serialize_message(
        TFMessage(transforms=[edge("base_link", f"joint_{i}", now(), 0.1) for i in range(joint_frames)])
    )
    rates = {"odom": 0.0, "joints": 0.0, "info": 0.0}
    counts = {"odom": 0, "joints": 0, "info": 0}
    lock = threading.Lock()

    def publish(kind: str) -> None:
        stamp = now()
        if kind == "odom":
            t = time.time()
            tf_pub.publish(TFMessage(transforms=[edge("odom", "base_link", stamp, 0.1 * np.sin(t), 0.2 * t)]))
        elif kind == "joints" and joint_frames > JOINT_FRAMES:  # a big tree: built once, sent as bytes
            tf_pub.publish(big_tree)
        elif kind == "joints":
            joints = [
                edge("base_link", f"wheel_{i}", stamp, 0.1 * i, time.time() + i) for i in range(JOINT_FRAMES)
            ]
            tf_pub.publish(TFMessage(transforms=joints))
        else:
            info = CameraInfo(header=Header(stamp=stamp, frame_id="camera_optical"), width=64, height=48)
            info.k = [50.0, 0.0, 32.0, 0.0, 50.0, 24.0, 0.0, 0.0, 1.0]
            info_pub.publish(info)
        counts[kind] += 1

    def loop() -> None:
        due = dict.fromkeys(rates, time.monotonic())
        while True:
            now_s = time.monotonic()
            with lock:
                active = {k: hz for k, hz in rates.items() if hz > 0}
            for kind, hz in active.items():
                if now_s >= due[kind]:
                    publish(kind)
                    due[kind] = max(due[kind] + 1.0 / hz, now_s - 0.1)
            for kind in rates:
                if kind not in active:
                    due[kind] = now_s
            waits = [due[k] for k in active] or [now_s + 0.01]
            time.sleep(max(0.0, min(waits) - time.monotonic()))

    threading.Thread(target=loop, daemon=True).start()
    for line in sys.stdin:
        odom, joints, info = (float(v) for v in line.split())
        if (odom or joints) and statics is not None:  # the robot's URDF, latched (a bare camera has none)
            static_pub.publish(statics)
            statics = None
        with lock:
            rates.update(odom=odom, joints=joints, info=info)
        print(json.dumps(counts), flush=True)
    return 0


# ------------------------------------------------------------------------------------------- the run
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--scenarios", default=DEFAULT_SCENARIOS)
    parser.add_argument("--camera-hz", type=float, default=10.0)
    parser.add_argument("--width", type=int, default=64)
    parser.add_argument("--height", type=int, default=48)
    parser.add_argument("--seconds", type=float, default=8.0, help="measured seconds per scenario and round")
    parser.add_argument("--settle-s", type=float, default=5.0, help="unmeasured seconds after each switch")
    parser.add_argument(
        "--rounds", type=int, default=2, help="repeat the scenarios in turn; each row sums its rounds"
    )
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", help="node parameter")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    parser.add_argument("--json", type=Path, default=None, help="write the JSON here instead of --out/<time>")
    parser.add_argument(
        "--joint-frames",
        type=int,
        default=JOINT_FRAMES,
        help="transforms per joints message (issue 30: 10000 at 5 Hz; more than 6: one message built once)",
    )
    parser.add_argument("--robot", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.robot:
        return robot_main(f"/{NODE}_camera/camera_info", args.joint_frames)
    scenarios = [Scenario.parse(s) for s in args.scenarios.split(",")]

    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    env = use_isolated_dds()
    params = {**NODE_PARAMS, **parameter_overrides(args.set)}

    import rclpy
    from builtin_interfaces.msg import Time
    from diagnostic_msgs.msg import DiagnosticArray
    from nav_msgs.msg import Odometry
    from rclpy.context import Context
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.qos import QoSProfile, ReliabilityPolicy
    from sensor_msgs.msg import Image
    from std_msgs.msg import Header
    from std_srvs.srv import Trigger

    from lingbot_map_ros.ros.messages.conversions import rgb_to_image

    log_dir = Path(tempfile.mkdtemp(prefix="tf_rates_"))
    remaps = {"image": f"/{NODE}_camera/image_raw", "camera_info": f"/{NODE}_camera/camera_info"}
    node = NodeProcess.start(log_dir / "node.log", params, remaps, name=NODE, env=env)
    robot = subprocess.Popen(
        [sys.executable, __file__, "--robot", "--joint-frames", str(args.joint_frames)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=open(log_dir / "robot.log", "wb"),  # noqa: SIM115 - the child keeps it
        env=env,
        text=True,
    )  # noqa: SIM115

    context = Context()
    rclpy.init(context=context)
    client = rclpy.create_node("tf_rates_client", context=context)
    lock = threading.Lock()
    odometry: list[int] = []  # stamps (ns) of the odometry received
    diagnostics: dict[str, str] = {}

    def stamp_ns(header: Header) -> int:
        return header.stamp.sec * 1_000_000_000 + header.stamp.nanosec

    def on_odometry(msg: Odometry) -> None:
        with lock:
            odometry.append(stamp_ns(msg.header))

    def on_diagnostics(msg: DiagnosticArray) -> None:
        for status in msg.status:
            if status.name == f"/{NODE}: mapping":
                with lock:
                    diagnostics.clear()
                    diagnostics.update({kv.key: kv.value for kv in status.values})

    reliable = QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE)
    client.create_subscription(Odometry, f"/{NODE}/odometry", on_odometry, reliable)
    client.create_subscription(DiagnosticArray, "/diagnostics", on_diagnostics, reliable)
    pub = client.create_publisher(Image, f"/{NODE}_camera/image_raw", reliable)
    reset = client.create_client(Trigger, f"/{NODE}/reset")
    executor = SingleThreadedExecutor(context=context)
    executor.add_node(client)
    threading.Thread(target=executor.spin, daemon=True).start()

    rng = np.random.default_rng(0)
    image = rgb_to_image(
        rng.integers(0, 256, (args.height, args.width, 3), dtype=np.uint8), Header(frame_id="camera_optical")
    )
    published: list[int] = []
    stop = threading.Event()
    # A bare camera has its own frame: the node's `map -> bare_optical` must not become the parent of the
    # robot's camera_optical in the listener's buffer (a frame has one parent) for the scenarios after it.
    frame = {"id": "camera_optical"}

    def camera() -> None:
        next_t = time.monotonic()
        while not stop.is_set():
            now_ns = time.time_ns()
            image.header.stamp = Time(sec=now_ns // 1_000_000_000, nanosec=now_ns % 1_000_000_000)
            image.header.frame_id = frame["id"]
            pub.publish(image)
            with lock:
                published.append(now_ns)
            next_t += 1.0 / args.camera_hz
            time.sleep(max(0.0, next_t - time.monotonic()))

    def set_robot(s: Scenario) -> dict[str, int]:
        robot.stdin.write(f"{s.odom_hz} {s.joints_hz} {s.info_hz}\n")
        robot.stdin.flush()
        return json.loads(robot.stdout.readline())

    report: dict = {
        "params": params,
        "camera_hz": args.camera_hz,
        "image": f"{args.width}x{args.height} rgb8",
        "python": sys.executable,
        "scenarios": [],
        "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    try:
        if not reset.wait_for_service(timeout_sec=120):
            raise SystemExit("the node did not come up: " + (log_dir / "node.log").read_text()[-3000:])
        tf2 = "tf2_ros.Buffer" if "TF backend tf2_ros" in (log_dir / "node.log").read_text() else None
        cam = threading.Thread(target=camera, daemon=True)
        cam.start()
        for round_index, s in ((r, s) for r in range(args.rounds) for s in scenarios):
            frame["id"] = "camera_optical" if s.odom_hz or s.joints_hz else "bare_optical"
            set_robot(s)
            time.sleep(0.5)
            future = reset.call_async(Trigger.Request())
            while not future.done():
                time.sleep(0.02)
            time.sleep(args.settle_s)
            load0 = os.getloadavg()[0]
            counts0 = set_robot(s)
            cpu0 = thread_cpu(node.pid)
            with lock:
                t0, n_pub, n_odo = time.time_ns(), len(published), len(odometry)
            time.sleep(args.seconds)
            with lock:
                t1 = time.time_ns()
                window = set(published[n_pub:])
            node_cpu, threads = cpu_share(cpu0, thread_cpu(node.pid), args.seconds)
            counts1 = set_robot(s)
            time.sleep(0.5)
            with lock:
                posed = len(set(odometry[n_odo:]) & window)
                mode = diagnostics.get("tf_mode", "?")
            seconds = (t1 - t0) / 1e9
            row = {
                "name": s.name,
                "round": round_index,
                "seconds": seconds,
                "posed": posed,
                "odom_hz": s.odom_hz,
                "joints_hz": s.joints_hz,
                "info_hz": s.info_hz,
                "tf_mode": mode,
                "camera_published": len(window),
                "odometry_per_s": posed / seconds,
                "robot_sent_hz": {k: (counts1[k] - counts0[k]) / seconds for k in counts0},
                "node_cpu_cores": node_cpu,
                "node_threads": threads,
                "loadavg_1min": [round(load0, 2), round(os.getloadavg()[0], 2)],
                "tf_rejected": {k: v for k, v in diagnostics.items() if k.startswith("tf.")},
                "node_counters": {
                    k: v for k, v in diagnostics.items() if k.startswith(("rejected_", "frames_"))
                },
            }
            report["scenarios"].append(row)
            print(
                f"{s.name}: {row['odometry_per_s']:.2f} odometry/s ({mode}), robot sent "
                f"{row['robot_sent_hz']}, node {node_cpu} cores, load {row['loadavg_1min']}",
                flush=True,
            )
        set_robot(Scenario("off", 0, 0, 0))
        report["rounds"], report["scenarios"] = report["scenarios"], []
        for s in scenarios:  # each scenario over its rounds: frames posed / seconds measured
            rows = [r for r in report["rounds"] if r["name"] == s.name]
            summary = dict(rows[-1], round="all", seconds=sum(r["seconds"] for r in rows))
            summary["posed"] = sum(r["posed"] for r in rows)
            summary["odometry_per_s"] = summary["posed"] / summary["seconds"]
            summary["tf_mode"] = "/".join(sorted({r["tf_mode"] for r in rows}))
            summary["node_cpu_cores"] = sum(r["node_cpu_cores"] for r in rows) / len(rows)
            summary["loadavg_1min"] = [
                min(r["loadavg_1min"][0] for r in rows),
                max(r["loadavg_1min"][1] for r in rows),
            ]
            report["scenarios"].append(summary)
    finally:
        stop.set()
        with contextlib.suppress(OSError):  # the robot may have died (its log says why)
            robot.stdin.close()
        robot.terminate()
        report["node_exit_code"] = node.stop(30)
        executor.shutdown(timeout_sec=2)
        rclpy.try_shutdown(context=context)
    text = (log_dir / "node.log").read_text(errors="replace")
    report["tf_backend"] = next(
        (line.split("TF backend ", 1)[1].strip() for line in text.splitlines() if "TF backend " in line),
        tf2 or "unknown",
    )
    base = report["scenarios"][0]["odometry_per_s"] if report["scenarios"] else 0.0
    print(
        f"\nTF backend: {report['tf_backend']}; camera {args.camera_hz:g} Hz; node log {log_dir / 'node.log'}"
    )
    print(
        f"| scenario | /tf odom Hz | joints Hz (x{args.joint_frames}) | camera_info Hz | TF mode "
        "| odometry/s | x bare | node cores |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for row in report["scenarios"]:
        row["ratio"] = row["odometry_per_s"] / base if base else float("nan")
        print(
            f"| {row['name']} | {row['odom_hz']:g} | {row['joints_hz']:g} | {row['info_hz']:g} "
            f"| {row['tf_mode']} | {row['odometry_per_s']:.2f} | {row['ratio']:.2f} "
            f"| {row['node_cpu_cores']:.2f} |"
        )
    out = args.json or args.out / f"tf_rates_{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1))
    print(f"wrote {out}")
    return 0 if report.get("node_exit_code") == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
