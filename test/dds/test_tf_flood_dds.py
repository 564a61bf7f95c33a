"""Distinct TF frame ids do not slow posing for good (issue 30), over real DDS on this CPU.

This process is the robot (wall-clock stamps): `odom -> base_link` on /tf at 30 Hz, the static extrinsics
`base_link -> camera_optical` on /tf_static, images at 10 Hz; the node (tiny preset on CPU, `tf.mode:
map_to_odom`: a TF lookup and three published edges per frame) poses them. Then 40,000 valid samples, each on
a new edge (`robot_part_N -> sensor_N`: a driver that puts a counter in its frame ids), arrive as fast as DDS
takes them, then silence. Afterwards the odometry rate must be at least 80 % of the rate before; a second
flood of 40,000 other edges must not grow the node's RSS by more than `RSS_GROWTH_MB` (the first fills the
caps): the TF store keeps at most its caps of edges
(engine/mapping/tf_graph.py; `tf.edges_evicted` in /diagnostics counts what it dropped) and the one-parent
guard reads only what changed. Before issue 30 each published edge copied and scanned the whole graph twice
(150,000 edges: odometry 10.1 -> 2.3/s for good, RSS +199 MB).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import numpy as np
import psutil
import pytest
from builtin_interfaces.msg import Time
from diagnostic_msgs.msg import DiagnosticArray
from nav_msgs.msg import Odometry
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from ros_helpers import NodeProcess, RosClient, start_tiny_node
from sensor_msgs.msg import Image
from std_msgs.msg import Header
from tf2_msgs.msg import TFMessage

from lingbot_map_ros.engine.mapping.tf_graph import MAX_DYNAMIC_EDGES, MAX_STATIC_EDGES
from lingbot_map_ros.ros.diagnostics.stats import diagnostic_values
from lingbot_map_ros.ros.messages.conversions import rgb_to_image
from lingbot_map_ros.ros.messages.poses import transform_msg

pytestmark = pytest.mark.dds

NS = "tf_flood"
RELIABLE = QoSProfile(depth=200, reliability=ReliabilityPolicy.RELIABLE)
FLOOD_QOS = QoSProfile(depth=1000, reliability=ReliabilityPolicy.RELIABLE)
STATIC = QoSProfile(
    depth=10, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL
)
EDGES = 40_000
PER_MESSAGE = 500
WINDOW_S = 8.0
RSS_GROWTH_MB = 15.0


def now() -> Time:
    ns = time.time_ns()
    return Time(sec=ns // 1_000_000_000, nanosec=ns % 1_000_000_000)


def edge(parent: str, child: str, stamp: Time, x: float = 0.1, q: tuple = (0.0, 0.0, 0.0, 1.0)) -> object:
    tf = transform_msg(np.eye(4), stamp, parent, child)
    tf.transform.translation.x = x
    tf.transform.rotation.x, tf.transform.rotation.y, tf.transform.rotation.z, tf.transform.rotation.w = q
    return tf


class Robot:
    """Odometry at 30 Hz and images at 10 Hz from threads of this process."""

    def __init__(self, client: RosClient) -> None:
        self.tf = client.publisher(TFMessage, "/tf", FLOOD_QOS)
        self.static = client.publisher(TFMessage, "/tf_static", STATIC)
        self.static.publish(
            TFMessage(transforms=[edge("base_link", "camera_optical", Time(), q=(-0.5, 0.5, -0.5, 0.5))])
        )
        self.image = client.publisher(Image, f"/{NS}/image", RELIABLE)
        rgb = np.random.default_rng(5).integers(0, 256, (48, 64, 3), dtype=np.uint8)
        self.msg = rgb_to_image(rgb, Header(frame_id="camera_optical"))
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=t, daemon=True) for t in (self._odometry, self._camera)]
        for thread in self.threads:
            thread.start()

    def _odometry(self) -> None:
        while not self.stop.wait(1 / 30):
            x = 0.01 * (time.time() % 10)
            self.tf.publish(TFMessage(transforms=[edge("odom", "base_link", now(), x=x)]))

    def _camera(self) -> None:
        while not self.stop.wait(0.1):
            self.msg.header.stamp = now()
            self.image.publish(self.msg)

    def flood(self, edges: int, first: int = 0) -> None:
        """`edges` samples, each on a new edge, `PER_MESSAGE` transforms a message, as fast as possible."""
        for start in range(first, first + edges, PER_MESSAGE):
            stamp = now()
            transforms = [
                edge(f"robot_part_{i}", f"sensor_{i}", stamp) for i in range(start, start + PER_MESSAGE)
            ]
            self.tf.publish(TFMessage(transforms=transforms))


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RosClient, Robot, NodeProcess]]:
    with RosClient("tf_flood_test") as client:
        robot = Robot(client)
        params = {"tf.mode": "map_to_odom", "tf.timeout": 0.3, "diagnostics_rate": 2.0}
        node = start_tiny_node(
            tmp_path_factory.mktemp("tf_flood"), "lingbot_map", params, namespace=f"/{NS}", client=client
        )
        try:
            yield client, robot, node
            assert node.alive(), node.output()[-3000:]
        finally:
            robot.stop.set()
            code = node.stop()
        assert code == 0, node.output()[-3000:]


def odometry_rate(odometry: object, node: NodeProcess, seconds: float) -> float:
    start, t0 = len(odometry), time.monotonic()
    while time.monotonic() - t0 < seconds:
        assert node.alive(), node.output()[-3000:]
        time.sleep(0.1)
    return (len(odometry) - start) / (time.monotonic() - t0)


def test_distinct_edges_leave_posing_as_it_was_and_memory_bounded(
    live: tuple[RosClient, Robot, NodeProcess],
) -> None:
    """Two floods of `EDGES` new edges each: posing after the first is >= 80 % of before; the first fills the
    store's caps, so the second must not grow the RSS by more than `RSS_GROWTH_MB` (before issue 30: odometry
    9.68 -> 0.86/s, RSS +69.3 MB then +37.6 MB; after: 6.25 -> 9.42/s, +33.5 MB then +5.4 MB)."""
    client, robot, node = live
    odometry = client.collect(Odometry, f"/{NS}/lingbot_map/odometry", RELIABLE)
    diagnostics = client.collect(DiagnosticArray, "/diagnostics", RELIABLE)
    odometry.wait_for(20, timeout=120)  # the model is warm and the robot's TF stored
    process = psutil.Process(node.pid)
    baseline = odometry_rate(odometry, node, WINDOW_S)
    mine = f"/{NS}/lingbot_map: mapping"
    rss = [process.memory_info().rss]
    for flood in range(2):
        robot.flood(EDGES, first=flood * EDGES)

        def stored(msgs: list, want: int = (flood + 1) * EDGES) -> bool:  # stored or kept unread
            taken = [diagnostic_values(m, mine) for m in msgs]
            return any(int(v.get("tf.samples", "0")) + int(v.get("tf.unread", "0")) >= want for v in taken)

        msgs = diagnostics.wait_for(stored, timeout=60)
        if flood == 0:
            after = odometry_rate(odometry, node, WINDOW_S)
        rss.append(process.memory_info().rss)
    growth_mb = [(b - a) / 2**20 for a, b in zip(rss, rss[1:], strict=False)]
    print(
        f"odometry {baseline:.2f}/s -> {after:.2f}/s, RSS +{growth_mb[0]:.1f} MB, then +{growth_mb[1]:.1f} MB"
    )
    values = diagnostic_values(msgs[-1], mine)
    # past FULL_STORE_EDGES stored frames the flood's edges are kept unread (tf_ingest.py), else evicted
    assert int(values.get("tf.unread", 0)) + int(values.get("tf.edges_evicted", 0)) > 0, values
    assert int(values["tf.edges"]) <= MAX_DYNAMIC_EDGES + MAX_STATIC_EDGES, values
    assert baseline >= 2.0, baseline
    assert after >= 0.8 * baseline, (baseline, after)
    assert growth_mb[1] <= RSS_GROWTH_MB, growth_mb
