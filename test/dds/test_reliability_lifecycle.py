"""Lifecycle churn under load over real DDS (node subprocess, tiny preset on CPU): deactivate / activate and
cleanup / configure while frames stream in and steps are in flight; every transition succeeds, nothing fails,
mapping resumes each time (docs/reliability.md)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from builtin_interfaces.msg import Time
from diagnostic_msgs.msg import DiagnosticArray
from lifecycle_msgs.msg import State, Transition
from lifecycle_msgs.srv import ChangeState, GetState
from nav_msgs.msg import Odometry
from rclpy.qos import QoSProfile, ReliabilityPolicy
from ros_helpers import Collector, RosClient, load_frames, start_tiny_node
from sensor_msgs.msg import Image
from std_msgs.msg import Header

from lingbot_map_ros.ros.messages.conversions import rgb_to_image

pytestmark = pytest.mark.dds

NAME = "churn"
NODE = f"/{NAME}/{NAME}"
RELIABLE = QoSProfile(depth=200, reliability=ReliabilityPolicy.RELIABLE)


def test_lifecycle_transitions_under_load(ros_client: RosClient, tmp_path: Path) -> None:
    frames = load_frames(6, step=8)
    params = {"kv_cache.scale_frames": 2, "queue_size": 4, "diagnostics_rate": 20.0, "publish.depth": False}
    # every step takes >= 0.1 s: transitions meet steps in flight
    proc = start_tiny_node(tmp_path, NAME, params, faults="delay@*:0.1")
    stop = threading.Event()
    try:
        proc.wait_ready(ros_client, [f"{NODE}/reset"])
        odom = Collector()
        diag = Collector()
        odom_sub = ros_client.node.create_subscription(Odometry, f"{NODE}/odometry", odom, RELIABLE)
        ros_client.node.create_subscription(DiagnosticArray, "/diagnostics", diag, RELIABLE)
        pub = ros_client.publisher(Image, f"/{NAME}/image", RELIABLE)
        ros_client.wait_for_subscribers(pub)
        deadline = time.monotonic() + 20
        while odom_sub.get_publisher_count() < 1:
            assert time.monotonic() < deadline
            time.sleep(0.02)

        def stream() -> None:  # 30 Hz all along, also while the node is inactive
            i = 0
            while not stop.is_set():
                msg = rgb_to_image(frames[i % len(frames)], Header(stamp=Time(sec=4000 + i), frame_id="cam"))
                pub.publish(msg)
                i += 1
                time.sleep(1 / 30)

        def transition(transition_id: int) -> float:
            t0 = time.monotonic()
            request = ChangeState.Request(transition=Transition(id=transition_id))
            assert ros_client.call(ChangeState, f"{NODE}/change_state", request, timeout=60).success, (
                proc.output()
            )
            return time.monotonic() - t0

        def state() -> int:
            return ros_client.call(GetState, f"{NODE}/get_state").current_state.id

        def mapping_resumes() -> None:
            count = len(odom)
            odom.wait_for(count + 3, timeout=30)

        streamer = threading.Thread(target=stream)
        streamer.start()
        mapping_resumes()
        durations = []
        for _ in range(3):
            durations.append(transition(Transition.TRANSITION_DEACTIVATE))
            assert state() == State.PRIMARY_STATE_INACTIVE
            time.sleep(0.2)  # frames keep arriving while inactive: nobody listens, nothing breaks
            durations.append(transition(Transition.TRANSITION_ACTIVATE))
            assert state() == State.PRIMARY_STATE_ACTIVE
            mapping_resumes()
        durations.append(transition(Transition.TRANSITION_DEACTIVATE))
        durations.append(transition(Transition.TRANSITION_CLEANUP))
        assert state() == State.PRIMARY_STATE_UNCONFIGURED
        durations.append(transition(Transition.TRANSITION_CONFIGURE))
        durations.append(transition(Transition.TRANSITION_ACTIVATE))
        mapping_resumes()
        values = {}
        for msg in reversed(diag.wait_for(1)):
            status = [s for s in msg.status if s.name == f"/{NAME}/{NAME}: mapping"]
            if status:
                values = {kv.key: kv.value for kv in status[0].values}
                break
        assert values.get("failed_total") == "0", values
        stamps = [m.header.stamp.sec for m in odom.messages]
        assert stamps == sorted(stamps) and len(set(stamps)) == len(stamps)  # in order, never twice
        assert proc.alive() and "Traceback" not in proc.output()
        assert max(durations) < 5.0, durations
        print(
            f"\nlifecycle churn: {len(durations)} transitions under load, longest {max(durations):.2f} s, "
            f"{len(stamps)} frames mapped"
        )
    finally:
        stop.set()
        assert proc.stop() == 0, proc.output()
