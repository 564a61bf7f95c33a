"""`lingbot-map-ros replay BAG`: play a bag's camera topics into DDS at the recorded timing (like
`ros2 bag play`, for machines without rosbag2).

Messages are published as stored (serialised bytes, header stamps untouched) at their log times scaled by
`--rate`. Before exiting, the player waits until every reliable subscriber acknowledged everything.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from rosbags.interfaces import Connection
from tqdm import tqdm

from lingbot_map_ros.ros.dds_tools.bag_player import BagPlayer
from lingbot_map_ros.ros.dds_tools.client import ClientNode
from lingbot_map_ros.ros.dds_tools.qos import QOS_CHOICES
from lingbot_map_ros.tools.bags.bag_io import CAMERA_INFO, CAMERA_TYPES, BagError, open_bag


@dataclass(frozen=True)
class ReplayConfig:
    """What to play and how. `topics` None: every Image, CompressedImage and CameraInfo topic.
    `remap` maps bag topic -> published topic. `start_s` skips that much of the bag's beginning.
    Before playing, wait up to `wait_for_subscribers_s` for a subscriber on each of `await_topics`
    (published names; None: every played topic)."""

    bag: Path
    rate: float = 1.0
    loop: bool = False
    start_s: float = 0.0
    topics: tuple[str, ...] | None = None
    remap: dict[str, str] = field(default_factory=dict)
    qos: str = "reliable"
    depth: int = 10
    wait_for_subscribers_s: float = 0.0
    await_topics: tuple[str, ...] | None = None
    ack_timeout_s: float = 10.0
    progress: bool = True

    def __post_init__(self) -> None:
        if self.rate <= 0:
            raise ValueError(f"rate must be > 0, got {self.rate}")
        if self.start_s < 0:
            raise ValueError(f"start must be >= 0 s, got {self.start_s}")
        if self.qos not in QOS_CHOICES:
            raise ValueError(f"qos must be one of {QOS_CHOICES}, got {self.qos!r}")


@dataclass
class ReplayStats:
    """Messages published per (published) topic, when each went out (system time, ns, in order), wall
    time of the playback, and whether every reliable subscriber acknowledged everything."""

    published: dict[str, int]
    publish_times_ns: dict[str, list[int]]
    wall_s: float
    all_acked: bool


def _selected(connections: list[Connection], topics: tuple[str, ...] | None, bag: Path) -> list[Connection]:
    if topics is None:
        chosen = [c for c in connections if c.msgtype in (*CAMERA_TYPES, CAMERA_INFO)]
        if not chosen:
            raise BagError(
                f"bag {bag} has no Image, CompressedImage or CameraInfo topic; "
                f"its topics: {sorted({c.topic for c in connections})}"
            )
        return chosen
    known = {c.topic for c in connections}
    missing = [t for t in topics if t not in known]
    if missing:
        raise BagError(f"topics {missing} not in bag {bag}; its topics: {sorted(known)}")
    return [c for c in connections if c.topic in topics]


def replay(client: ClientNode, config: ReplayConfig) -> ReplayStats:
    """Play `config.bag` through a `BagPlayer` on `client`'s node (which someone else may spin)."""
    reader = open_bag(config.bag)
    player: BagPlayer | None = None
    try:
        connections = _selected(list(reader.connections), config.topics, config.bag)
        topics: dict[str, str] = {}
        for conn in connections:
            topics.setdefault(config.remap.get(conn.topic, conn.topic), conn.msgtype)
        player = BagPlayer(client.node, topics, config.qos, config.depth)
        player.wait_for_subscribers(config.await_topics, config.wait_for_subscribers_s)
        bag_start = reader.start_time + round(config.start_s * 1e9)
        per_pass = None if config.loop or config.start_s > 0 else sum(c.msgcount for c in connections)
        wall_start = time.monotonic()
        progress = tqdm(
            total=per_pass, desc="replay", unit="msg", file=sys.stderr, disable=not config.progress
        )
        with progress:
            while True:
                stored = reader.messages(connections=connections, start=bag_start)
                messages = (
                    (config.remap.get(conn.topic, conn.topic), log_time, raw)
                    for conn, log_time, raw in stored
                )
                player.play(messages, bag_start, config.rate, progress.update)
                if not config.loop:
                    break
        all_acked = player.wait_for_all_acked(config.ack_timeout_s)
        wall_s = time.monotonic() - wall_start
        return ReplayStats(player.published, player.publish_times_ns, wall_s, all_acked)
    finally:
        reader.close()
        if player is not None:
            player.close()


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Register `replay`."""
    p = subparsers.add_parser(
        "replay",
        help="play a bag's camera topics into DDS with recorded timing",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("bag", type=Path)
    p.add_argument("--rate", type=float, default=1.0, help="playback speed factor")
    p.add_argument("--loop", action="store_true", help="play again from the start until interrupted")
    p.add_argument("--start", type=float, default=0.0, help="skip this many seconds of the bag")
    p.add_argument("--topics", nargs="+", default=None, help="topics to play (default: camera + camera_info)")
    p.add_argument("--remap", nargs="+", default=[], metavar="FROM:=TO", help="rename topics when publishing")
    p.add_argument(
        "--qos",
        choices=QOS_CHOICES,
        default="reliable",
        help="reliable (default; waits for acks at the end) or sensor (best effort)",
    )
    p.add_argument(
        "--wait-for-subscribers",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="wait up to this long for a subscriber on every played topic before playing",
    )
    p.add_argument("--ack-timeout", type=float, default=10.0, metavar="SECONDS")
    p.set_defaults(func=main_args)


def parse_remaps(items: list[str]) -> dict[str, str]:
    """`["/a:=/b", ...]` -> {"/a": "/b", ...}."""
    remap = {}
    for item in items:
        source, sep, target = item.partition(":=")
        if not sep or not source or not target:
            raise ValueError(f"remap must look like FROM:=TO, got {item!r}")
        remap[source] = target
    return remap


def main_args(args: argparse.Namespace) -> int:
    """Run `replay` from parsed arguments."""
    config = ReplayConfig(
        bag=args.bag,
        rate=args.rate,
        loop=args.loop,
        start_s=args.start,
        topics=tuple(args.topics) if args.topics else None,
        remap=parse_remaps(args.remap),
        qos=args.qos,
        wait_for_subscribers_s=args.wait_for_subscribers,
        ack_timeout_s=args.ack_timeout,
    )
    client = ClientNode("lingbot_map_replay")
    stats = None
    try:
        stats = replay(client, config)
    except KeyboardInterrupt:
        pass
    except Exception:
        if client.running():
            raise
        # else rclpy's SIGINT handler shut the context down under a publish: an interrupt, not a failure
    finally:
        # Ctrl-C reaches replay either as KeyboardInterrupt or as rclpy's context shutdown (the spin returns,
        # then replay returns early): both are an interrupt (exit 130), whichever thread the signal met.
        interrupted = stats is None or not client.running()
        client.close()
    if interrupted:
        print("replay interrupted", file=sys.stderr)
        return 130
    total = sum(stats.published.values())
    print(
        f"published {total} messages in {stats.wall_s:.1f} s "
        f"({', '.join(f'{t}: {n}' for t, n in stats.published.items())}); "
        f"{'all acknowledged' if stats.all_acked else 'NOT all acknowledged within the timeout'}"
    )
    return 0 if stats.all_acked else 1
