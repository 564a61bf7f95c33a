"""Several cameras in one node over real DDS (issue 14; subprocess, tiny preset on CPU, frames of
../shared/data/loop): two publishers at different rates with different frame ids; each camera's outputs come
under `~/<name>/` with its own stamps, in order, in its own map frame; resetting one camera leaves the other
mapping; /diagnostics has a status per camera."""

from __future__ import annotations

import subprocess
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from attack_helpers import status_of, warm_up
from builtin_interfaces.msg import Time
from diagnostic_msgs.msg import DiagnosticArray
from geometry_msgs.msg import PoseStamped
from nav_msgs.msg import OccupancyGrid, Odometry
from nav_msgs.msg import Path as PathMsg
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from ros_helpers import PYTHON, TINY_NODE_PARAMS, NodeProcess, RosClient, load_frames
from sensor_msgs.msg import Image, PointCloud2
from std_msgs.msg import Header
from std_srvs.srv import Trigger
from tf2_msgs.msg import TFMessage

from lingbot_map_ros.ros.messages.conversions import rgb_to_image
from lingbot_map_ros.ros.tf.broadcaster import TF_QOS

pytestmark = pytest.mark.dds

NS = "/cameras_test"
NODE = f"{NS}/lingbot_map"
RELIABLE = QoSProfile(depth=200, reliability=ReliabilityPolicy.RELIABLE)
LATCHED = QoSProfile(
    depth=1, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL
)
ROBOT_FRAMES = 10
#: camera -> (optical frame id, first stamp second, publish period s): two rates, two frame ids.
CAMERAS = {"front": ("front_optical", 100, 0.05), "rear": ("rear_optical", 500, 0.13)}
SCALE_FRAMES = 2


def stamp_of(camera: str, i: int) -> Time:
    first = CAMERAS[camera][1]
    return Time(sec=first + i // 10, nanosec=(i % 10) * 100_000_000)


def pairs(msgs: list[object]) -> list[tuple[int, int]]:
    return [(m.header.stamp.sec, m.header.stamp.nanosec) for m in msgs]


class Camera:
    """One simulated camera: its image publisher, its odometry and path collectors, its frame counter."""

    def __init__(self, client: RosClient, name: str, frames: list[np.ndarray]) -> None:
        self.name = name
        self.frame_id = CAMERAS[name][0]
        self.frames = frames
        self.pub = client.publisher(Image, f"{NS}/{name}/image", RELIABLE)
        self.odometry = client.collect(Odometry, f"{NODE}/{name}/odometry", RELIABLE)
        self.path = client.collect(PathMsg, f"{NODE}/{name}/path", RELIABLE)
        self.sent = 0

    def make(self, i: int) -> Image:
        return rgb_to_image(
            self.frames[i % len(self.frames)], Header(stamp=stamp_of(self.name, i), frame_id=self.frame_id)
        )

    def publish(self, count: int) -> list[tuple[int, int]]:
        """`count` more frames at this camera's period; their stamps."""
        sent = []
        for _ in range(count):
            msg = self.make(self.sent)
            self.pub.publish(msg)
            sent.append((msg.header.stamp.sec, msg.header.stamp.nanosec))
            self.sent += 1
            time.sleep(CAMERAS[self.name][2])
        return sent


def test_two_cameras_map_side_by_side_and_reset_alone(ros_client: RosClient, tmp_path: Path) -> None:
    node = NodeProcess.start(
        tmp_path,
        name="lingbot_map",
        namespace=NS,
        params={
            **TINY_NODE_PARAMS,
            "kv_cache.scale_frames": SCALE_FRAMES,
            "diagnostics_rate": 10.0,
            "cameras": list(CAMERAS),
            "tf.mode": "map_to_camera",
        },
    )
    try:
        node.wait_ready(ros_client, [f"{NODE}/reset", f"{NODE}/front/reset", f"{NODE}/rear/reset"])
        frames = load_frames(12, step=4)
        cams = {name: Camera(ros_client, name, frames) for name in CAMERAS}
        diagnostics = ros_client.collect(DiagnosticArray, "/diagnostics", RELIABLE)
        for cam in cams.values():
            ros_client.wait_for_subscribers(cam.pub)
            ros_client.wait_for_publishers(cam.odometry, cam.path)
            cam.sent = warm_up(cam.pub, cam.odometry, cam.make)
        time.sleep(0.5)
        for cam in cams.values():
            cam.odometry.clear()
            cam.path.clear()

        # Both cameras at once, at their own rates: each camera's outputs carry exactly its stamps, in order.
        sent: dict[str, list] = {}
        threads = [
            threading.Thread(target=lambda c=cam, n=n: sent.__setitem__(c.name, c.publish(n)))
            for cam, n in ((cams["front"], 16), (cams["rear"], 6))
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        for name, cam in cams.items():
            odometry = cam.odometry.wait_for(len(sent[name]), timeout=60)
            assert pairs(odometry) == sent[name], name
            assert {m.header.frame_id for m in odometry} == {f"map_{name}"}  # its own map frame
            assert {m.child_frame_id for m in odometry} == {cam.frame_id}

        # Reset the front camera only: its path starts over, the rear one goes on growing. ~/path comes at
        # path.publish_rate (issue 13): wait for the message of each camera's last frame.
        def path_to(stamp: tuple[int, int]) -> object:
            return lambda m: m and pairs(m[-1:]) == [stamp]

        rear_poses = len(cams["rear"].path.wait_for(path_to(sent["rear"][-1]), timeout=30)[-1].poses)
        answer = ros_client.call(Trigger, f"{NODE}/front/reset")
        assert answer.success and "front" in answer.message, answer.message
        time.sleep(0.3)
        for cam in cams.values():
            cam.odometry.clear()
            cam.path.clear()
        sent = {name: cam.publish(SCALE_FRAMES + 2) for name, cam in cams.items()}
        for name, cam in cams.items():
            assert pairs(cam.odometry.wait_for(len(sent[name]), timeout=60)) == sent[name], name
        cams["front"].path.wait_for(lambda m: len(m) and len(m[-1].poses) == SCALE_FRAMES + 2, timeout=30)
        rear_path = cams["rear"].path.wait_for(path_to(sent["rear"][-1]), timeout=30)[-1]
        assert len(rear_path.poses) == rear_poses + SCALE_FRAMES + 2

        # /diagnostics: a status per camera with its own counters.
        def per_camera(msgs: list[DiagnosticArray]) -> bool:
            statuses = [status_of(m, f"lingbot_map/{name}") for m in msgs[-1:] for name in CAMERAS]
            return all(s is not None for s in statuses)

        last = diagnostics.wait_for(per_camera, timeout=20)[-1]
        front, rear = (status_of(last, f"lingbot_map/{name}")[2] for name in CAMERAS)
        assert front["resets"] == "1" and rear["resets"] == "0"
        assert int(front["frames_published"]) >= SCALE_FRAMES + 2
        assert int(rear["frames_published"]) >= 6 + SCALE_FRAMES + 2
        assert status_of(last, "lingbot_map")[2]["cameras"] == "front,rear"

        # Issue 19: the rear camera sends the front camera's frame id, then its own map frame: refused and
        # counted (one frame id, one camera; never a parent of itself), and it goes on posing after them.
        tf = ros_client.collect(TFMessage, "/tf", TF_QOS)
        rear_cam = cams["rear"]
        for i, frame_id in enumerate(("front_optical", "front_optical", "map_rear", "map_front")):
            rgb = rear_cam.frames[i % len(rear_cam.frames)]
            rear_cam.pub.publish(rgb_to_image(rgb, Header(stamp=Time(sec=900 + i), frame_id=frame_id)))
        rear_cam.odometry.clear()
        resumed = rear_cam.publish(3)
        assert pairs(rear_cam.odometry.wait_for(3, timeout=60)) == resumed

        def refused(msgs: list[DiagnosticArray]) -> bool:
            status = status_of(msgs[-1], "lingbot_map/rear") if msgs else None
            return status is not None and status[2].get("rejected_invalid_frame_id") == "4"

        diagnostics.wait_for(refused, timeout=20)
        edges = {(t.header.frame_id, t.child_frame_id) for m in tf.messages for t in m.transforms}
        assert ("map_rear", "front_optical") not in edges and not [e for e in edges if e[0] == e[1]], edges
    finally:
        code = node.stop()
    assert code == 0, node.output()


def test_two_cameras_on_a_robot_share_the_map_and_one_map_to_odom(
    ros_client: RosClient, tmp_path: Path
) -> None:
    """Robot TF (test/robot_sim.py: odom -> base_link -> camera_link -> camera_optical): both cameras (here
    the robot's camera and a second one with its own frame id, mounted alike: two cameras never share one)
    are posed in the one `map`, only the first publishes map -> odom, and the fused ~/map_cloud and ~/grid
    are in `map`."""
    ns = "/cameras_robot"
    node_name = f"{ns}/lingbot_map"
    tf = ros_client.collect(TFMessage, "/tf", TF_QOS)
    poses = {
        name: ros_client.collect(PoseStamped, f"{node_name}/{name}/camera_pose", RELIABLE) for name in CAMERAS
    }
    fused = ros_client.collect(PointCloud2, f"{node_name}/map_cloud", LATCHED)
    grid = ros_client.collect(OccupancyGrid, f"{node_name}/grid", LATCHED)
    node = NodeProcess.start(
        tmp_path,
        name="lingbot_map",
        namespace=ns,
        params={
            **TINY_NODE_PARAMS,
            "cameras": list(CAMERAS),
            "tf.timeout": 0.5,
            "map_publish_rate": 5.0,
            "grid.rate": 5.0,
        },
        remaps={"front/image": "/robot/camera/image_raw", "rear/image": "/robot/camera2/image_raw"},
    )
    robot = None
    try:
        node.wait_ready(ros_client, [f"{node_name}/front/reset", f"{node_name}/rear/reset"])
        log = open(tmp_path / "robot.log", "wb")  # noqa: SIM115 - closed by the process end
        robot = subprocess.Popen(
            [
                str(PYTHON),
                str(Path(__file__).parent.with_name("robot_sim.py")),
                str(tmp_path / "truth.npz"),
                "--frames",
                str(ROBOT_FRAMES),
                "--second-camera",
                "--tf-subscribers",  # the node's listener and this client's (`tf`): none published before
                str(1 + sum(s.topic_name == "/tf" for s in ros_client.node.subscriptions)),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        for name in CAMERAS:
            got = poses[name].wait_for(ROBOT_FRAMES, timeout=120)
            assert {m.header.frame_id for m in got} == {"map"}, name
        time.sleep(0.5)
        parents: dict[str, set[str]] = {}
        for msg in tf.messages:
            for t in msg.transforms:
                parents.setdefault(t.child_frame_id, set()).add(t.header.frame_id)
        assert parents == {"base_link": {"odom"}, "odom": {"map"}}, parents  # no map_<name>, one parent each
        cloud = fused.wait_for(lambda m: len(m) and m[-1].width > 0, timeout=30)[-1]
        assert cloud.header.frame_id == "map"
        assert (
            grid.wait_for(lambda m: len(m) and len(m[-1].data) > 0, timeout=30)[-1].header.frame_id == "map"
        )
    finally:
        if robot is not None:
            robot.kill()
            robot.wait(10)
        code = node.stop()
    assert code == 0, node.output()
