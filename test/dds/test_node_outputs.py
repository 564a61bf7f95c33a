"""The node over real DDS (subprocess, tiny preset on CPU, frames of ../shared/data/loop): outputs, reset,
live sliding window, parameter rejection, save_map, rejected frames.

One node serves the whole module; every test starts with `~/reset`, so the order of the tests does not matter.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from builtin_interfaces.msg import Time
from diagnostic_msgs.msg import DiagnosticArray
from nav_msgs.msg import Odometry
from nav_msgs.msg import Path as PathMsg
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from ros_helpers import TINY_NODE_PARAMS, NodeProcess, RosClient, load_frames, write_params_file
from ros_messages import cloud_to_points, image_to_depth
from sensor_msgs.msg import CameraInfo, Image, PointCloud2
from std_msgs.msg import Header
from std_srvs.srv import Trigger
from tf2_msgs.msg import TFMessage

from lingbot_map_ros.engine.geometry import invert_rigid
from lingbot_map_ros.engine.mapping.grid import read_pgm
from lingbot_map_ros.engine.mapping.voxel_map import read_ply, read_tum
from lingbot_map_ros.ros.diagnostics.stats import diagnostic_values
from lingbot_map_ros.ros.messages.conversions import rgb_to_image
from lingbot_map_ros.ros.params.declare import PARAMETERS
from lingbot_map_ros.ros.tf.broadcaster import TF_QOS
from lingbot_map_ros.ros.tf.listener import transform_to_matrix

pytestmark = pytest.mark.dds

NS = "/outputs_test"
NODE = f"{NS}/lingbot_map"
IMAGE_TOPIC = "/outputs_cam/image_raw"
CAMERA_FRAME = "loop_cam"
SCALE_FRAMES = TINY_NODE_PARAMS["kv_cache.scale_frames"]
MAX_POSES = 10  # trajectory.max_poses: test_save_map_drops_the_oldest_poses_beyond_the_cap goes past it
RELIABLE = QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE)
LATCHED = QoSProfile(
    depth=1, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL
)
PARAMS = {
    **TINY_NODE_PARAMS,
    "map_publish_rate": 10.0,
    "diagnostics_rate": 20.0,
    "trajectory.max_poses": MAX_POSES,
}


class Streams:
    """Every output of the node, collected from the start of the module."""

    def __init__(self, client: RosClient) -> None:
        self.tf = client.collect(TFMessage, "/tf", TF_QOS)
        self.odometry = client.collect(Odometry, f"{NODE}/odometry", RELIABLE)
        self.path = client.collect(PathMsg, f"{NODE}/path", RELIABLE)
        self.depth = client.collect(Image, f"{NODE}/depth", RELIABLE)
        self.camera_info = client.collect(CameraInfo, f"{NODE}/camera_info", RELIABLE)
        self.frame_cloud = client.collect(PointCloud2, f"{NODE}/frame_cloud", RELIABLE)
        self.map_cloud = client.collect(PointCloud2, f"{NODE}/map_cloud", LATCHED)
        self.diagnostics = client.collect(DiagnosticArray, "/diagnostics", RELIABLE)
        self.image_pub = client.publisher(Image, IMAGE_TOPIC, RELIABLE)

    def clear(self) -> None:
        for collector in (
            self.tf,
            self.odometry,
            self.path,
            self.depth,
            self.camera_info,
            self.frame_cloud,
            self.map_cloud,
            self.diagnostics,
        ):
            collector.clear()

    def latest_diagnostics(self, predicate: object = None, timeout: float = 10.0) -> dict[str, str]:
        """Values of the newest /diagnostics message (that satisfies `predicate`, if given)."""

        def match(msgs: list[DiagnosticArray]) -> bool:
            values = [diagnostic_values(m) for m in msgs]
            return any(v and (predicate is None or predicate(v)) for v in values)

        msgs = self.diagnostics.wait_for(match, timeout)
        values = [diagnostic_values(m) for m in msgs if diagnostic_values(m)]
        return [v for v in values if predicate is None or predicate(v)][-1]


@pytest.fixture(scope="module")
def node(ros_client: RosClient, tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    tmp = tmp_path_factory.mktemp("node_outputs")
    params_file = write_params_file(tmp / "params.yaml", PARAMS)
    proc = NodeProcess.start(
        tmp,
        name="lingbot_map",
        namespace=NS,
        params_file=params_file,
        params={"output_dir": str(tmp / "maps")},
        remaps={"image": IMAGE_TOPIC},
    )
    proc.wait_ready(ros_client, [f"{NODE}/reset", f"{NODE}/save_map"])
    yield proc
    code = proc.stop()
    assert code == 0, proc.output()


@pytest.fixture(scope="module")
def streams(ros_client: RosClient, node: NodeProcess) -> Streams:
    streams = Streams(ros_client)
    ros_client.wait_for_subscribers(streams.image_pub)
    ros_client.wait_for_publishers(
        streams.odometry,
        streams.path,
        streams.depth,
        streams.camera_info,
        streams.frame_cloud,
        streams.map_cloud,
        streams.diagnostics,
        streams.tf,
    )
    return streams


@pytest.fixture(scope="module")
def frames() -> list[np.ndarray]:
    return load_frames(24, step=3)


@pytest.fixture
def fresh(ros_client: RosClient, streams: Streams) -> Streams:
    """Reset the node and the collectors before a test."""
    response = ros_client.call(Trigger, f"{NODE}/reset")
    assert response.success, response.message
    time.sleep(0.2)  # the reset's empty path/map are in flight
    streams.clear()
    return streams


def stamp(i: int) -> Time:
    return Time(sec=1000 + i // 10, nanosec=(i % 10) * 100_000_000)


def publish(streams: Streams, frames: list[np.ndarray], indices: range) -> None:
    for i in indices:
        msg = rgb_to_image(frames[i % len(frames)], Header(stamp=stamp(i), frame_id=CAMERA_FRAME))
        streams.image_pub.publish(msg)
        time.sleep(0.01)


def stamps(msgs: list[object]) -> list[tuple[int, int]]:
    return [(m.header.stamp.sec, m.header.stamp.nanosec) for m in msgs]


def as_pairs(indices: range) -> list[tuple[int, int]]:
    return [(stamp(i).sec, stamp(i).nanosec) for i in indices]


def test_outputs_arrive_in_order_with_input_stamps(fresh: Streams, frames: list[np.ndarray]) -> None:
    count = 10
    publish(fresh, frames, range(count))
    odom = fresh.odometry.wait_for(count)
    expected = as_pairs(range(count))
    assert stamps(odom) == expected
    assert stamps(fresh.depth.wait_for(count)) == expected
    assert stamps(fresh.camera_info.wait_for(count)) == expected
    assert stamps(fresh.frame_cloud.wait_for(count)) == expected
    tfs = [t for m in fresh.tf.wait_for(count) for t in m.transforms]
    assert stamps(tfs) == expected
    # map hangs below the bare camera (the node never makes a robot frame its edge's child: docs/robot.md)
    assert {(t.header.frame_id, t.child_frame_id) for t in tfs} == {(CAMERA_FRAME, "map")}
    assert {(o.header.frame_id, o.child_frame_id) for o in odom} == {("map", CAMERA_FRAME)}
    for o, t in zip(odom, tfs, strict=True):  # TF (T_cam_map) and odometry (T_map_cam): the same pose
        map_cam = invert_rigid(transform_to_matrix(t.transform))
        p = o.pose.pose.position
        np.testing.assert_allclose([p.x, p.y, p.z], map_cam[:3, 3], atol=1e-6)
        assert o.pose.pose.orientation.w == pytest.approx(t.transform.rotation.w)
    assert any(abs(o.twist.twist.linear.x) + abs(o.twist.twist.angular.z) > 0 for o in odom[1:])

    depth = fresh.depth.messages[-1]
    assert (depth.encoding, depth.height, depth.width, depth.header.frame_id) == (
        "32FC1",
        294,
        518,
        CAMERA_FRAME,
    )
    values = image_to_depth(depth)
    assert np.isfinite(values).any() and (values[np.isfinite(values)] > 0).all()
    info = fresh.camera_info.messages[-1]
    assert (info.width, info.height) == (518, 294) and info.k[0] > 0 and info.k[8] == 1.0

    path = fresh.path.wait_for(lambda msgs: msgs and len(msgs[-1].poses) == count)[-1]
    assert path.header.frame_id == "map" and stamps(path.poses) == expected
    cloud = fresh.frame_cloud.messages[-1]
    xyz, _ = cloud_to_points(cloud)
    assert cloud.header.frame_id == "map" and len(xyz) > 0 and np.isfinite(xyz).all()
    map_cloud = fresh.map_cloud.wait_for(lambda msgs: msgs and msgs[-1].width > 0)[-1]
    assert map_cloud.header.frame_id == "map" and map_cloud.header.stamp.sec >= 1000


def test_publisher_qos_matches_tf2_ros_and_latched_map(ros_client: RosClient, streams: Streams) -> None:
    infos = {i.node_name: i for i in ros_client.node.get_publishers_info_by_topic("/tf")}
    tf = infos["lingbot_map"].qos_profile  # as tf2_ros's broadcaster (the history depth is not on the wire)
    assert (tf.reliability, tf.durability) == (ReliabilityPolicy.RELIABLE, DurabilityPolicy.VOLATILE)
    (cloud,) = ros_client.node.get_publishers_info_by_topic(f"{NODE}/map_cloud")
    assert cloud.qos_profile.durability == DurabilityPolicy.TRANSIENT_LOCAL


def test_map_cloud_is_latched_for_late_subscribers(ros_client: RosClient, streams: Streams) -> None:
    late = ros_client.collect(PointCloud2, f"{NODE}/map_cloud", LATCHED)
    assert late.wait_for(1, timeout=10)[0].header.frame_id == "map"


def test_reset_while_inferring_is_safe(
    ros_client: RosClient, fresh: Streams, frames: list[np.ndarray]
) -> None:
    received = int(fresh.latest_diagnostics()["frames_received"])
    publish(fresh, frames, range(20))  # ~1 s of inference queued
    fresh.odometry.wait_for(SCALE_FRAMES)
    # Every old frame must have reached the node before the reset: one still in flight in DDS would
    # legitimately arrive after it and start the new stream.
    fresh.latest_diagnostics(lambda v: v.get("frames_received") == str(received + 20))
    response = ros_client.call(Trigger, f"{NODE}/reset")  # while the worker is busy
    assert response.success
    new = range(100, 100 + SCALE_FRAMES)
    publish(fresh, frames, new)
    path = fresh.path.wait_for(lambda msgs: msgs and len(msgs[-1].poses) == SCALE_FRAMES, timeout=30)[-1]
    assert stamps(path.poses) == as_pairs(new)  # nothing from before the reset survives
    diag = fresh.latest_diagnostics(lambda v: v.get("session.last_frame.index") == str(SCALE_FRAMES - 1))
    assert diag["failed_total"] == "0"


def test_input_camera_info_is_compared_with_predicted_intrinsics(
    ros_client: RosClient, fresh: Streams, frames: list[np.ndarray]
) -> None:
    info_pub = ros_client.publisher(CameraInfo, f"{NS}/camera_info", RELIABLE)
    ros_client.wait_for_subscribers(info_pub)
    k = [400.0, 0.0, 259.0, 0.0, 410.0, 147.0, 0.0, 0.0, 1.0]
    info_pub.publish(CameraInfo(header=Header(frame_id=CAMERA_FRAME), width=518, height=294, k=k))
    time.sleep(0.2)
    publish(fresh, frames, range(SCALE_FRAMES))
    predicted = fresh.camera_info.wait_for(SCALE_FRAMES)[-1].k[0]
    diag = fresh.latest_diagnostics(lambda v: "intrinsics.fx_input" in v)
    assert float(diag["intrinsics.fx_input"]) == 400.0 and float(diag["intrinsics.fy_input"]) == 410.0
    assert float(diag["intrinsics.fx_predicted"]) == pytest.approx(predicted, rel=1e-5)
    assert float(diag["intrinsics.fx_rel_error"]) == pytest.approx(predicted / 400.0 - 1.0, rel=1e-4)


def test_anchor_phase_publishes_its_frames_together(fresh: Streams, frames: list[np.ndarray]) -> None:
    publish(fresh, frames, range(SCALE_FRAMES - 1))
    diag = fresh.latest_diagnostics(lambda v: v.get("session.pending_anchor_frames") == str(SCALE_FRAMES - 1))
    assert diag["session.phase"] == "1"
    assert len(fresh.odometry) == 0  # nothing until the anchor phase is complete
    publish(fresh, frames, range(SCALE_FRAMES - 1, SCALE_FRAMES))
    odom = fresh.odometry.wait_for(SCALE_FRAMES)
    assert stamps(odom) == as_pairs(range(SCALE_FRAMES))


def test_reset_clears_and_starts_a_new_anchor_phase(
    ros_client: RosClient, fresh: Streams, frames: list[np.ndarray]
) -> None:
    publish(fresh, frames, range(6))
    fresh.odometry.wait_for(6)
    epoch = int(fresh.latest_diagnostics(lambda v: v.get("session.last_frame.index") == "5")["session.epoch"])
    response = ros_client.call(Trigger, f"{NODE}/reset")
    assert response.success and f"next {SCALE_FRAMES} frames form a new anchor phase" in response.message
    fresh.path.wait_for(lambda msgs: msgs and len(msgs[-1].poses) == 0)
    fresh.map_cloud.wait_for(lambda msgs: msgs and msgs[-1].width == 0)
    after = fresh.latest_diagnostics(lambda v: v.get("session.epoch") == str(epoch + 1))
    assert after["session.frames_stored"] == "0" and after["session.phase"] == "1"
    fresh.odometry.clear()
    publish(fresh, frames, range(10, 10 + SCALE_FRAMES))
    odom = fresh.odometry.wait_for(SCALE_FRAMES)
    assert stamps(odom) == as_pairs(range(10, 10 + SCALE_FRAMES))
    path = fresh.path.wait_for(lambda msgs: msgs and len(msgs[-1].poses) == SCALE_FRAMES)[-1]
    assert stamps(path.poses) == as_pairs(range(10, 10 + SCALE_FRAMES))  # the old trajectory is gone


def test_sliding_window_is_live_and_bad_values_are_rejected(
    ros_client: RosClient, fresh: Streams, frames: list[np.ndarray]
) -> None:
    publish(fresh, frames, range(SCALE_FRAMES + 6))
    fresh.odometry.wait_for(SCALE_FRAMES + 6)
    fresh.latest_diagnostics(lambda v: v.get("session.cache.kv_cache.window_frames") == "6")
    (result,) = ros_client.set_parameters(NODE, {"kv_cache.sliding_window": 3})
    assert result.successful, result.reason
    diag = fresh.latest_diagnostics(lambda v: v.get("session.sliding_window") == "3", timeout=5)
    assert diag["session.cache.kv_cache.sliding_window"] == "3"
    publish(fresh, frames, range(SCALE_FRAMES + 6, SCALE_FRAMES + 8))
    fresh.odometry.wait_for(SCALE_FRAMES + 8)
    diag = fresh.latest_diagnostics(lambda v: v.get("session.last_frame.index") == str(SCALE_FRAMES + 7))
    assert int(diag["session.cache.kv_cache.window_frames"]) <= 3

    rejected = {
        "kv_cache.sliding_window": (0, "out of range"),
        "model.preset": ("lingbot-map", "needs a reload"),
        "attention.backend": ("cudnn", "must be one of"),
    }
    for name, (value, reason) in rejected.items():
        (result,) = ros_client.set_parameters(NODE, {name: value})
        assert not result.successful and reason in result.reason, (name, result.reason)
    (result,) = ros_client.set_parameters(NODE, {"kv_cache.sliding_window": 17})
    assert not result.successful and "kv_cache.max_window (16)" in result.reason
    assert ros_client.get_parameters(NODE, ["kv_cache.sliding_window"]) == {"kv_cache.sliding_window": 3}
    (result,) = ros_client.set_parameters(NODE, {"kv_cache.sliding_window": 8})
    assert result.successful
    # `ros2 param load` of a full `ros2 param dump`: every parameter set to its current value is accepted,
    # the reload-only ones included (issue 11, point 6)
    names = [spec.name for spec in PARAMETERS]
    results = ros_client.set_parameters(NODE, ros_client.get_parameters(NODE, names))
    refused = [(n, r.reason) for n, r in zip(names, results, strict=True) if not r.successful]
    assert not refused and len(results) == len(names) > 40


def test_save_map_writes_ply_and_tum(ros_client: RosClient, fresh: Streams, frames: list[np.ndarray]) -> None:
    publish(fresh, frames, range(SCALE_FRAMES + 2))
    fresh.odometry.wait_for(SCALE_FRAMES + 2)
    fresh.latest_diagnostics(lambda v: v.get("session.last_frame.index") == str(SCALE_FRAMES + 1))
    response = ros_client.call(Trigger, f"{NODE}/save_map")
    assert response.success, response.message
    ply = Path(response.message.split("map: ")[1].split(" (")[0])
    tum = Path(response.message.split("trajectory: ")[1].split(" (")[0])
    xyz, rgb = read_ply(ply)
    assert len(xyz) > 0 and xyz.shape == rgb.shape and f"({len(xyz)} points)" in response.message
    tum_stamps, rows = read_tum(tum)
    np.testing.assert_allclose(tum_stamps, [s + 1e-9 * ns for s, ns in as_pairs(range(SCALE_FRAMES + 2))])
    assert rows.shape == (SCALE_FRAMES + 2, 7) and "dropped" not in response.message
    assert not list(ply.parent.glob("*.tmp*"))  # atomic writes leave no temp files
    yaml_path = Path(response.message.split("grid: ")[1].split(" + ")[0])
    meta = dict(line.split(": ", 1) for line in yaml_path.read_text().splitlines())
    pgm = read_pgm(yaml_path.parent / meta["image"])
    assert meta["mode"] == "trinary" and pgm.ndim == 2 and set(np.unique(pgm)) <= {0, 205, 254}


def test_save_map_drops_the_oldest_poses_beyond_the_cap(
    ros_client: RosClient, fresh: Streams, frames: list[np.ndarray]
) -> None:
    count = MAX_POSES + 4
    publish(fresh, frames, range(count))
    fresh.odometry.wait_for(count)
    values = fresh.latest_diagnostics(lambda v: v.get("trajectory_dropped") == "4")
    assert values["trajectory_poses"] == str(MAX_POSES)
    response = ros_client.call(Trigger, f"{NODE}/save_map")
    assert response.success, response.message
    assert f"({MAX_POSES} poses)" in response.message
    assert f"the oldest 4 poses since the reset were dropped (trajectory.max_poses = {MAX_POSES})" in (
        response.message
    )
    tum_stamps, rows = read_tum(Path(response.message.split("trajectory: ")[1].split(" (")[0]))
    np.testing.assert_allclose(tum_stamps, [s + 1e-9 * ns for s, ns in as_pairs(range(4, count))])
    assert rows.shape == (MAX_POSES, 7)


def test_save_map_into_an_unwritable_place_fails_with_the_reason(
    ros_client: RosClient, node: NodeProcess, tmp_path: Path
) -> None:
    # The node's output_dir (fixed while configured, issue 20): a file takes its place.
    maps = Path(ros_client.get_parameters(NODE, ["output_dir"])["output_dir"])
    kept = tmp_path / "maps_kept"
    maps.mkdir(parents=True, exist_ok=True)
    maps.rename(kept)
    maps.write_text("a file where the output directory should be")
    try:
        response = ros_client.call(Trigger, f"{NODE}/save_map")
        assert not response.success and "save_map failed" in response.message, response.message
        assert str(maps) in response.message
        assert node.alive()
    finally:
        maps.unlink()
        kept.rename(maps)


def test_bad_frames_are_counted_logged_once_and_skipped(
    node: NodeProcess, fresh: Streams, frames: list[np.ndarray]
) -> None:
    received = fresh.latest_diagnostics()["frames_received"]
    header = Header(stamp=stamp(0), frame_id=CAMERA_FRAME)
    unknown = Image(header=header, height=2, width=2, encoding="16UC1", step=4, data=bytes(8))
    short = Image(header=header, height=4, width=4, encoding="rgb8", step=12, data=bytes(20))
    for msg in (unknown, unknown, short):
        fresh.image_pub.publish(msg)
    diag = fresh.latest_diagnostics(
        lambda v: v.get("rejected_unsupported_encoding") == "2" and v.get("rejected_malformed_image") == "1"
    )
    assert diag["frames_received"] == received and node.alive()  # rejected before the queue
    assert node.output().count("frame rejected (unsupported_encoding") == 1  # throttled: logged once
    publish(fresh, frames, range(SCALE_FRAMES))  # the node keeps mapping
    fresh.odometry.wait_for(SCALE_FRAMES)
