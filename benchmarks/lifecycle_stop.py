"""How fast the node stops while frames flow (issue 29): `deactivate` and `cleanup` answered at the lifecycle
service, and SIGINT to a clean exit, with frames published at `--rate` Hz (30) all along.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/lifecycle_stop.py --cycles 5 --stops 10 [--set NAME=VALUE ...]

Per cycle: the node maps (odometry flowing), `deactivate` is timed at the service (request sent -> response),
then `cleanup`, then `configure` + `activate` again. Then `--stops` times: a fresh node, frames, SIGINT; the
time to exit and whether it took the forced exit ("did not finish within 4 s"). Prints a JSON line each and a
summary (median, max). The spec (issue 29): deactivate <= 1 s, cleanup <= 2 s, 10 of 10 clean stops; the
numbers measured are in docs/performance.md.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
from node_child import parameter_overrides, use_isolated_dds

from lingbot_map_ros.tools.live.node_process import NodeProcess

NS = "/lifecycle_bench"
NODE = f"{NS}/lingbot_map"
PARAMS = {
    "model.preset": "tiny",
    "model.device": "cpu",
    "model.image_width": 112,
    "kv_cache.scale_frames": 2,
    "map.stride": 1,
    "publish.frame_cloud": True,
    "queue_size": 4,
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cycles", type=int, default=5)
    parser.add_argument("--stops", type=int, default=10)
    parser.add_argument("--rate", type=float, default=30.0)
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE")
    args = parser.parse_args()
    use_isolated_dds()
    from builtin_interfaces.msg import Time
    from lifecycle_msgs.msg import Transition
    from lifecycle_msgs.srv import ChangeState
    from nav_msgs.msg import Odometry
    from rclpy.qos import QoSProfile, ReliabilityPolicy
    from sensor_msgs.msg import Image
    from std_msgs.msg import Header

    from lingbot_map_ros.ros.dds_tools.client import ClientNode
    from lingbot_map_ros.ros.messages.conversions import rgb_to_image

    params = {**PARAMS, **parameter_overrides(args.set)}
    qos = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
    frames = np.random.default_rng(0).integers(0, 256, (8, 240, 320, 3), dtype=np.uint8)
    tmp = Path(tempfile.mkdtemp(prefix="lifecycle_bench_"))
    client = ClientNode("lifecycle_bench_client", spin_threads=2)
    odometry: list[float] = []
    client.node.create_subscription(Odometry, f"{NODE}/odometry", lambda m: odometry.append(time.time()), qos)
    pub = client.node.create_publisher(Image, f"{NS}/image", qos)
    stop = threading.Event()

    def stream() -> None:
        i = 0
        while not stop.wait(1.0 / args.rate):
            ns = time.time_ns()
            header = Header(stamp=Time(sec=ns // 10**9, nanosec=ns % 10**9), frame_id="cam")
            pub.publish(rgb_to_image(frames[i % len(frames)], header))
            i += 1

    def call(transition: int) -> float:
        service = client.node.create_client(ChangeState, f"{NODE}/change_state")
        service.wait_for_service(timeout_sec=30)
        start = time.monotonic()
        future = service.call_async(ChangeState.Request(transition=Transition(id=transition)))
        while not future.done():
            time.sleep(0.001)
        seconds = time.monotonic() - start
        client.node.destroy_client(service)
        assert future.result().success, f"transition {transition} failed"
        return seconds

    def mapping(timeout: float = 120.0) -> None:
        seen, deadline = len(odometry), time.monotonic() + timeout
        while len(odometry) < seen + 5:
            assert time.monotonic() < deadline, "no odometry"
            time.sleep(0.05)

    def start_node(name: str) -> NodeProcess:
        proc = NodeProcess.start(tmp / f"{name}.log", params, name="lingbot_map", namespace=NS)
        if not client.wait_for_service(f"{NODE}/reset", 120, lambda: not proc.alive()):
            raise SystemExit(f"node did not start:\n{proc.log_tail()}")
        return proc

    threading.Thread(target=stream, daemon=True).start()
    deactivate, cleanup = [], []
    proc = start_node("cycles")
    try:
        for cycle in range(args.cycles):
            mapping()
            deactivate.append(call(Transition.TRANSITION_DEACTIVATE))
            cleanup.append(call(Transition.TRANSITION_CLEANUP))
            print(json.dumps({"cycle": cycle, "deactivate_s": deactivate[-1], "cleanup_s": cleanup[-1]}))
            call(Transition.TRANSITION_CONFIGURE)
            call(Transition.TRANSITION_ACTIVATE)
    finally:
        proc.stop()
    stops = []
    for run in range(args.stops):
        proc = start_node(f"stop_{run}")
        mapping()
        start = time.monotonic()
        proc.proc.send_signal(signal.SIGINT)
        code = proc.proc.wait(30)
        seconds = time.monotonic() - start
        forced = "did not finish within" in proc.log_path.read_text(errors="replace")
        stops.append((seconds, forced, code))
        print(json.dumps({"stop": run, "exit_s": round(seconds, 3), "forced": forced, "code": code}))
    stop.set()
    summary = {
        "params": params,
        "deactivate_s": {"median": float(np.median(deactivate)), "max": max(deactivate)}
        if deactivate
        else {},
        "cleanup_s": {"median": float(np.median(cleanup)), "max": max(cleanup)} if cleanup else {},
        "stops_clean": sum(1 for s, forced, code in stops if not forced and code == 0),
        "stops": len(stops),
        "stop_exit_s": {
            "median": float(np.median([s for s, _, _ in stops])),
            "max": max(s for s, _, _ in stops),
        }
        if stops
        else {},
    }
    print(json.dumps(summary))
    client.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
