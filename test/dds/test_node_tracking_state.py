"""Tracking state on the DDS node (issue 32): the kidnapped drifting oracle (test/kidnap_oracle_node.py) with
`tracking.health` on. Scene frames track; covered (black) frames make `~/tracking_state` (latched
`DiagnosticStatus`) report lost at ERROR level, the odometry covariance grows >= 100x at once, the state
shows in /diagnostics, and an `/initialpose` in the map frame is taken as a hint."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus
from geometry_msgs.msg import PoseWithCovarianceStamped
from loop_oracle_node import ORACLE_PARAMS, oracle_scene
from nav_msgs.msg import Odometry
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from ros_helpers import Collector, RosClient, start_tiny_node
from sensor_msgs.msg import Image
from std_msgs.msg import Header

from lingbot_map_ros.ros.conversions import rgb_to_image
from lingbot_map_ros.ros.pose_messages import seconds_stamp

pytestmark = pytest.mark.dds

NODE = "/track/track"
RELIABLE = QoSProfile(depth=200, reliability=ReliabilityPolicy.RELIABLE)
LATCHED = QoSProfile(
    depth=1, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL
)
T0 = 100.0  # stamp of frame 0 (s); frames 0.1 s apart
PARAMS = {
    **ORACLE_PARAMS,
    "tracking.health": True,
    "publish.frame_cloud": False,
    "publish.depth": False,
    "diagnostics_rate": 5.0,
}
MAPPED, COVERED = 12, 6


def collect(client: RosClient, msg_type: type, topic: str, qos: QoSProfile = RELIABLE) -> Collector:
    collector = Collector()
    collector.subscription = client.node.create_subscription(msg_type, topic, collector, qos)
    return collector


def values(status: DiagnosticStatus) -> dict[str, str]:
    return {kv.key: kv.value for kv in status.values}


def tracking_statuses(msgs: list[DiagnosticArray]) -> list[DiagnosticStatus]:
    return [s for m in msgs for s in m.status if "state" in values(s) and "inflation" in values(s)]


def test_covered_camera_reports_lost_inflates_covariance_and_takes_a_pose_hint(
    ros_client: RosClient, tmp_path: Path
) -> None:
    scene = oracle_scene()
    odometry = collect(ros_client, Odometry, f"{NODE}/odometry")
    state = collect(ros_client, DiagnosticStatus, f"{NODE}/tracking_state", LATCHED)
    diagnostics = collect(ros_client, DiagnosticArray, "/diagnostics")
    proc = start_tiny_node(
        tmp_path,
        "track",
        PARAMS,
        client=ros_client,
        script=Path(__file__).parent.with_name("kidnap_oracle_node.py"),
    )
    try:
        images = ros_client.publisher(Image, "/track/image", RELIABLE)
        ros_client.wait_for_subscribers(images)
        black = np.zeros_like(scene.images[0])
        frames = [scene.images[i] for i in range(MAPPED)] + [black] * COVERED
        for i, rgb in enumerate(frames):  # one frame at a time: the next once the last one's odometry is out
            images.publish(rgb_to_image(rgb, Header(stamp=seconds_stamp(T0 + 0.1 * i), frame_id="camera")))
            if i >= 1:  # the two anchor frames come out together (kv_cache.scale_frames: 2)
                odometry.wait_for(i + 1, timeout=60)
            if i == MAPPED - 1:
                tracking = state.wait_for(lambda m: m and m[-1].message == "tracking", timeout=20)[-1]
                assert tracking.level == DiagnosticStatus.OK and values(tracking)["maps"] == "true"
        lost = state.wait_for(lambda m: m and m[-1].message == "lost", timeout=20)[-1]
        assert lost.level == DiagnosticStatus.ERROR, lost
        assert "black image" in values(lost)["reasons"] and values(lost)["maps"] == "false", values(lost)
        seen = diagnostics.wait_for(
            lambda m: any(s.message == "lost" for s in tracking_statuses(m)), timeout=20
        )
        assert any(s.level == DiagnosticStatus.ERROR for s in tracking_statuses(seen))

        hint = PoseWithCovarianceStamped()
        hint.header.frame_id = "map"
        hint.pose.pose.orientation.w = 1.0
        hint.pose.covariance[0] = hint.pose.covariance[7] = 0.25
        poses = ros_client.publisher(PoseWithCovarianceStamped, "/initialpose", RELIABLE)
        ros_client.wait_for_subscribers(poses)
        poses.publish(hint)
        taken = state.wait_for(lambda m: m and values(m[-1])["hints"] == "1", timeout=20)[-1]
        assert taken.message == "lost", taken  # a hint narrows the search; it does not end the loss
    finally:
        assert proc.stop() == 0, proc.output()

    by_frame = {
        round((m.header.stamp.sec + 1e-9 * m.header.stamp.nanosec - T0) / 0.1): m for m in odometry.messages
    }
    tracked = by_frame[MAPPED - 1].pose.covariance[0]
    covered = by_frame[MAPPED + COVERED - 1].pose.covariance[0]
    assert covered >= 100.0 * tracked, (tracked, covered)
    twist = (by_frame[MAPPED - 1].twist.covariance[0], by_frame[MAPPED + COVERED - 1].twist.covariance[0])
    assert twist[1] >= 100.0 * twist[0], twist
