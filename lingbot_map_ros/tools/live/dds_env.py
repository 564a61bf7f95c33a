"""The DDS environment of the processes the tools start: confined to this machine, in a private domain.

Every process this package starts on its own (tests, the demo's node) keeps DDS on the machine:
`ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST`, a private `ROS_DOMAIN_ID`, `ROS_LOG_DIR` in a temp folder and
the big shared-memory Fast DDS profile (camera-sized images do not fit the default 512 KiB segment).
Only environment variables here; the QoS and message classes of the tools' endpoints are in
`ros.dds_tools.qos` and `ros.dds_tools.message_types` (rclpy is imported only under `lingbot_map_ros/ros/`).
"""

from __future__ import annotations

import fcntl
import os
import random
import sys
import tempfile
from pathlib import Path
from typing import IO

import lingbot_map_ros

PROFILE_NAME = "fastdds_localhost_big_shm.xml"
#: One lock file per ROS_DOMAIN_ID (`<id>.lock`); a process holds an flock on the id it uses until it exits.
DOMAIN_LOCK_DIR = Path(tempfile.gettempdir()) / "lingbot_ros_domains"
_held_domain_locks: list[IO[str]] = []  # open for the life of the process: the flocks held


def fastdds_profile() -> Path | None:
    """The package's big-SHM Fast DDS profile: the source tree's config/ (editable install, checkout) or
    share/lingbot_map_ros/config/ of an installed package (pip or colcon prefix); None if neither exists."""
    checkout = Path(lingbot_map_ros.__file__).resolve().parent.parent  # the package's folder's parent
    candidates = [checkout / "config" / PROFILE_NAME]
    prefixes = [p for p in os.environ.get("AMENT_PREFIX_PATH", "").split(os.pathsep) if p] + [sys.prefix]
    candidates += [Path(p) / "share" / "lingbot_map_ros" / "config" / PROFILE_NAME for p in prefixes]
    return next((path for path in candidates if path.is_file()), None)


def allocate_domain_id(low: int = 1, high: int = 100) -> int:
    """A ROS_DOMAIN_ID in [low, high] that no other live process of this package (demo, test session)
    holds: an flock on `DOMAIN_LOCK_DIR/<id>.lock`, held until this process exits."""
    DOMAIN_LOCK_DIR.mkdir(exist_ok=True)
    ids = list(range(low, high + 1))
    random.shuffle(ids)
    for domain in ids:
        handle = open(DOMAIN_LOCK_DIR / f"{domain}.lock", "w")  # noqa: SIM115 - held until exit
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            handle.close()
            continue
        _held_domain_locks.append(handle)
        return domain
    raise RuntimeError(f"every ROS_DOMAIN_ID in [{low}, {high}] is held by another process")


def isolated_dds_env(base: dict[str, str] | None = None, domain_id: int | None = None) -> dict[str, str]:
    """A copy of `base` (default os.environ) with DDS confined to this machine and a private domain.

    Without `domain_id`, a domain no other process of this package holds (`allocate_domain_id`). Keeps
    everything else (the ROS wheels' LD_LIBRARY_PATH bootstrap needs the inherited variables)."""
    env = dict(os.environ if base is None else base)
    env["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
    env["ROS_DOMAIN_ID"] = str(domain_id if domain_id is not None else allocate_domain_id())
    env.setdefault("ROS_LOG_DIR", tempfile.mkdtemp(prefix="lingbot_ros_log_"))
    profile = fastdds_profile()
    if profile is not None:
        env.setdefault("FASTDDS_DEFAULT_PROFILES_FILE", str(profile))
    return env
