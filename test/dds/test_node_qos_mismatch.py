"""A camera whose QoS does not match the node's (issue 29): rclpy's own warning named only `image`. The node
says which resolved topic, both QoS and the parameter (and launch argument) that fixes it, once a policy."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from attack_helpers import BEST_EFFORT
from ros_helpers import RosClient, start_tiny_node
from sensor_msgs.msg import Image

pytestmark = pytest.mark.dds


def test_a_best_effort_camera_gets_a_warning_naming_topic_qos_and_fix(
    ros_client: RosClient, tmp_path: Path
) -> None:
    name = "qos_mismatch"
    proc = start_tiny_node(tmp_path, name, {"qos.reliability": "reliable"}, client=ros_client)
    expected = f"QoS mismatch on /{name}/image (reliability): this node subscribes reliable/volatile, the "
    try:
        pub = ros_client.publisher(Image, f"/{name}/image", BEST_EFFORT)
        deadline = time.monotonic() + 30
        while expected not in proc.output():
            assert time.monotonic() < deadline, proc.output()[-3000:]
            time.sleep(0.1)
        log = proc.output()
        assert "offer best_effort/volatile" in log and "qos_reliability:=best_effort" in log, log[-2000:]
        assert "set the parameter qos.reliability to best_effort" in log
        assert pub.get_subscription_count() == 0  # the mismatch is real: nothing matched
    finally:
        proc.stop()
    assert proc.output().count("QoS mismatch on") == 1
