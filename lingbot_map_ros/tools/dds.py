"""DDS helpers shared by replay, record and the demo: isolated environments, message classes, QoS.

Every process this package starts on its own (tests, the demo's node) keeps DDS on the machine:
`ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST`, a private `ROS_DOMAIN_ID`, `ROS_LOG_DIR` in a temp folder and
the big shared-memory Fast DDS profile (camera-sized images do not fit the default 512 KiB segment).
"""

from __future__ import annotations

import importlib
import os
import random
import sys
import tempfile
from pathlib import Path

from rclpy.qos import (
    DurabilityPolicy,
    HistoryPolicy,
    QoSProfile,
    ReliabilityPolicy,
    qos_profile_sensor_data,
)

PROFILE_NAME = "fastdds_localhost_big_shm.xml"
QOS_CHOICES = ("reliable", "sensor")


def fastdds_profile() -> Path | None:
    """The package's big-SHM Fast DDS profile: the source tree's config/ (editable install, checkout) or
    share/lingbot_map_ros/config/ of an installed package (pip or colcon prefix); None if neither exists."""
    candidates = [Path(__file__).resolve().parents[2] / "config" / PROFILE_NAME]
    prefixes = [p for p in os.environ.get("AMENT_PREFIX_PATH", "").split(os.pathsep) if p] + [sys.prefix]
    candidates += [Path(p) / "share" / "lingbot_map_ros" / "config" / PROFILE_NAME for p in prefixes]
    return next((path for path in candidates if path.is_file()), None)


def isolated_dds_env(base: dict[str, str] | None = None, domain_id: int | None = None) -> dict[str, str]:
    """A copy of `base` (default os.environ) with DDS confined to this machine and a private domain.

    Keeps everything else (the ROS wheels' LD_LIBRARY_PATH bootstrap needs the inherited variables)."""
    env = dict(os.environ if base is None else base)
    env["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
    env["ROS_DOMAIN_ID"] = str(domain_id if domain_id is not None else random.randint(1, 100))
    env.setdefault("ROS_LOG_DIR", tempfile.mkdtemp(prefix="lingbot_ros_log_"))
    profile = fastdds_profile()
    if profile is not None:
        env.setdefault("FASTDDS_DEFAULT_PROFILES_FILE", str(profile))
    return env


def message_class(msgtype: str) -> type:
    """The rclpy message class of a type name such as `sensor_msgs/msg/Image`."""
    parts = msgtype.split("/")
    if len(parts) != 3:
        raise ValueError(f"message type must look like 'pkg/msg/Name', got {msgtype!r}")
    package, kind, name = parts
    try:
        return getattr(importlib.import_module(f"{package}.{kind}"), name)
    except (ImportError, AttributeError) as err:
        raise ValueError(f"message type {msgtype} is not installed for rclpy ({err})") from err


def publisher_qos(kind: str, depth: int = 10) -> QoSProfile:
    """`reliable` (volatile, keep last `depth`) or `sensor` (ROS sensor-data: best effort, keep last 5)."""
    if kind == "sensor":
        return qos_profile_sensor_data
    if kind == "reliable":
        return QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=depth,
                          reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.VOLATILE)
    raise ValueError(f"QoS must be one of {QOS_CHOICES}, got {kind!r}")


def matching_subscription_qos(offered: list[QoSProfile], depth: int = 100) -> QoSProfile:
    """The strongest QoS a subscriber can request and still match every offered publisher QoS
    (what `ros2 bag record` does): reliable only if all offer it, transient local only if all offer it."""
    reliable = bool(offered) and all(q.reliability == ReliabilityPolicy.RELIABLE for q in offered)
    latched = bool(offered) and all(q.durability == DurabilityPolicy.TRANSIENT_LOCAL for q in offered)
    return QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=depth,
                      reliability=ReliabilityPolicy.RELIABLE if reliable else ReliabilityPolicy.BEST_EFFORT,
                      durability=DurabilityPolicy.TRANSIENT_LOCAL if latched else DurabilityPolicy.VOLATILE)
