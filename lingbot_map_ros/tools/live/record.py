"""`lingbot-map-ros record -o BAG`: record the node's outputs (TF, odometry, path, clouds; depth on
request) into a rosbag2 bag, until SIGINT, `--duration` or `--until-idle`.

Topics are subscribed as they appear (generic raw subscriptions, QoS matched to the publishers as
`ros2 bag record` does), and the serialised bytes go straight into the bag at their receive time.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from tqdm import tqdm

from lingbot_map_ros.ros.dds_tools.bag_recorder import RawTopicSubscriber
from lingbot_map_ros.ros.dds_tools.client import ClientNode
from lingbot_map_ros.tools.bags.bag_io import STORAGE_PLUGINS, BagWriter


def node_output_topics(
    node_name: str = "lingbot_map", namespace: str = "", depth: bool = False
) -> tuple[str, ...]:
    """The node's published topics worth recording (issue 5's interface), fully qualified."""
    prefix = f"{namespace.rstrip('/')}/{node_name}" if namespace else f"/{node_name}"
    topics = [
        "/tf",
        "/tf_static",
        f"{prefix}/odometry",
        f"{prefix}/path",
        f"{prefix}/map_cloud",
        f"{prefix}/frame_cloud",
        f"{prefix}/camera_info",
        "/diagnostics",
    ]
    if depth:
        topics.append(f"{prefix}/depth")
    return tuple(topics)


@dataclass(frozen=True)
class RecordConfig:
    """Output bag, topics (fully qualified names), and when to stop (None: never, i.e. until SIGINT)."""

    output: Path
    topics: tuple[str, ...]
    storage: str = "mcap"
    duration_s: float | None = None
    until_idle_s: float | None = None
    discovery_period_s: float = 0.1

    def __post_init__(self) -> None:
        if not self.topics:
            raise ValueError("record needs at least one topic")
        if any(not t.startswith("/") for t in self.topics):
            raise ValueError(f"record topics must be fully qualified (start with '/'), got {self.topics}")
        for name, value in (("duration", self.duration_s), ("until-idle", self.until_idle_s)):
            if value is not None and value <= 0:
                raise ValueError(f"{name} must be > 0 s, got {value}")


@dataclass
class RecordStats:
    """Messages recorded per topic and the topics that never appeared."""

    recorded: dict[str, int] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)


class Recorder:
    """Subscribes on `client`'s node (spun by the caller) to `config.topics` as they appear (a
    `RawTopicSubscriber`) and writes the bag.

    Thread-safe: callbacks may run on any executor thread. `close()` finishes the bag."""

    def __init__(self, client: ClientNode, config: RecordConfig) -> None:
        self._config = config
        self._lock = threading.Lock()
        self._writer = BagWriter(config.output, config.storage).__enter__()
        self._counts: dict[str, int] = {}
        self.last_message_time = time.monotonic()
        self.started = time.monotonic()
        self._subscriber = RawTopicSubscriber(
            client.node, config.topics, self._write, config.discovery_period_s
        )

    def _write(self, topic: str, msgtype: str, data: bytes, stamp_ns: int) -> None:
        with self._lock:
            if self._writer is None:
                return
            self._writer.write_raw(topic, msgtype, data, stamp_ns)
            self._counts[topic] = self._counts.get(topic, 0) + 1
            self.last_message_time = time.monotonic()

    @property
    def total(self) -> int:
        """Messages recorded so far."""
        with self._lock:
            return sum(self._counts.values())

    def should_stop(self) -> bool:
        """True once `duration_s` passed, or `until_idle_s` passed without a message after the first one."""
        now = time.monotonic()
        if self._config.duration_s is not None and now - self.started >= self._config.duration_s:
            return True
        idle = self._config.until_idle_s
        return idle is not None and self.total > 0 and now - self.last_message_time >= idle

    def close(self) -> RecordStats:
        """Stop subscribing and finish the bag (metadata.yaml); returns what was recorded. Idempotent."""
        with self._lock:
            writer, self._writer = self._writer, None
        if writer is not None:
            self._subscriber.close()
            writer.__exit__(None, None, None)
        with self._lock:
            missing = [t for t in self._config.topics if t not in self._counts]
            return RecordStats(dict(self._counts), missing)


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Register `record`."""
    p = subparsers.add_parser(
        "record",
        help="record the node's outputs (TF, odometry, path, clouds)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("-o", "--output", type=Path, required=True, help="bag folder to create (must not exist)")
    p.add_argument("--topics", nargs="+", default=None, help="fully qualified topics (default: node outputs)")
    p.add_argument("--node-name", default="lingbot_map", help="node whose outputs to record")
    p.add_argument("--namespace", default="", help="the node's namespace")
    p.add_argument("--depth", action="store_true", help="also record ~/depth (large)")
    p.add_argument("--storage", choices=sorted(STORAGE_PLUGINS), default="mcap")
    p.add_argument("--duration", type=float, default=None, help="stop after this many seconds")
    p.add_argument(
        "--until-idle",
        type=float,
        default=None,
        metavar="SECONDS",
        help="stop once no message arrived for this long (after the first one)",
    )
    p.set_defaults(func=main_args)


def main_args(args: argparse.Namespace) -> int:
    """Run `record` from parsed arguments."""
    topics = (
        tuple(args.topics) if args.topics else node_output_topics(args.node_name, args.namespace, args.depth)
    )
    config = RecordConfig(
        output=args.output,
        topics=topics,
        storage=args.storage,
        duration_s=args.duration,
        until_idle_s=args.until_idle,
    )
    client = ClientNode("lingbot_map_record")
    recorder = Recorder(client, config)
    # Ctrl-C ends the recording; the bag is still finished below
    with tqdm(desc="record", unit="msg", file=sys.stderr) as progress, contextlib.suppress(KeyboardInterrupt):
        client.spin_until(recorder.should_stop, lambda: progress.update(recorder.total - progress.n))
    stats = recorder.close()
    client.close()
    print(
        f"recorded {sum(stats.recorded.values())} messages to {config.output}: "
        + ", ".join(f"{t}: {n}" for t, n in sorted(stats.recorded.items()))
    )
    if stats.missing:
        print(f"never published: {', '.join(stats.missing)}", file=sys.stderr)
    return 0
