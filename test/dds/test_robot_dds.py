"""A simulated robot over real DDS (issue 11): a robot process (test/robot_sim.py) publishes
`odom -> base_link` with noise, the static `base_link -> camera_link -> camera_optical` and the camera
images; the node (tiny preset, CPU, synthetic weights) must keep one TF tree: one parent per frame, only
`map -> odom` from the node, and `map -> odom -> base_link -> camera_optical` equal to its `~/camera_pose`
for every frame."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
from diagnostic_msgs.msg import DiagnosticArray
from geometry_msgs.msg import PoseStamped
from nav_msgs.msg import OccupancyGrid, Odometry
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from robot_scene import BASE_CAM
from ros_helpers import PYTHON, TINY_NODE_PARAMS, NodeProcess, RosClient
from tf2_msgs.msg import TFMessage

from lingbot_map_ros.engine.geometry import pose_from_quat
from lingbot_map_ros.ros.diagnostics.stats import diagnostic_values
from lingbot_map_ros.ros.tf.broadcaster import TF_QOS
from lingbot_map_ros.ros.tf.listener import transform_to_matrix

pytestmark = pytest.mark.dds

FRAMES = 12
SCALE_FRAMES = TINY_NODE_PARAMS["kv_cache.scale_frames"]
TOLERANCE = 0.1
RELIABLE = QoSProfile(depth=200, reliability=ReliabilityPolicy.RELIABLE)
STATIC = QoSProfile(
    depth=100, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL
)
PARAMS = {
    **TINY_NODE_PARAMS,
    "diagnostics_rate": 10.0,
    "tf.transform_tolerance": TOLERANCE,
    "tf.timeout": 0.5,
}


def stamp_s(stamp: object) -> float:
    return stamp.sec + 1e-9 * stamp.nanosec


def pose_of(p: object) -> np.ndarray:
    return pose_from_quat(
        [p.position.x, p.position.y, p.position.z],
        [p.orientation.x, p.orientation.y, p.orientation.z, p.orientation.w],
    )


def tf_pose(tf: object) -> np.ndarray:
    return transform_to_matrix(tf.transform)


class Run:
    """One node (namespace `ns`) and one robot process; every output collected."""

    def __init__(
        self,
        client: RosClient,
        tmp: Path,
        ns: str,
        params: dict,
        robot_args: list[str],
        remaps: dict[str, str] | None = None,
    ) -> None:
        self.client = client
        self.tf = client.collect(TFMessage, "/tf", TF_QOS)
        self.tf_static = client.collect(TFMessage, "/tf_static", STATIC)
        self.camera_pose = client.collect(PoseStamped, f"/{ns}/lingbot_map/camera_pose", RELIABLE)
        self.odometry = client.collect(Odometry, f"/{ns}/lingbot_map/odometry", RELIABLE)
        self.diagnostics = client.collect(DiagnosticArray, "/diagnostics", RELIABLE)
        self.grid = client.collect(OccupancyGrid, f"/{ns}/lingbot_map/grid", STATIC)
        self.node = NodeProcess.start(
            tmp,
            name="lingbot_map",
            namespace=f"/{ns}",
            params={**PARAMS, **params},
            remaps={"image": "/robot/camera/image_raw", **(remaps or {})},
        )
        self.node.wait_ready(client, [f"/{ns}/lingbot_map/reset"])
        self.truth = tmp / f"{ns}_truth.npz"
        log = open(tmp / f"{ns}_robot.log", "wb")  # noqa: SIM115 - closed by the process end
        import subprocess

        self.robot = subprocess.Popen(
            [
                str(PYTHON),
                str(Path(__file__).parent.with_name("robot_sim.py")),
                str(self.truth),
                "--frames",
                str(FRAMES),
                "--tf-subscribers",  # the node's listener and `self.tf`: nothing published before both match
                "2",
                *robot_args,
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )

    def wait_truth(self, timeout: float = 60.0) -> dict[str, np.ndarray]:
        deadline = time.monotonic() + timeout
        while not self.truth.exists():
            assert time.monotonic() < deadline and self.robot.poll() is None, "robot process failed"
            time.sleep(0.1)
        time.sleep(0.2)
        return dict(np.load(self.truth))

    def stop(self) -> None:
        try:
            self.robot.kill()  # the robot holds nothing to release (its /tf_static ends with it)
            self.robot.wait(10)
        finally:
            self.node.stop()  # never leave the node running
        for c in (self.tf, self.tf_static, self.camera_pose, self.odometry, self.diagnostics, self.grid):
            self.client.node.destroy_subscription(c.subscription)


@pytest.fixture(scope="module")
def client() -> Iterator[RosClient]:
    with RosClient("robot_dds_test") as c:
        yield c


def ours(ns: str) -> Callable[[DiagnosticArray], dict[str, str]]:
    """/diagnostics values of the node in namespace `ns` only (other nodes on the domain are ignored)."""
    return lambda msg: diagnostic_values(msg, f"/{ns}/lingbot_map: mapping")


def edges(run: Run) -> dict[tuple[str, str], int]:
    """(parent, child) -> messages seen on /tf and /tf_static."""
    out: dict[tuple[str, str], int] = {}
    for msg in list(run.tf.messages) + list(run.tf_static.messages):
        for tf in msg.transforms:
            key = (tf.header.frame_id, tf.child_frame_id)
            out[key] = out.get(key, 0) + 1
    return out


def test_map_to_odom_keeps_one_tree_and_composes_to_the_camera_pose(
    client: RosClient, tmp_path: Path
) -> None:
    scale = {"scale.source": "odometry", "scale.min_samples": 3, "scale.min_baseline": 0.2}
    run = Run(client, tmp_path, "robot_auto", scale, [])  # tf.mode auto must pick map_to_odom
    try:
        truth = run.wait_truth()
        poses = run.camera_pose.wait_for(FRAMES, timeout=120)
        time.sleep(0.5)
        found = edges(run)
        parents: dict[str, set[str]] = {}
        for parent, child in found:
            parents.setdefault(child, set()).add(parent)
        assert parents == {
            "camera_link": {"base_link"},
            "camera_optical": {"camera_link"},
            "base_link": {"odom"},
            "odom": {"map"},
        }, found  # one parent each, nothing else
        map_odom = {}
        for msg in run.tf.messages:
            for tf in msg.transforms:
                if (tf.header.frame_id, tf.child_frame_id) == ("map", "odom"):
                    map_odom.setdefault(round(stamp_s(tf.header.stamp), 6), tf_pose(tf))
        worst = 0.0
        for msg in poses:
            t = stamp_s(msg.header.stamp)
            i = int(np.argmin(np.abs(truth["stamps"] - t)))
            assert abs(truth["stamps"][i] - t) < 1e-6 and msg.header.frame_id == "map"
            composed = map_odom[round(t + TOLERANCE, 6)] @ truth["odom"][i] @ BASE_CAM
            worst = max(worst, float(np.abs(composed - pose_of(msg.pose)).max()))
        print(f"map -> odom -> base_link -> camera_optical vs ~/camera_pose: max |diff| {worst:.2e}")
        republished = sum(1 for m in run.tf.messages for tf in m.transforms if tf.header.frame_id == "map")
        assert republished > len(poses)  # map -> odom is also republished at tf.publish_rate
        assert worst < 1e-6
        odom = run.odometry.wait_for(FRAMES)
        assert {m.child_frame_id for m in odom} == {"base_link"}
        assert all(np.diag(np.reshape(m.pose.covariance, (6, 6))).min() > 0 for m in odom)
        values = [ours("robot_auto")(m) for m in run.diagnostics.messages]
        values = [v for v in values if v.get("tf_mode")]
        assert values and values[-1]["tf_mode"] == "map_to_odom"
        names = {s.name for m in run.diagnostics.messages for s in m.status}
        assert "/robot_auto/lingbot_map: mapping" in names  # the namespace keeps two robots apart
        assert {"scale", "scale_spread", "scale_source", "scale_age_s", "scale_converged"} <= set(values[-1])
        assert values[-1]["scale_source"] == "odometry" and values[-1]["rejected_total"] == "0"
        assert values[-1]["scale_converged"] == "true" and int(values[-1]["scale_samples"]) >= 3
        assert float(values[-1]["scale"]) > 0 and float(values[-1]["scale_age_s"]) >= 0
        # ~/grid, latched, in the map frame: the first one may be the empty grid of before the scale
        # converged (nothing mapped yet); the mapped one follows at `grid.rate` once the map thread integrated
        msgs = run.grid.wait_for(lambda ms: any(len(m.data) > 0 for m in ms), timeout=30)
        grid = [m for m in msgs if len(m.data) > 0][-1]
        assert grid.header.frame_id == "map" and grid.info.resolution == pytest.approx(0.05)
        assert len(grid.data) == grid.info.width * grid.info.height > 0
    finally:
        run.stop()


@pytest.mark.parametrize(
    ("mode", "robot_args", "edge"),
    [
        ("map_to_base", ["--no-odom"], ("map", "base_link")),
        ("map_to_camera", ["--no-odom", "--no-static"], ("camera_optical", "map")),  # map below the camera
    ],
)
def test_explicit_modes_publish_their_single_edge(
    client: RosClient, tmp_path: Path, mode: str, robot_args: list[str], edge: tuple[str, str]
) -> None:
    run = Run(client, tmp_path, f"robot_{mode}", {"tf.mode": mode}, robot_args)
    try:
        run.wait_truth()
        run.camera_pose.wait_for(FRAMES, timeout=120)
        time.sleep(0.3)
        node_edges = {k for k in edges(run) if "map" in k}
        assert node_edges == {edge}
        odom = run.odometry.wait_for(FRAMES)
        assert {m.child_frame_id for m in odom} == set(edge) - {"map"}
    finally:
        run.stop()


def test_missing_extrinsics_drop_frames_with_a_named_edge(client: RosClient, tmp_path: Path) -> None:
    run = Run(
        client, tmp_path, "robot_noext", {"tf.mode": "map_to_odom", "tf.timeout": 0.05}, ["--no-static"]
    )
    mine = ours("robot_noext")
    try:
        run.wait_truth()

        def dropped(msgs: list) -> bool:
            return any(int(mine(m).get("rejected_tf_unavailable", "0")) >= FRAMES for m in msgs)

        run.diagnostics.wait_for(dropped, timeout=120)
        assert not [k for k in edges(run) if k[0] == "map"]  # nothing published with a wrong transform
        assert len(run.camera_pose.messages) == 0 and len(run.odometry.messages) == 0
        log = run.node.output()
        assert "tf_unavailable" in log and "base_link -> camera_optical" in log, log[-2000:]
    finally:
        run.stop()


def test_depth_scale_source_reads_the_registered_depth_topic(client: RosClient, tmp_path: Path) -> None:
    params = {"tf.mode": "map_to_camera", "scale.source": "depth", "scale.min_samples": 2}
    run = Run(
        client,
        tmp_path,
        "robot_depth",
        params,
        ["--no-odom", "--no-static", "--depth"],
        remaps={"depth_image": "/robot/camera/depth/image_raw"},
    )
    mine = ours("robot_depth")
    try:
        run.wait_truth()
        run.camera_pose.wait_for(FRAMES, timeout=120)

        def converged(msgs: list) -> bool:
            return any(mine(m).get("scale_converged") == "true" for m in msgs)

        values = [mine(m) for m in run.diagnostics.wait_for(converged, timeout=30)]
        last = [v for v in values if v.get("scale_converged") == "true"][-1]
        assert last["scale_source"] == "depth" and int(last["scale_samples"]) >= 2
    finally:
        run.stop()


def test_a_loaded_session_republishes_the_saved_map_to_odom(client: RosClient, tmp_path: Path) -> None:
    """Robot mode map_to_odom: `~/save_session`, then a new node loads it and, before any frame, publishes the
    saved `map -> odom` (the initial guess; docs/session.md), in the saved TF mode, stamped now."""
    from std_srvs.srv import Trigger

    sessions = tmp_path / "sessions"
    run = Run(client, tmp_path, "robot_save", {"session.dir": str(sessions)}, [])
    try:
        run.wait_truth()
        run.camera_pose.wait_for(FRAMES, timeout=120)
        saved = client.call(Trigger, "/robot_save/lingbot_map/save_session")
        assert saved.success, saved.message
        time.sleep(0.3)
        last = [
            tf_pose(tf)
            for m in run.tf.messages
            for tf in m.transforms
            if (tf.header.frame_id, tf.child_frame_id) == ("map", "odom")
        ][-1]
    finally:
        run.stop()
    (folder,) = sessions.iterdir()
    tf = client.collect(TFMessage, "/tf", TF_QOS)
    node = NodeProcess.start(
        tmp_path,
        name="lingbot_map",
        namespace="/robot_load",
        params={**PARAMS, "session.dir": str(sessions), "session.load_path": folder.name},
        remaps={"image": "/robot_load/camera/image_raw"},
    )
    try:
        node.wait_ready(client, ["/robot_load/lingbot_map/reset"])
        msgs = tf.wait_for(
            lambda ms: any(t.header.frame_id == "map" for m in ms for t in m.transforms), timeout=60
        )
        edges_seen = {(t.header.frame_id, t.child_frame_id) for m in msgs for t in m.transforms}
        assert edges_seen == {("map", "odom")}, edges_seen
        first = next(t for m in msgs for t in m.transforms)
        np.testing.assert_allclose(tf_pose(first), last, atol=1e-9)
        # stamped now + tf.transform_tolerance (issue 19), not with the saving run's stamps (1000 s + ...)
        assert abs(stamp_s(first.header.stamp) - time.time()) < 5.0, stamp_s(first.header.stamp)
    finally:
        assert node.stop() == 0, node.output()
        client.node.destroy_subscription(tf.subscription)
