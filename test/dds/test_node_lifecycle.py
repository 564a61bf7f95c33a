"""Lifecycle of the node over real DDS: autostart off, configure / activate / deactivate / cleanup through
the standard lifecycle services, reload-only parameters accepted only while unconfigured."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest
from builtin_interfaces.msg import Time
from lifecycle_msgs.msg import State, Transition
from lifecycle_msgs.srv import ChangeState, GetState
from nav_msgs.msg import Odometry
from rclpy.qos import QoSProfile, ReliabilityPolicy
from ros_helpers import NodeProcess, RosClient, load_frames
from sensor_msgs.msg import Image
from std_msgs.msg import Header
from std_srvs.srv import Trigger

from lingbot_map_ros.ros.messages.conversions import rgb_to_image

pytestmark = pytest.mark.dds

NS = "/lifecycle_test"
NODE = f"{NS}/lingbot_map"
RELIABLE = QoSProfile(depth=50, reliability=ReliabilityPolicy.RELIABLE)


def transition(client: RosClient, transition_id: int) -> bool:
    request = ChangeState.Request(transition=Transition(id=transition_id))
    return client.call(ChangeState, f"{NODE}/change_state", request).success


def state(client: RosClient) -> int:
    return client.call(GetState, f"{NODE}/get_state").current_state.id


def wait_until(predicate: object, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.05)


def test_lifecycle_transitions_and_reload_parameters(ros_client: RosClient, tmp_path: Path) -> None:
    frames = load_frames(3)
    proc = NodeProcess.start(
        tmp_path,
        name="lingbot_map",
        namespace=NS,
        params={
            "autostart": False,
            "model.device": "cpu",
            "model.preset": "tiny",
            "model.image_width": 56,
            "kv_cache.scale_frames": 2,
            "qos.reliability": "reliable",
            "queue_size": 10,
        },
    )
    try:
        assert ros_client.client(GetState, f"{NODE}/get_state").wait_for_service(timeout_sec=60), (
            proc.output()
        )
        assert state(ros_client) == State.PRIMARY_STATE_UNCONFIGURED
        # Services exist for the node's whole life (never destroyed while spinning) and refuse while inactive
        answer = ros_client.call(Trigger, f"{NODE}/reset")
        assert not answer.success and answer.message == "not active"
        (ok,) = ros_client.set_parameters(
            NODE, {"model.image_width": 84}
        )  # reload-only: fine while unconfigured
        assert ok.successful, ok.reason

        assert transition(ros_client, Transition.TRANSITION_CONFIGURE)
        assert state(ros_client) == State.PRIMARY_STATE_INACTIVE
        (refused,) = ros_client.set_parameters(NODE, {"model.image_width": 56})
        assert not refused.successful and "needs a reload" in refused.reason
        assert "image width 84" in proc.output()

        assert transition(ros_client, Transition.TRANSITION_ACTIVATE)
        assert state(ros_client) == State.PRIMARY_STATE_ACTIVE
        assert ros_client.client(Trigger, f"{NODE}/reset").wait_for_service(timeout_sec=10)
        odom = ros_client.collect(Odometry, f"{NODE}/odometry", RELIABLE)
        pub = ros_client.publisher(Image, f"{NS}/image", RELIABLE)
        ros_client.wait_for_subscribers(pub)
        ros_client.wait_for_publishers(odom)
        for i, frame in enumerate(frames):
            pub.publish(rgb_to_image(frame, Header(stamp=Time(sec=10 + i), frame_id="cam")))
        assert [m.header.stamp.sec for m in odom.wait_for(3)] == [10, 11, 12]

        assert transition(ros_client, Transition.TRANSITION_DEACTIVATE)
        assert state(ros_client) == State.PRIMARY_STATE_INACTIVE
        # The subscription is kept (gated): topics do not vanish, frames arriving now are only counted
        assert pub.get_subscription_count() == 1
        pub.publish(rgb_to_image(frames[0], Header(stamp=Time(sec=15), frame_id="cam")))
        time.sleep(0.5)
        assert len(odom) == 3
        assert transition(ros_client, Transition.TRANSITION_CLEANUP)
        assert state(ros_client) == State.PRIMARY_STATE_UNCONFIGURED
        (ok,) = ros_client.set_parameters(NODE, {"model.image_width": 56})
        assert ok.successful, ok.reason

        assert transition(ros_client, Transition.TRANSITION_CONFIGURE)
        assert transition(ros_client, Transition.TRANSITION_ACTIVATE)
        ros_client.wait_for_subscribers(pub)
        ros_client.wait_for_publishers(odom)
        odom.clear()
        for i, frame in enumerate(frames):  # a fresh session: a new anchor phase of 2 frames, then 1
            pub.publish(rgb_to_image(frame, Header(stamp=Time(sec=20 + i), frame_id="cam")))
        assert [m.header.stamp.sec for m in odom.wait_for(3)] == [20, 21, 22]
        assert np.isfinite(odom.messages[-1].pose.pose.position.x)
    finally:
        code = proc.stop()
    assert code == 0, proc.output()
    assert proc.output().count("image width 56") == 1
