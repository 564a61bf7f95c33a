"""The node's TF policy on plain data (issue 19, no DDS): the one-parent check of every edge it publishes
(engine/mapping/tf_tree.py) against every kind of existing parent, the `auto` decision with odometry that
starts just
after the image, the map_to_base -> map_to_odom switch without a jump in `map`, a URDF gap, and the camera
frame ids the node refuses."""

from __future__ import annotations

import numpy as np
import pytest
from robot_scene import BASE_CAMLINK, CAMLINK_OPTICAL, StandInSession, make_scene, random_sim3
from ros_helpers import BufferLookup

from lingbot_map_ros.engine.geometry import invert_rigid, rigid
from lingbot_map_ros.engine.mapping.mapper import Mapper, MapperConfig, RobotSample
from lingbot_map_ros.engine.mapping.scale import ScaleConfig
from lingbot_map_ros.engine.mapping.tf_graph import TfGraph
from lingbot_map_ros.engine.mapping.tf_tree import TfEdgeGuard, subtree_root
from lingbot_map_ros.engine.robot_tf import RobotFrames, RobotTfConfig
from lingbot_map_ros.engine.tracker import CameraTracker
from lingbot_map_ros.ros.diagnostics.stats import log_notice
from lingbot_map_ros.ros.input.streams import CameraFrames, frame_id_problem, reserved_frames
from lingbot_map_ros.ros.messages.poses import pose_msg, seconds_stamp
from lingbot_map_ros.ros.outputs.config import OutputConfig
from lingbot_map_ros.ros.outputs.mapping import stamp_seconds
from lingbot_map_ros.ros.params.declare import cross_check, default_params
from lingbot_map_ros.ros.tf import broadcaster as tf_module
from lingbot_map_ros.ros.tf.buffer import TfBuffer, TransformUnavailable
from lingbot_map_ros.ros.tf.camera_edge import CameraTf
from lingbot_map_ros.ros.tf.listener import transform_to_matrix

ROBOT = {"camera_link": "base_link", "camera_optical": "camera_link", "base_link": "odom"}


def graph_of(parents: dict[str, str]) -> TfGraph:
    """A TF graph as the node's listener stores it (child -> parent), changed by the test with `admit`."""
    graph = TfGraph()
    for child, parent in parents.items():
        graph.admit(parent, child, static=False)
    return graph


# ----------------------------------------------------------------------------- one parent per frame
@pytest.mark.parametrize(
    ("existing", "parent", "child", "words"),
    [
        ({"base_link": "odom"}, "map", "base_link", "already has the parent 'odom'"),  # dynamic (odometry)
        ({"camera_optical": "camera_link"}, "map", "camera_optical", "already has the parent 'camera_link'"),
        ({"odom": "map"}, "map", "odom", "already published by another node"),  # another SLAM's map -> odom
        ({}, "map", "map", "its own parent"),  # a camera frame named like the map frame
        ({"base_link": "odom"}, "base_link", "odom", "close a loop"),  # odom is above base_link
        ({"b": "a", "c": "b"}, "c", "a", "close a loop"),
    ],
)
def test_an_edge_to_a_frame_with_another_parent_is_refused(
    existing: dict[str, str], parent: str, child: str, words: str
) -> None:
    guard = TfEdgeGuard(graph_of(existing))
    problem = guard.check(parent, child, "front")
    assert problem is not None and words in problem, problem


def test_the_nodes_own_edges_come_back_through_tf_and_stay_allowed() -> None:
    graph = graph_of({"base_link": "odom", "camera_link": "base_link"})
    guard = TfEdgeGuard(graph)
    assert guard.check("map", "odom", "front") is None  # odom has no parent: the node's edge
    graph.admit("map", "odom", static=False)  # its own edge, heard back on /tf
    for _ in range(3):  # republished: still one parent, still the node's
        assert guard.check("map", "odom", "front") is None
    assert guard.foreign_parents("odom") == set()
    assert guard.foreign_parents("base_link") == {"odom"}


def test_another_camera_of_the_node_cannot_take_a_frame_until_released() -> None:
    guard = TfEdgeGuard(graph_of({}))
    assert guard.check("map_front", "camera_optical_frame", "front") is None
    problem = guard.check("map_rear", "camera_optical_frame", "rear")  # the node's own other publisher
    assert problem is not None and "map_front -> camera_optical_frame" in problem and "front" in problem
    assert guard.check("map", "camera_optical_frame", "front") is None  # the owner may change its own edge
    guard.release("front")
    assert guard.check("map_rear", "camera_optical_frame", "rear") is None


def test_a_foreign_parent_seen_once_is_remembered() -> None:
    """tf2 reports the parent of a frame's LATEST sample: while the node and a robot both publish a parent of
    base_link, the graph may show the node's own; one sight of the robot's is enough."""
    graph = graph_of({})
    guard = TfEdgeGuard(graph)
    assert guard.check("map", "base_link", "cam") is None
    graph.admit("odom", "base_link", static=False)  # the robot's odometry starts
    assert "already has the parent 'odom'" in guard.check("map", "base_link", "cam")
    graph.admit("map", "base_link", static=False)  # the node's last sample is the newest again
    assert "already has the parent 'odom'" in guard.check("map", "base_link", "cam")
    assert guard.check("map", "odom", "cam") is None  # map above odom is the way


def test_subtree_root() -> None:
    assert subtree_root("camera_optical", ROBOT) == "odom"
    gap = {"camera_optical": "camera_link"}  # base_link -> camera_link missing
    assert subtree_root("camera_optical", gap) == "camera_link"
    assert subtree_root("bare", {}) == "bare"
    assert subtree_root("a", {"a": "b", "b": "a"}) in {"a", "b"}  # a loop ends


# ----------------------------------------------------------------------------- auto, switch, URDF gap
def test_auto_picks_map_to_odom_when_odometry_starts_just_after_the_image() -> None:
    buf = TfBuffer()
    buf.set_transform("base_link", "cam", 0.0, rigid(np.eye(3), [0.1, 0, 1.0]), static=True)
    for t in (10.00001, 10.03, 10.06):  # odometry starts 10 µs after the first image
        buf.set_transform("odom", "base_link", t, rigid(np.eye(3), [t, 0, 0]), static=False)
    frames = RobotFrames(BufferLookup(buf), RobotTfConfig())
    mode, why = frames.resolve_mode("cam", 10.0)
    assert mode == "map_to_odom", why
    with pytest.raises(TransformUnavailable):  # that first frame has no odometry at its own stamp: dropped
        frames.sample(mode, "cam", 10.0)
    assert frames.sample(mode, "cam", 10.05).odom_base is not None  # the next one has
    assert frames.odometry_at(10.05) is not None and frames.odometry_at(9.9) is None


def test_a_urdf_gap_hangs_map_below_the_cameras_subtree_root() -> None:
    buf = TfBuffer()
    buf.set_transform("camera_link", "camera_optical", 0.0, CAMLINK_OPTICAL, static=True)
    frames = RobotFrames(BufferLookup(buf), RobotTfConfig())
    assert frames.resolve_mode("camera_optical", 10.0)[0] == "map_to_camera"
    guard = TfEdgeGuard(buf.graph)
    assert subtree_root("camera_optical", guard.foreign_graph()) == "camera_link"
    np.testing.assert_allclose(frames.root_pose("camera_link", "camera_optical", 10.0), CAMLINK_OPTICAL)
    assert guard.check("map", "camera_optical", "cam") is not None  # map above the camera: two parents
    assert guard.check("camera_link", "map", "cam") is None  # the inverted edge: map is the node's
    buf.set_transform("camera_link", "map", 10.0, np.eye(4), static=False)  # the node's edge, heard back
    assert subtree_root("camera_optical", guard.foreign_graph()) == "camera_link"  # a new stream: the same
    assert guard.check("camera_link", "map", "cam") is None  # republished: not a loop, not a foreign parent


def test_switch_to_map_to_odom_keeps_map_and_composes_to_the_base() -> None:
    """Frames 0-5 in map_to_base (no odometry yet), then odometry appears: T_map_odom = T_map_base ·
    T_odom_base⁻¹ at the switch, the base poses in map are the same as without any switch (no jump), and
    T_map_odom stays the constant that maps the odometry onto them."""
    scene = make_scene(12, 48, 32)
    sim = random_sim3(3, 0.37)
    odom_from_world = rigid(np.eye(3), [5.0, -2.0, 0.0])  # odometry's own origin, away from map's
    base_cam = BASE_CAMLINK @ CAMLINK_OPTICAL

    def run(switch_at: int | None) -> list:
        mapper = Mapper(MapperConfig(scale=ScaleConfig(source="fixed", factor=1.0 / 0.37)))
        session = StandInSession(scene, sim, scale_frames=4)
        frames = []
        for i in range(12):
            for result in session.push_index(i):
                j = result.index
                odom_base = odom_from_world @ scene.base[j]
                mode = "map_to_odom" if switch_at is not None and j >= switch_at else "map_to_base"
                if mode != mapper.mode and mapper.mode is not None:
                    mapper.switch_mode(mode)
                sample = RobotSample(mode, base_cam, odom_base if mode == "map_to_odom" else None)
                frames.append((mapper.locate(result, 1000.0 + j, sample)[0], odom_base))
        return frames

    plain, switched = run(None), run(6)
    assert [f.mode for f, _ in switched] == ["map_to_base"] * 6 + ["map_to_odom"] * 6
    for (a, _), (b, _) in zip(plain, switched, strict=True):
        np.testing.assert_allclose(b.body_pose, a.body_pose, atol=1e-9)  # map did not move
        assert b.epoch == a.epoch and not b.new_epoch or b.index == 0
    for frame, odom_base in switched[6:]:
        np.testing.assert_allclose(frame.map_odom @ odom_base, frame.body_pose, atol=1e-9)
    expected = invert_rigid(scene.base[0]) @ invert_rigid(odom_from_world)  # map = the first base frame
    for frame, _ in switched[6:]:
        np.testing.assert_allclose(frame.map_odom, expected, atol=1e-6)
    with pytest.raises(ValueError, match="cannot become"):
        Mapper(MapperConfig()).switch_mode("map_to_odom")  # no epoch in map_to_base: refused


# ----------------------------------------------------------------------------- camera frame ids
@pytest.mark.parametrize("frame", ["map", "odom", "base_link", "map_front", "map_rear"])
def test_a_camera_frame_named_like_a_frame_of_the_tree_is_refused(frame: str) -> None:
    reserved = reserved_frames("map", "odom", "base_link", ("front", "rear"))
    problem = frame_id_problem(frame, reserved)
    assert problem is not None and frame in problem
    assert frame_id_problem("front_optical", reserved) is None


def test_two_cameras_with_one_frame_id_the_second_is_refused() -> None:
    frames = CameraFrames()
    assert frames.claim("front", "camera_optical_frame") is None
    assert frames.claim("front", "camera_optical_frame") is None
    problem = frames.claim("rear", "camera_optical_frame")
    assert problem is not None and "'front'" in problem
    assert frames.claim("rear", "rear_optical") is None
    assert frames.claim("front", "front_optical") is None  # front moved: its old frame id is free
    assert frames.claim("rear", "camera_optical_frame") is None


@pytest.mark.parametrize("frame", ["map", "base_link", "odom"])
def test_a_camera_frame_parameter_named_like_the_tree_is_refused_at_configure(frame: str) -> None:
    values = {
        "kv_cache.sliding_window": 8,
        "kv_cache.max_window": 16,
        "map_frame": "map",
        "odom_frame": "odom",
        "base_frame": "base_link",
        "camera_frame": frame,
    }
    problems = cross_check(values)
    assert any(p.startswith("camera_frame:") and frame in p for p in problems), problems
    assert not cross_check({**values, "camera_frame": "camera_optical"})


# ----------------------------------------------------------------------------- map -> odom stamps
class FakeNode:
    """What `CameraTf` uses of a node: a clock set by the test, a logger, and a /tf publisher that records."""

    def __init__(self) -> None:
        self.now_ns = 0
        self.sent: list = []
        self.warnings: list[str] = []

    def get_clock(self) -> object:
        node = self

        class Clock:
            def now(self) -> object:
                return type("Now", (), {"nanoseconds": node.now_ns})()

        return Clock()

    def get_logger(self) -> object:
        node = self

        class Log:
            def info(self, text: str) -> None:
                pass

            def warning(self, text: str) -> None:
                node.warnings.append(text)

        return Log()

    def create_publisher(self, msg_type: type, topic: str, qos: object) -> object:
        return type("Pub", (), {"publish": lambda _, msg: self.sent.extend(msg.transforms)})()


def test_map_to_odom_first_at_the_image_stamp_then_republished_at_now(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The first `map -> odom` of a stream also at the image stamp; the timer stamps the latest estimate with
    the node's clock (a bag's /clock under use_sim_time) + tolerance, nothing while that clock is 0."""
    monkeypatch.setattr(tf_module, "_Tf2RosBroadcaster", None)  # the package's publisher, even with tf2_ros
    node = FakeNode()
    config = OutputConfig.from_params(default_params()).with_params(
        path_max_length=10,
        trajectory_max_poses=10,
        map_conf_threshold=0.0,
        map_stride=1,
        map_voxel_size=0.05,
        map_max_points=10,
        publish_depth=False,
        publish_frame_cloud=False,
        tf_mode="map_to_odom",
        tf_transform_tolerance=0.1,
    )
    scene = make_scene(6, 48, 32)
    buf = TfBuffer()  # the robot: extrinsics, and odometry at the image stamps
    buf.set_transform("base_link", "cam", 0.0, BASE_CAMLINK @ CAMLINK_OPTICAL, static=True)
    for j in range(6):
        buf.set_transform("odom", "base_link", 1000.0 + 0.2 * j, scene.base[j], static=False)
    tracker = CameraTracker(config.mapper_config(), RobotTfConfig("map_to_odom"), BufferLookup(buf))
    cam = CameraTf(node, config, tracker, None, "front")
    cam.republish()
    assert node.sent == []  # no estimate yet
    session = StandInSession(scene, random_sim3(1, 0.5), scale_frames=2)
    results = session.push_index(0) + session.push_index(1)
    for result in results:
        stamp_s = 1000.0 + 0.2 * result.index
        tracked = tracker.track(result, "cam", stamp_s)
        cam.publish(tracked, None, seconds_stamp(stamp_s), "map")
    # the stream's first map -> odom also at the image stamp; later frames: image + tolerance
    assert [round(stamp_seconds(t.header.stamp), 6) for t in node.sent] == [1000.0, 1000.1, 1000.3]
    estimate = tracker.estimate()
    np.testing.assert_allclose(estimate, tracked.frame.map_odom)
    node.sent.clear()
    cam.republish()  # use_sim_time before the first /clock: ROS time 0
    assert node.sent == []
    node.now_ns = 1_796_000_000_500_000_000
    cam.republish()
    (tf,) = node.sent
    assert (tf.header.frame_id, tf.child_frame_id) == ("map", "odom")
    assert stamp_seconds(tf.header.stamp) == pytest.approx(1_796_000_000.6, abs=1e-6)
    assert tf.transform.translation.x == pytest.approx(estimate[0, 3])
    assert tf.transform.translation.y == pytest.approx(estimate[1, 3])
    tracker.restore_estimate(estimate)  # a loaded session's estimate: stamped now, the next frame a first one
    cam.republish()
    assert stamp_seconds(node.sent[-1].header.stamp) == pytest.approx(1_796_000_000.6, abs=1e-6)


def test_the_trackers_notices_of_every_kind_reach_the_log() -> None:
    """rclpy refuses a second severity at a call site it has seen (the bug of one shared `log(...)` call:
    the auto switch's warning after the TF mode's info failed the publish step); `log_notice` has a call site
    per kind."""
    import rclpy.logging

    logger = rclpy.logging.get_logger("notice_test")

    def one_site(level: str) -> None:
        getattr(logger, level)("text")

    one_site("info")
    with pytest.raises(ValueError, match="severity cannot be changed"):
        one_site("warning")
    for level, throttle in [
        ("info", None),
        ("warning", None),
        ("warning", 10.0),
        ("info", None),
        ("warning", 10.0),
    ]:
        log_notice(logger, level, "text", throttle)


# ----------------------------------------------------------------------------- a late mount (issue 29)
def _heard(buf: TfBuffer, tf: object) -> None:
    """The node's own edge, back through /tf into the listener's buffer."""
    pose = transform_to_matrix(tf.transform)
    buf.set_transform(tf.header.frame_id, tf.child_frame_id, stamp_seconds(tf.header.stamp), pose, False)


def test_a_late_mount_publishes_map_below_the_camera_then_map_to_base_without_overlap(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A URDF gap (`camera_link -> cam` only): the node's edge is the inverted `camera_link -> map` (no robot
    frame is its child); robot_state_publisher's static `base_link -> camera_link` appears after frame 2:
    from frame 3 `map -> base_link`, accepted by the one-parent check although the old inverted edge is
    still in the graph, stamped after the last inverted edge (no stamp with both: no loop), one frame of
    gap; a consumer's lookups of `map -> cam` give the camera pose on both sides of the switch."""
    monkeypatch.setattr(tf_module, "_Tf2RosBroadcaster", None)
    node = FakeNode()
    config = OutputConfig.from_params(default_params()).with_params(publish_depth=False, tf_mode="auto")
    buf = TfBuffer()  # the node's listener and, here, the consumer
    buf.set_transform("camera_link", "cam", 0.0, CAMLINK_OPTICAL, static=True)
    guard = TfEdgeGuard(buf.graph)
    tracker = CameraTracker(
        config.mapper_config(), RobotTfConfig("auto"), BufferLookup(buf), tf_graph=guard.foreign_graph
    )
    cam = CameraTf(node, config, tracker, guard, "front")
    scene = make_scene(6, 48, 32)
    session = StandInSession(scene, random_sim3(1, 0.5), scale_frames=2)
    poses = {}
    for i in range(6):
        if i == 3:
            buf.set_transform("base_link", "camera_link", 0.0, BASE_CAMLINK, static=True)
        for result in session.push_index(i):
            stamp_s = 1000.0 + 0.2 * result.index
            tracked = tracker.track(result, "cam", stamp_s)
            poses[stamp_s] = tracked.frame.camera_pose
            cam.publish(tracked, pose_msg(tracked.frame.body_pose), seconds_stamp(stamp_s), "map")
            for tf in node.sent[-1:]:
                _heard(buf, tf)
    edges = [
        (t.header.frame_id, t.child_frame_id, round(stamp_seconds(t.header.stamp), 6)) for t in node.sent
    ]
    inverted = [s for p, c, s in edges if (p, c) == ("camera_link", "map")]
    mapped = [s for p, c, s in edges if (p, c) == ("map", "base_link")]
    assert len(inverted) + len(mapped) == len(edges) == len(poses), (edges, node.warnings, tracker.switches)
    assert cam.stats()["tf_edges_refused"] == 0 and tracker.switches == 1
    assert inverted and mapped and max(inverted) < min(mapped)  # never both at one stamp
    assert round(min(mapped) - max(inverted), 6) == 0.2  # the gap: one frame
    for stamp_s in (inverted[-1], mapped[0], mapped[-1]):  # map -> cam through either edge
        np.testing.assert_allclose(buf.lookup("map", "cam", stamp_s), poses[stamp_s], atol=1e-6)
    np.testing.assert_allclose(buf.lookup("base_link", "cam", mapped[-1]), BASE_CAMLINK @ CAMLINK_OPTICAL)
    with pytest.raises(TransformUnavailable):
        buf.lookup("map", "cam", max(inverted) + 0.1)  # inside the one-frame gap
