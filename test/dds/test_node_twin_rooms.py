"""Twin rooms through the node (issue 30, "Done when"): the drifting oracle in two identical rooms
(test/twin_rooms_node.py), `tf.mode: map_to_odom` with the robot's odometry equal to the truth. Verification
is fooled by the look-alike (a pass across the rooms returns the pose of the place the image resembles), so
only the closer's consistency checks (the chi-square gate, the odometry check: engine/loop/gate.py) keep the
rooms apart. Before them `map -> odom` jumped to 11.11 m and stayed there (the issue's run at 10 m).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from diagnostic_msgs.msg import DiagnosticArray
from nav_msgs.msg import Path as PathMsg
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from ros_helpers import Collector, RosClient, start_tiny_node
from sensor_msgs.msg import Image
from std_msgs.msg import Header
from std_srvs.srv import Trigger
from tf2_msgs.msg import TFMessage
from twin_rooms_node import APART_ENV, UNGATED_ENV, twin_scene

from lingbot_map_ros.engine.mapping.frames import camera_rest_pose
from lingbot_map_ros.ros.messages.conversions import rgb_to_image
from lingbot_map_ros.ros.messages.poses import seconds_stamp, transform_msg
from lingbot_map_ros.ros.tf.listener import transform_to_matrix

pytestmark = pytest.mark.dds

NODE = "/twin/twin"
RELIABLE = QoSProfile(depth=500, reliability=ReliabilityPolicy.RELIABLE)
LATCHED = QoSProfile(
    depth=1, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL
)
T0 = 100.0  # stamp of frame 0 (s); frames 0.1 s apart
PARAMS = {
    "model.image_width": 112,
    "kv_cache.scale_frames": 2,
    "kv_cache.sliding_window": 4,
    "kv_cache.max_window": 4,
    "loop_closure.min_similarity": 0.5,
    "tf.mode": "map_to_odom",
    "tf.publish_rate": 20.0,
    "publish.frame_cloud": False,
    "publish.depth": False,
    "path.publish_rate": 10.0,
    "diagnostics_rate": 20.0,
}
MAX_JUMP_M = 2.0  # the bound on one correction


def frame_index(stamp: object) -> int:
    return round((stamp.sec + 1e-9 * stamp.nanosec - T0) / 0.1)


def loop_values(diagnostics: list[DiagnosticArray]) -> dict[str, float]:
    """The newest `loop_closure.*` values in `diagnostics` ({} when none)."""
    for msg in reversed(diagnostics):
        for status in msg.status:
            values = {kv.key: kv.value for kv in status.values}
            if "loop_closure.backlog" in values:
                return {k: float(v) for k, v in values.items() if k.startswith("loop_closure.")}
    return {}


def caught_up(diagnostics: list[DiagnosticArray]) -> bool:
    """The closer has nothing queued or in progress and no verification pass waits (per `diagnostics`)."""
    values = loop_values(diagnostics)
    return bool(values) and values["loop_closure.backlog"] == 0 and values["loop_closure.gap_pending"] == 0


def run_twin_rooms(client: RosClient, tmp_path: Path, apart_m: float, ungated: bool) -> dict[str, object]:
    """Stream the twin rooms `apart_m` apart through a node (odometry = truth, one frame at a time: the next
    once `map -> odom` of the one before is out); returns `map -> odom` per frame [N, 3], the final one
    after `~/optimize` [3], the corrected `~/path` positions per frame {index: [3]} and the truth [N, 3]."""
    scene = twin_scene(apart_m)
    n = len(scene.images)
    rest = camera_rest_pose()
    world = scene.world_poses
    odom_base = [rest @ np.linalg.inv(world[0]) @ p @ np.linalg.inv(rest) for p in world]
    tf, path, diag = Collector(), Collector(), Collector()
    diag.subscription = client.node.create_subscription(DiagnosticArray, "/diagnostics", diag, RELIABLE)
    tf.subscription = client.node.create_subscription(TFMessage, "/tf", tf, RELIABLE)
    path.subscription = client.node.create_subscription(PathMsg, f"{NODE}/path", path, RELIABLE)

    def map_odom(msgs: list[TFMessage]) -> dict[int, np.ndarray]:
        return {
            frame_index(t.header.stamp): transform_to_matrix(t.transform)
            for msg in msgs
            for t in msg.transforms
            if t.header.frame_id == "map" and t.child_frame_id == "odom" and frame_index(t.header.stamp) < n
        }

    env = {APART_ENV: str(apart_m), UNGATED_ENV: "1" if ungated else "0"}
    with pytest.MonkeyPatch.context() as patch:
        for name, value in env.items():
            patch.setenv(name, value)
        proc = start_tiny_node(tmp_path, "twin", PARAMS, client=client, ready=("reset", "optimize"),
                               script=Path(__file__).parent.with_name("twin_rooms_node.py"))  # fmt: skip
    try:
        tf_pub = client.publisher(TFMessage, "/tf", RELIABLE)
        static_pub = client.publisher(TFMessage, "/tf_static", LATCHED)
        images = client.publisher(Image, "/twin/image", RELIABLE)
        client.wait_for_subscribers(images)
        static_pub.publish(
            TFMessage(transforms=[transform_msg(rest, seconds_stamp(0.0), "base_link", "camera")])
        )
        for i, rgb in enumerate(scene.images):
            stamp = seconds_stamp(T0 + 0.1 * i)
            tf_pub.publish(TFMessage(transforms=[transform_msg(odom_base[i], stamp, "odom", "base_link")]))
            images.publish(rgb_to_image(rgb, Header(stamp=stamp, frame_id="camera")))
            # one frame at a time, the next once the closer caught up (as on a robot whose GPU keeps pace;
            # a closer lagging behind the 10 m move between the rooms applies the first room's scale
            # correction to the second room's lever: a jump of ~5 m that is no look-alike's)
            if i == 0:
                continue  # the anchor phase takes two frames
            tf.wait_for(lambda msgs, i=i: i in map_odom(msgs), timeout=60)
            seen = len(diag.messages)
            diag.wait_for(lambda msgs, seen=seen: caught_up(msgs[seen:]), timeout=60)
        tf.wait_for(lambda msgs: n - 1 in map_odom(msgs), timeout=60)
        streamed = map_odom(tf.messages)
        response = client.call(Trigger, f"{NODE}/optimize", timeout=60)  # after every queued keyframe
        assert response.success, response.message
        tf.clear()
        final = tf.wait_for(
            lambda msgs: any(t.child_frame_id == "odom" for m in msgs for t in m.transforms), timeout=20
        )
        last_path = path.wait_for(lambda m: m and len(m[-1].poses) >= n, timeout=20)[-1]
    finally:
        assert proc.stop() == 0, proc.output()
        client.node.destroy_subscription(tf.subscription)
        client.node.destroy_subscription(path.subscription)
        client.node.destroy_subscription(diag.subscription)
    (after,) = [
        transform_to_matrix(t.transform)
        for m in final[-1:]
        for t in m.transforms
        if t.child_frame_id == "odom"
    ]
    corrected = {
        frame_index(p.header.stamp): np.array([p.pose.position.x, p.pose.position.y, p.pose.position.z])
        for p in last_path.poses
    }
    truth = np.array([p[:3, 3] for p in odom_base])
    return {
        "stats": loop_values(diag.messages),
        "odom_base": np.stack(odom_base),
        "map_odom": np.stack([streamed[i] for i in sorted(streamed)]),
        "final": after,
        "path": corrected,
        "truth": truth,
        "rooms": scene.rooms,
    }


def rooms_apart(run: dict[str, object]) -> tuple[float, float]:
    """(distance of the two rooms' centroids in the corrected path, the same in the truth)."""
    path, truth, rooms = run["path"], run["truth"], run["rooms"]
    a = [i for i in path if rooms[i] == 0]
    b = [i for i in path if rooms[i] == 1]
    mapped = np.mean([path[i] for i in b], axis=0) - np.mean([path[i] for i in a], axis=0)
    true = truth[b].mean(axis=0) - truth[a].mean(axis=0)
    return float(np.linalg.norm(mapped)), float(np.linalg.norm(true))


def robot_jumps(run: dict[str, object]) -> tuple[np.ndarray, float]:
    """How far each new `map -> odom` moved the robot in the map [N - 1] (frame i's odometry pose under
    frame i's and frame i-1's `map -> odom`: the jump a correction makes at the robot, not its lever from
    the odom origin), and the jump of the final one (after `~/optimize`)."""
    map_odom, odom_base = run["map_odom"], run["odom_base"]
    steps = [
        np.linalg.norm((map_odom[i] @ odom_base[i])[:3, 3] - (map_odom[i - 1] @ odom_base[i])[:3, 3])
        for i in range(1, len(map_odom))
    ]
    last = odom_base[-1]
    final = np.linalg.norm((run["final"] @ last)[:3, 3] - (map_odom[-1] @ last)[:3, 3])
    return np.array(steps), float(final)


@pytest.mark.parametrize("apart_m", [4.0, 6.0, 10.0])
def test_twin_rooms_through_the_node_stay_apart_with_no_jump_over_2_m(
    ros_client: RosClient, tmp_path: Path, apart_m: float
) -> None:
    """The look-alike loops are refused (the odometry check counts them); no correction moves the robot
    more than 2 m; the rooms stay apart in the corrected path; loops within each room still close."""
    run = run_twin_rooms(ros_client, tmp_path, apart_m, ungated=False)
    stats, rooms = run["stats"], run["rooms"]
    jumps, final = robot_jumps(run)
    # the steps around the move into the second room (10 m in one frame): the stream's own drifted move
    change = int(np.argmax(rooms)) - 1
    corrections = np.delete(jumps, [change, change + 1])
    print(apart_m, jumps.round(2), final, rooms_apart(run), stats)
    assert corrections.max() <= MAX_JUMP_M and final <= MAX_JUMP_M, (corrections, final)
    mapped, true = rooms_apart(run)
    assert mapped >= 0.7 * true, (mapped, true)
    assert stats["loop_closure.rejected_odometry"] + stats["loop_closure.rejected_inconsistent"] >= 10, stats
    # a lap closed in each room: a correction well above the drift of one frame in each
    each = [corrections[:change].max(), corrections[change:].max()]
    assert min(each) > 0.3 and stats["loop_closure.corrections"] >= 2, (each, stats)


def test_twin_rooms_control_without_the_checks_merges_the_rooms(
    ros_client: RosClient, tmp_path: Path
) -> None:
    """The control: the same run with the chi-square gate and the odometry check refusing nothing (what the
    closer did before issue 30) jumps the robot by about the rooms' distance and merges them, so the test
    above can fail."""
    run = run_twin_rooms(ros_client, tmp_path, 10.0, ungated=True)
    jumps, _ = robot_jumps(run)
    mapped, true = rooms_apart(run)
    print(jumps.round(2), mapped, true)
    assert jumps.max() > 5.0 and mapped < 0.3 * true, (jumps, mapped, true)
