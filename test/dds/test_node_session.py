"""Maps that survive a restart, over real DDS (node processes, tiny preset, CPU, ../shared/data/loop frames).

Node A maps frames 0..N and answers `~/save_session`; it is stopped with SIGINT. Node B starts with
`session.load_path`: its `~/map_cloud` (transient local) carries the saved points at once, and frame S0 (the
first after A's anchor phase: both attend to the anchors alone) gets exactly A's odometry for it, in the same
map frame; later frames keep coming. Localisation mode (`mapping.enabled: false`) keeps the map's point count
while poses flow. A bad name or a path outside `session.dir` is one refusal, and the node keeps its map.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest
from builtin_interfaces.msg import Time
from nav_msgs.msg import Odometry
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from ros_helpers import TINY_NODE_PARAMS, NodeProcess, RosClient, load_frames, write_params_file
from ros_messages import cloud_to_points
from sensor_msgs.msg import Image, PointCloud2
from std_msgs.msg import Header
from std_srvs.srv import Trigger

from lingbot_map_ros.ros.messages.conversions import rgb_to_image

pytestmark = pytest.mark.dds

NS = "/session_test"
NODE = f"{NS}/lingbot_map"
IMAGE_TOPIC = "/session_cam/image_raw"
S0 = TINY_NODE_PARAMS["kv_cache.scale_frames"]
RELIABLE = QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE)
LATCHED = QoSProfile(
    depth=1, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL
)
PARAMS = {
    **TINY_NODE_PARAMS,
    "map_publish_rate": 10.0,
}


def stamp(i: int) -> Time:
    return Time(sec=2000 + i // 10, nanosec=(i % 10) * 100_000_000)


def start(tmp: Path, client: RosClient, **params: object) -> NodeProcess:
    tmp.mkdir(parents=True, exist_ok=True)
    proc = NodeProcess.start(
        tmp,
        name="lingbot_map",
        namespace=NS,
        params_file=write_params_file(tmp / "params.yaml", PARAMS),
        params={"output_dir": str(tmp / "maps"), "session.dir": str(tmp / "sessions"), **params},
        remaps={"image": IMAGE_TOPIC},
    )
    proc.wait_ready(client, [f"{NODE}/save_session", f"{NODE}/load_session"])
    return proc


def publish(client: RosClient, pub: object, frames: list[np.ndarray], indices: range) -> None:
    for i in indices:
        pub.publish(rgb_to_image(frames[i], Header(stamp=stamp(i), frame_id="loop_cam")))
        time.sleep(0.02)


def pose_of(msg: Odometry) -> np.ndarray:
    p, q = msg.pose.pose.position, msg.pose.pose.orientation
    return np.array([p.x, p.y, p.z, q.x, q.y, q.z, q.w])


def by_stamp(msgs: list[Odometry]) -> dict[tuple[int, int], np.ndarray]:
    return {(m.header.stamp.sec, m.header.stamp.nanosec): pose_of(m) for m in msgs}


def test_save_kill_load_continues_the_map_frame(ros_client: RosClient, tmp_path: Path) -> None:
    frames = load_frames(S0 + 9, step=3)
    pub = ros_client.publisher(Image, IMAGE_TOPIC, RELIABLE)
    odometry = ros_client.collect(Odometry, f"{NODE}/odometry", RELIABLE)
    node_a = start(tmp_path / "a", ros_client)
    try:
        ros_client.wait_for_subscribers(pub)
        ros_client.wait_for_publishers(odometry)
        early = ros_client.call(Trigger, f"{NODE}/save_session")
        assert not early.success and "anchor phase has not completed" in early.message
        publish(ros_client, pub, frames, range(S0 + 6))
        odom_a = by_stamp(odometry.wait_for(S0 + 6, timeout=60))
        saved = ros_client.call(Trigger, f"{NODE}/save_session")
        assert saved.success, saved.message
        assert "session.load_path:=session_" in saved.message
        ros_client.set_parameters(NODE, {"session.save_with_map": True})
        with_map = ros_client.call(Trigger, f"{NODE}/save_map")
        assert with_map.success and "map: " in with_map.message and "session: " in with_map.message
    finally:
        assert node_a.stop() == 0, node_a.output()
    sessions = sorted((tmp_path / "a" / "sessions").iterdir())
    assert len(sessions) == 2 and all((s / "manifest.json").is_file() for s in sessions)
    with np.load(sessions[0] / "loop.npz") as saved_loop:  # loop closure (on by default): its keyframe map
        saved_keyframes = len(saved_loop["kf_keys"])
    assert saved_keyframes > 0
    name = sessions[0].name

    odometry.clear()
    map_cloud = ros_client.collect(PointCloud2, f"{NODE}/map_cloud", LATCHED)
    # Node B reads the session from A's folder (session.dir), loaded at activate.
    node_b = start(
        tmp_path / "b",
        ros_client,
        **{"session.dir": str(tmp_path / "a" / "sessions"), "session.load_path": name},
    )
    try:
        cloud = map_cloud.wait_for(lambda msgs: any(m.width > 0 for m in msgs), timeout=60)
        loaded_points = max(m.width for m in cloud)
        assert loaded_points > 100
        deadline = time.monotonic() + 10.0  # the node's log line may reach its file after the cloud
        while "loaded session" not in node_b.output() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert "loaded session" in node_b.output()
        assert f"{saved_keyframes} loop closure keyframes" in node_b.output(), node_b.output()[-2000:]
        ros_client.wait_for_subscribers(pub)
        publish(ros_client, pub, frames, range(S0, S0 + 1))
        (first,) = odometry.wait_for(1, timeout=60)
        assert (first.header.stamp.sec, first.header.stamp.nanosec) == (stamp(S0).sec, stamp(S0).nanosec)
        np.testing.assert_array_equal(pose_of(first), odom_a[(stamp(S0).sec, stamp(S0).nanosec)])

        # Localisation mode: poses go on, the map keeps its points.
        ros_client.set_parameters(NODE, {"mapping.enabled": False})
        map_cloud.clear()
        publish(ros_client, pub, frames, range(S0 + 1, S0 + 8))
        odometry.wait_for(8, timeout=60)
        time.sleep(0.5)  # a map publish period
        widths = [m.width for m in map_cloud.messages]
        assert all(w == loaded_points for w in widths), widths
        saved_map = ros_client.call(Trigger, f"{NODE}/save_map")
        assert saved_map.success and f"({loaded_points} points)" in saved_map.message, saved_map.message

        # A path outside session.dir is refused when set; an unknown name when loaded: the map stays.
        for bad in ("../a", "/etc", "a/../../b", ".hidden"):
            (result,) = ros_client.set_parameters(NODE, {"session.load_path": bad})
            assert not result.successful and "one folder name below session.dir" in result.reason, bad
        ros_client.set_parameters(NODE, {"session.load_path": "no_such_session"})
        response = ros_client.call(Trigger, f"{NODE}/load_session")
        assert not response.success and "is not a folder" in response.message, response.message
        ros_client.set_parameters(NODE, {"mapping.enabled": True})
        map_cloud.clear()
        publish(ros_client, pub, frames, range(S0 + 8, S0 + 9))
        odometry.wait_for(9, timeout=60)
        grown = map_cloud.wait_for(lambda msgs: any(m.width > loaded_points for m in msgs), timeout=10)
        assert cloud_to_points(grown[-1])[0].shape[0] > loaded_points
    finally:
        assert node_b.stop() == 0, node_b.output()
