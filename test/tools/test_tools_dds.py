"""DDS helpers: isolated environments for child processes (tools.dds), QoS matching (ros.dds_tools.qos),
message classes (ros.dds_tools.message_types)."""

from __future__ import annotations

import fcntl

import pytest
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy

from lingbot_map_ros.ros.dds_tools.message_types import message_class
from lingbot_map_ros.ros.dds_tools.qos import matching_subscription_qos, publisher_qos
from lingbot_map_ros.tools.live.dds_env import DOMAIN_LOCK_DIR, fastdds_profile, isolated_dds_env


def test_isolated_env_keeps_dds_local_and_private_and_inherits_the_rest() -> None:
    env = isolated_dds_env({"PATH": "/bin", "ROS_DOMAIN_ID": "0", "LD_LIBRARY_PATH": "/x"}, domain_id=42)
    assert env["ROS_AUTOMATIC_DISCOVERY_RANGE"] == "LOCALHOST"
    assert env["ROS_DOMAIN_ID"] == "42"
    assert env["PATH"] == "/bin" and env["LD_LIBRARY_PATH"] == "/x"
    profile = fastdds_profile()
    assert profile is not None and env["FASTDDS_DEFAULT_PROFILES_FILE"] == str(profile)
    assert "<segment_size>16777216</segment_size>" in profile.read_text()
    assert env["ROS_LOG_DIR"]
    first, second = (int(isolated_dds_env({"ROS_LOG_DIR": "/tmp"})["ROS_DOMAIN_ID"]) for _ in range(2))
    assert 1 <= first <= 100 and 1 <= second <= 100 and first != second  # each held: never handed out twice
    with open(DOMAIN_LOCK_DIR / f"{first}.lock") as other, pytest.raises(OSError):  # held for life
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)


def test_subscription_qos_matches_every_offered_publisher() -> None:
    reliable_latched = QoSProfile(
        depth=1, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL
    )
    best_effort = QoSProfile(depth=5, reliability=ReliabilityPolicy.BEST_EFFORT)
    qos = matching_subscription_qos([reliable_latched])
    assert (qos.reliability, qos.durability) == (ReliabilityPolicy.RELIABLE, DurabilityPolicy.TRANSIENT_LOCAL)
    qos = matching_subscription_qos([reliable_latched, best_effort])
    assert (qos.reliability, qos.durability) == (ReliabilityPolicy.BEST_EFFORT, DurabilityPolicy.VOLATILE)
    assert publisher_qos("sensor").reliability == ReliabilityPolicy.BEST_EFFORT
    assert publisher_qos("reliable", depth=7).depth == 7
    with pytest.raises(ValueError, match="QoS must be one of"):
        publisher_qos("fast")


def test_message_class_resolves_installed_types_and_names_bad_ones() -> None:
    from sensor_msgs.msg import Image

    assert message_class("sensor_msgs/msg/Image") is Image
    with pytest.raises(ValueError, match="pkg/msg/Name"):
        message_class("sensor_msgs/Image")
    with pytest.raises(ValueError, match="not installed"):
        message_class("no_such_msgs/msg/Thing")
