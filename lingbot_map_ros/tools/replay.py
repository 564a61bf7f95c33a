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

import rclpy
from rclpy.duration import Duration
from rclpy.node import Node
from rclpy.publisher import Publisher
from rosbags.interfaces import Connection
from tqdm import tqdm

from lingbot_map_ros.tools.bag_io import CAMERA_INFO, CAMERA_TYPES, BagError, open_bag
from lingbot_map_ros.tools.dds import QOS_CHOICES, message_class, publisher_qos


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
            raise BagError(f"bag {bag} has no Image, CompressedImage or CameraInfo topic; "
                           f"its topics: {sorted({c.topic for c in connections})}")
        return chosen
    known = {c.topic for c in connections}
    missing = [t for t in topics if t not in known]
    if missing:
        raise BagError(f"topics {missing} not in bag {bag}; its topics: {sorted(known)}")
    return [c for c in connections if c.topic in topics]


def replay(node: Node, config: ReplayConfig) -> ReplayStats:
    """Play `config.bag` through publishers created on `node` (which someone else may spin)."""
    reader = open_bag(config.bag)
    publishers: dict[str, Publisher] = {}
    try:
        connections = _selected(list(reader.connections), config.topics, config.bag)
        qos = publisher_qos(config.qos, config.depth)
        for conn in connections:
            name = config.remap.get(conn.topic, conn.topic)
            if name not in publishers:
                publishers[name] = node.create_publisher(message_class(conn.msgtype), name, qos)
        awaited = {name: pub for name, pub in publishers.items()
                   if config.await_topics is None or name in config.await_topics}
        _wait_for_subscribers(node, awaited, config.wait_for_subscribers_s)
        bag_start = reader.start_time + round(config.start_s * 1e9)
        per_pass = None if config.loop or config.start_s > 0 else sum(c.msgcount for c in connections)
        published = dict.fromkeys(publishers, 0)
        publish_times: dict[str, list[int]] = {name: [] for name in publishers}
        wall_start = time.monotonic()
        progress = tqdm(total=per_pass, desc="replay", unit="msg", file=sys.stderr,
                        disable=not config.progress)
        with progress:
            while True:
                pass_start = time.monotonic()
                for conn, log_time, raw in reader.messages(connections=connections, start=bag_start):
                    delay = pass_start + (log_time - bag_start) / 1e9 / config.rate - time.monotonic()
                    if delay > 0:
                        time.sleep(delay)
                    name = config.remap.get(conn.topic, conn.topic)
                    publishers[name].publish(bytes(raw))
                    publish_times[name].append(time.time_ns())
                    published[name] += 1
                    progress.update()
                if not config.loop:
                    break
        all_acked = all(p.wait_for_all_acked(Duration(seconds=config.ack_timeout_s))
                        for p in publishers.values())
        return ReplayStats(published, publish_times, time.monotonic() - wall_start, all_acked)
    finally:
        reader.close()
        for pub in publishers.values():
            node.destroy_publisher(pub)


def _wait_for_subscribers(node: Node, publishers: dict[str, Publisher], timeout_s: float) -> None:
    """Block until every publisher in `publishers` has a subscriber or `timeout_s` passed (0: no wait)."""
    deadline = time.monotonic() + timeout_s
    while timeout_s > 0 and time.monotonic() < deadline:
        if all(p.get_subscription_count() > 0 for p in publishers.values()):
            return
        time.sleep(0.05)
    if timeout_s > 0:
        lonely = [n for n, p in publishers.items() if p.get_subscription_count() == 0]
        node.get_logger().warning(f"no subscriber after {timeout_s:g} s on {lonely}; playing anyway")


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Register `replay`."""
    p = subparsers.add_parser("replay", help="play a bag's camera topics into DDS with recorded timing",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("bag", type=Path)
    p.add_argument("--rate", type=float, default=1.0, help="playback speed factor")
    p.add_argument("--loop", action="store_true", help="play again from the start until interrupted")
    p.add_argument("--start", type=float, default=0.0, help="skip this many seconds of the bag")
    p.add_argument("--topics", nargs="+", default=None, help="topics to play (default: camera + camera_info)")
    p.add_argument("--remap", nargs="+", default=[], metavar="FROM:=TO", help="rename topics when publishing")
    p.add_argument("--qos", choices=QOS_CHOICES, default="reliable",
                   help="reliable (default; waits for acks at the end) or sensor (best effort)")
    p.add_argument("--wait-for-subscribers", type=float, default=0.0, metavar="SECONDS",
                   help="wait up to this long for a subscriber on every played topic before playing")
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
    config = ReplayConfig(bag=args.bag, rate=args.rate, loop=args.loop, start_s=args.start,
                          topics=tuple(args.topics) if args.topics else None, remap=parse_remaps(args.remap),
                          qos=args.qos, wait_for_subscribers_s=args.wait_for_subscribers,
                          ack_timeout_s=args.ack_timeout)
    rclpy.init()
    node = rclpy.create_node("lingbot_map_replay")
    try:
        stats = replay(node, config)
    except KeyboardInterrupt:
        print("replay interrupted", file=sys.stderr)
        return 130
    finally:
        node.destroy_node()
        rclpy.try_shutdown()
    total = sum(stats.published.values())
    print(f"published {total} messages in {stats.wall_s:.1f} s "
          f"({', '.join(f'{t}: {n}' for t, n in stats.published.items())}); "
          f"{'all acknowledged' if stats.all_acked else 'NOT all acknowledged within the timeout'}")
    return 0 if stats.all_acked else 1
