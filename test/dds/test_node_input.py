"""Input side of the node over real DDS: CompressedImage transport, and a flood faster than inference
(drop-oldest with the count in /diagnostics, bounded queue and memory, outputs still in order)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import psutil
import pytest
from builtin_interfaces.msg import Time
from diagnostic_msgs.msg import DiagnosticArray
from nav_msgs.msg import Odometry
from rclpy.qos import QoSProfile, ReliabilityPolicy
from ros_helpers import RosClient, load_frames, start_tiny_node
from ros_messages import rgb_to_compressed
from sensor_msgs.msg import CompressedImage, Image
from std_msgs.msg import Header

from lingbot_map_ros.ros.diagnostics.stats import diagnostic_values
from lingbot_map_ros.ros.messages.conversions import rgb_to_image

pytestmark = pytest.mark.dds

RELIABLE = QoSProfile(depth=500, reliability=ReliabilityPolicy.RELIABLE)
#: What these tests change of the base parameters (`TINY_NODE_PARAMS`).
INPUT_PARAMS = {"kv_cache.scale_frames": 2, "diagnostics_rate": 20.0, "publish.frame_cloud": False}


def latest(collector: object, predicate: object, timeout: float = 30.0) -> dict[str, str]:
    msgs = collector.wait_for(lambda ms: any(predicate(diagnostic_values(m)) for m in ms), timeout)
    return [v for v in map(diagnostic_values, msgs) if predicate(v)][-1]


def stamp_pairs(msgs: list[object]) -> list[tuple[int, int]]:
    return [(m.header.stamp.sec, m.header.stamp.nanosec) for m in msgs]


@pytest.fixture(scope="module")
def frames() -> list[np.ndarray]:
    return load_frames(8, step=5)


@pytest.fixture
def compressed_node(ros_client: RosClient, tmp_path: Path) -> Iterator[str]:
    ns = "/compressed_test"
    proc = start_tiny_node(
        tmp_path,
        "lingbot_map",
        INPUT_PARAMS,
        {"image_transport": "compressed", "queue_size": 10},
        namespace=ns,
        client=ros_client,
    )
    yield ns
    assert proc.stop() == 0, proc.output()
    assert "image/compressed" in proc.output()


def test_compressed_image_input(
    ros_client: RosClient, compressed_node: str, frames: list[np.ndarray]
) -> None:
    ns = compressed_node
    odom = ros_client.collect(Odometry, f"{ns}/lingbot_map/odometry", RELIABLE)
    diagnostics = ros_client.collect(DiagnosticArray, "/diagnostics", RELIABLE)
    pub = ros_client.publisher(CompressedImage, f"{ns}/image/compressed", RELIABLE)
    ros_client.wait_for_subscribers(pub)
    ros_client.wait_for_publishers(odom, diagnostics)
    for i in range(6):
        header = Header(stamp=Time(sec=500 + i), frame_id="cam")
        pub.publish(rgb_to_compressed(frames[i], header, fmt="jpeg" if i % 2 else "png"))
    assert stamp_pairs(odom.wait_for(6)) == [(500 + i, 0) for i in range(6)]
    pub.publish(CompressedImage(header=Header(stamp=Time(sec=600)), format="jpeg", data=b"\xff\xd8garbage"))
    latest(diagnostics, lambda v: v.get("rejected_undecodable_image") == "1")


def test_flood_drops_oldest_counts_and_stays_bounded(
    ros_client: RosClient, tmp_path: Path, frames: list[np.ndarray]
) -> None:
    ns = "/flood_test"
    flood = {"queue_size": 1, "qos.depth": 500, "model.image_width": 112}
    proc = start_tiny_node(tmp_path, "lingbot_map", INPUT_PARAMS, flood, namespace=ns, client=ros_client)
    try:
        odom = ros_client.collect(Odometry, f"{ns}/lingbot_map/odometry", RELIABLE)
        diagnostics = ros_client.collect(DiagnosticArray, "/diagnostics", RELIABLE)
        pub = ros_client.publisher(Image, f"{ns}/image", RELIABLE)
        ros_client.wait_for_subscribers(pub)
        ros_client.wait_for_publishers(odom, diagnostics)
        msgs = [rgb_to_image(f, Header(frame_id="cam")) for f in frames]
        burst, sent = 300, 0  # a burst stays within the 500-deep DDS histories, so nothing is lost in DDS

        def flood_and_settle(bursts: int) -> dict[str, str]:
            """Publish `bursts` bursts back to back; after each, wait until the node took every frame."""
            nonlocal sent
            for _ in range(bursts):
                for i in range(sent, sent + burst):
                    msg = msgs[i % len(msgs)]
                    msg.header.stamp = Time(sec=i // 100, nanosec=(i % 100) * 10_000_000)
                    pub.publish(msg)
                sent += burst
                total = str(sent)
                diag = latest(
                    diagnostics,
                    lambda v, total=total: (
                        v.get("frames_received") == total
                        and v.get("queue_length") == "0"
                        and v.get("frames_in_flight") == "0"
                    ),
                )
            return diag

        flood_and_settle(2)  # warm-up: anchor phase, cache allocation, the allocator's high-water mark
        rss_before = psutil.Process(proc.pid).memory_info().rss
        diag = flood_and_settle(2)
        growth_mb = (psutil.Process(proc.pid).memory_info().rss - rss_before) / 2**20

        dropped, processed = int(diag["frames_dropped"]), int(diag["frames_processed"])
        assert dropped > 2 * burst, diag  # inference (~40 ms a frame) is far slower than a burst
        assert processed + dropped == 4 * burst, diag
        assert diag["queue_max_length"] == "1", diag  # never more than queue_size frames waiting
        assert "dropped" in diagnostics.messages[-1].status[0].message
        assert growth_mb < 30, f"node RSS grew {growth_mb:.0f} MB over {2 * burst} more flooded frames"
        time.sleep(0.3)
        out = stamp_pairs(odom.messages)
        assert len(out) == processed and out == sorted(out)  # every processed frame published, in order
    finally:
        assert proc.stop() == 0, proc.output()
