"""Issue 29's checks under the real `ros2 launch` (the local build of ../shared/ros/LOCAL_LAUNCH_TF2.md,
sourced; `scripts/check_real_tf2.sh launch SCRATCH` runs both):

    python benchmarks/launch_checks.py stops --runs 10 [--rate 30]
    python benchmarks/launch_checks.py republish --seconds 60 [--rate 30]

`stops`: per run a fresh `ros2 launch lingbot_map_ros lingbot_map.launch.py` (tiny preset on the CPU) in its
own process group, frames at `--rate` Hz on `/camera/image_raw` until the node's odometry flows, then SIGINT
to the group (Ctrl-C in a terminal); clean = `ros2 launch` exits 0, the node logged "clean shutdown
complete" and never "did not finish within" (the forced exit). `republish`: one launch on a robot (static
`base_link -> cam`, `odom -> base_link` at 50 Hz, wall-clock stamps, frames at `--rate` Hz): once
`map -> odom` is heard, every 0.25 s (4 Hz) whether the newest `map -> odom` stamp heard is >= now - 50 ms
(the spec: >= 90 % of samples). Prints a JSON line per run / the summary.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

ARGS = ["model_preset:=tiny", "device:=cpu", "image_width:=112"]


def launch(log: Path) -> subprocess.Popen:
    """`ros2 launch` as a user types it, in its own process group, stdin not a tty."""
    return subprocess.Popen(
        ["ros2", "launch", "lingbot_map_ros", "lingbot_map.launch.py", *ARGS],
        stdin=subprocess.DEVNULL,
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("what", choices=["stops", "republish"])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--rate", type=float, default=30.0)
    args = parser.parse_args()
    import rclpy
    from builtin_interfaces.msg import Time
    from geometry_msgs.msg import TransformStamped
    from nav_msgs.msg import Odometry
    from rclpy.executors import MultiThreadedExecutor
    from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
    from sensor_msgs.msg import Image
    from std_msgs.msg import Header
    from tf2_msgs.msg import TFMessage

    from lingbot_map_ros.ros.messages.conversions import rgb_to_image

    rclpy.init()
    node = rclpy.create_node("launch_checks")
    executor = MultiThreadedExecutor(num_threads=2)
    executor.add_node(node)
    threading.Thread(target=executor.spin, daemon=True).start()
    reliable = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
    tf_qos = QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE)
    static_qos = QoSProfile(
        depth=1, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL
    )
    odometry: list[float] = []
    map_odom: list[float] = []  # stamps (s) of map -> odom heard
    node.create_subscription(
        Odometry, "/lingbot_map/odometry", lambda m: odometry.append(time.time()), reliable
    )

    def heard(msg: TFMessage) -> None:
        for t in msg.transforms:
            if (t.header.frame_id, t.child_frame_id) == ("map", "odom"):
                map_odom.append(t.header.stamp.sec + 1e-9 * t.header.stamp.nanosec)

    node.create_subscription(TFMessage, "/tf", heard, tf_qos)
    images = node.create_publisher(Image, "/camera/image_raw", reliable)
    tf_pub = node.create_publisher(TFMessage, "/tf", tf_qos)
    static_pub = node.create_publisher(TFMessage, "/tf_static", static_qos)
    frames = np.random.default_rng(0).integers(0, 256, (8, 240, 320, 3), dtype=np.uint8)
    robot = args.what == "republish"
    stop = threading.Event()

    def stamp() -> Time:
        ns = time.time_ns()
        return Time(sec=ns // 10**9, nanosec=ns % 10**9)

    def edge(parent: str, child: str, x: float) -> TransformStamped:
        tf = TransformStamped(header=Header(stamp=stamp(), frame_id=parent), child_frame_id=child)
        tf.transform.translation.x = x
        tf.transform.rotation.w = 1.0
        return tf

    def stream() -> None:
        i, next_image = 0, time.monotonic()
        while not stop.wait(0.02 if robot else 1.0 / args.rate):
            if robot:  # odometry at 50 Hz
                tf_pub.publish(TFMessage(transforms=[edge("odom", "base_link", 0.01 * i)]))
            if not robot or time.monotonic() >= next_image:
                next_image += 1.0 / args.rate
                images.publish(rgb_to_image(frames[i % len(frames)], Header(stamp=stamp(), frame_id="cam")))
            i += 1

    if robot:
        static_pub.publish(TFMessage(transforms=[edge("base_link", "cam", 0.1)]))
    threading.Thread(target=stream, daemon=True).start()
    tmp = Path(tempfile.mkdtemp(prefix="launch_checks_"))

    def wait(condition: object, timeout: float, proc: subprocess.Popen, log: Path) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"launch failed or timed out:\n{log.read_text()[-3000:]}")
            time.sleep(0.05)

    def interrupt(proc: subprocess.Popen) -> tuple[float, int]:
        start = time.monotonic()
        os.killpg(proc.pid, signal.SIGINT)
        try:
            code = proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            code = proc.wait()
        return time.monotonic() - start, code

    if args.what == "stops":
        results = []
        for run in range(args.runs):
            log = tmp / f"stop_{run}.log"
            proc = launch(log)
            seen = len(odometry)
            wait(lambda seen=seen: len(odometry) >= seen + 5, 300, proc, log)
            seconds, code = interrupt(proc)
            out = log.read_text(errors="replace")
            clean = code == 0 and "clean shutdown complete" in out and "did not finish within" not in out
            results.append((seconds, clean))
            print(
                json.dumps({"stop": run, "exit_s": round(seconds, 2), "code": code, "clean": clean}),
                flush=True,
            )
        exits = [s for s, _ in results]
        summary = {"clean": sum(c for _, c in results), "runs": len(results)}
        summary |= {"exit_s_median": round(float(np.median(exits)), 2), "exit_s_max": round(max(exits), 2)}
    else:
        log = tmp / "republish.log"
        proc = launch(log)
        wait(lambda: map_odom, 300, proc, log)
        fresh, samples, lags = 0, 0, []
        end = time.monotonic() + args.seconds
        while time.monotonic() < end:
            time.sleep(0.25)
            lag = time.time() - max(map_odom)
            lags.append(lag)
            samples += 1
            fresh += lag <= 0.05
        interrupt(proc)
        summary = {"fresh": fresh, "samples": samples, "fraction": round(fresh / samples, 3)}
        summary |= {"lag_median_s": round(float(np.median(lags)), 3), "lag_max_s": round(max(lags), 3)}
        summary["frames_posed"] = len(odometry)
    stop.set()
    print(json.dumps({"what": args.what, "args": ARGS, "rate": args.rate, **summary}), flush=True)
    executor.shutdown()
    rclpy.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
