"""Loop closure on the DDS node (issue 23): the drifting oracle (tools/loop/loop_oracle.py) injected through
the engine's model seam (test/loop_oracle_node.py), the bare camera mode (`map -> camera`), one run of 1¼
laps.

The stream keeps its own (drifting) frame; a verified loop jumps `map -> camera` towards the truth, `~/path`
is republished corrected, the grid is rebuilt, `~/loop_closures` shows the loop edges between keyframe
positions, /diagnostics counts the closer's work, `~/optimize` forces a pass; one parent per frame in /tf.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest
from diagnostic_msgs.msg import DiagnosticArray
from loop_oracle_node import DRIFT, ORACLE_PARAMS, oracle_scene
from nav_msgs.msg import OccupancyGrid
from nav_msgs.msg import Path as PathMsg
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from ros_helpers import Collector, RosClient, start_tiny_node
from sensor_msgs.msg import Image
from std_msgs.msg import Header
from std_srvs.srv import Trigger
from tf2_msgs.msg import TFMessage
from visualization_msgs.msg import Marker, MarkerArray

from lingbot_map_ros.engine.geometry import invert_rigid
from lingbot_map_ros.engine.mapping.frames import camera_rest_pose
from lingbot_map_ros.ros.messages.conversions import rgb_to_image
from lingbot_map_ros.ros.messages.poses import seconds_stamp, transform_msg
from lingbot_map_ros.ros.tf.listener import transform_to_matrix
from lingbot_map_ros.tools.loop.loop_oracle import drifted_poses

pytestmark = pytest.mark.dds

NODE = "/loop/loop"
RELIABLE = QoSProfile(depth=500, reliability=ReliabilityPolicy.RELIABLE)
LATCHED = QoSProfile(
    depth=1, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL
)
T0 = 100.0  # stamp of frame 0 (s); frames 0.1 s apart
PARAMS = {
    **ORACLE_PARAMS,
    "publish.frame_cloud": False,
    "publish.depth": False,
    "path.publish_rate": 10.0,
    "grid.rate": 10.0,
    "diagnostics_rate": 5.0,
    "map.conf_threshold": 0.0,
}


def collect(client: RosClient, msg_type: type, topic: str, qos: QoSProfile = RELIABLE) -> Collector:
    collector = Collector()
    collector.subscription = client.node.create_subscription(msg_type, topic, collector, qos)
    return collector


def frame_index(stamp: object) -> int:
    return round((stamp.sec + 1e-9 * stamp.nanosec - T0) / 0.1)


def in_map(poses: np.ndarray) -> np.ndarray:
    """Camera centres [N, 3] of camera->world poses [N, 4, 4] in the node's map (first camera at rest)."""
    rel = np.linalg.inv(poses[0]) @ poses
    return (camera_rest_pose() @ rel)[:, :3, 3]


def loop_values(diagnostics: list[DiagnosticArray]) -> dict[str, float]:
    for msg in reversed(diagnostics):
        for status in msg.status:
            values = {kv.key: kv.value for kv in status.values}
            if "loop_closure.corrections" in values:
                return {k: float(v) for k, v in values.items() if k.startswith("loop_closure.")}
    return {}


def test_loop_jumps_map_to_camera_corrects_path_grid_markers(ros_client: RosClient, tmp_path: Path) -> None:
    scene = oracle_scene()
    n = len(scene.images)
    truth = in_map(scene.poses)
    drifted = in_map(drifted_poses(scene, DRIFT)[0])
    tf = collect(ros_client, TFMessage, "/tf")
    path = collect(ros_client, PathMsg, f"{NODE}/path")
    grid = collect(ros_client, OccupancyGrid, f"{NODE}/grid", LATCHED)
    markers = collect(ros_client, MarkerArray, f"{NODE}/loop_closures", LATCHED)
    diagnostics = collect(ros_client, DiagnosticArray, "/diagnostics")
    proc = start_tiny_node(
        tmp_path,
        "loop",
        PARAMS,
        client=ros_client,
        ready=("reset", "optimize"),
        script=Path(__file__).parent.with_name("loop_oracle_node.py"),
    )
    try:
        images = ros_client.publisher(Image, "/loop/image", RELIABLE)
        ros_client.wait_for_subscribers(images)
        for i, rgb in enumerate(scene.images):
            images.publish(rgb_to_image(rgb, Header(stamp=seconds_stamp(T0 + 0.1 * i), frame_id="camera")))
            time.sleep(0.05)

        def camera_edges(msgs: list[TFMessage]) -> dict[int, np.ndarray]:
            out = {}
            for msg in msgs:
                for t in msg.transforms:
                    if t.header.frame_id == "camera" and t.child_frame_id == "map":  # T_cam_map
                        map_cam = invert_rigid(transform_to_matrix(t.transform))
                        out[frame_index(t.header.stamp)] = map_cam[:3, 3]
            return out

        tf.wait_for(lambda msgs: n - 1 in camera_edges(msgs), timeout=90)
        time.sleep(1.0)  # the last frames' grid is out (10 Hz): from now on only a rebuild changes it
        grid.clear()
        response = ros_client.call(Trigger, f"{NODE}/optimize", timeout=60)
        assert response.success, response.message
        rebuilt = grid.wait_for(1, timeout=20)[-1]
        # The last view once more (the oracle gives it the same stream pose): its edge carries the correction.
        header = Header(stamp=seconds_stamp(T0 + 0.1 * n), frame_id="camera")
        images.publish(rgb_to_image(scene.images[-1], header))
        tf.wait_for(lambda msgs: n in camera_edges(msgs), timeout=30)
        final_path = path.wait_for(lambda m: m and len(m[-1].poses) == n + 1, timeout=20)[-1]
        stats = loop_values(
            diagnostics.wait_for(lambda m: loop_values(m).get("loop_closure.corrections", 0) >= 2, timeout=20)
        )
        loop_markers = markers.messages[-1]
        # ~/reject_loop (issue 30): the last loop leaves, the map from before it is published; then none left.
        rejected = ros_client.call(Trigger, f"{NODE}/reject_loop", timeout=60)
        assert rejected.success and rejected.message.startswith("last loop removed"), rejected.message
        again = ros_client.call(Trigger, f"{NODE}/reject_loop", timeout=60)
        assert not again.success and again.message.startswith("no loop to remove"), again.message
        undone = loop_values(
            diagnostics.wait_for(
                lambda m: loop_values(m).get("loop_closure.loops_undone", 0) >= 1, timeout=20
            )
        )
        assert undone["loop_closure.corrections"] > stats["loop_closure.corrections"], undone
    finally:
        assert proc.stop() == 0, proc.output()

    # The stream keeps its own frame; each correction is a jump of map -> camera (towards the truth).
    edges = camera_edges(tf.messages)
    assert sorted(edges) == list(range(n + 1))
    truth, drifted = np.vstack([truth, truth[-1:]]), np.vstack([drifted, drifted[-1:]])
    offset = np.array([np.linalg.norm(edges[i] - drifted[i]) for i in range(n + 1)])  # correction applied
    assert offset[:5].max() < 1e-3, offset  # before any loop: the stream's own poses
    # the corrections arrive as jumps between consecutive frames (which ones depends on when the closer's
    # passes ran: since issue 31 on the inference thread between live steps, it may catch up before frame n)
    assert np.diff(offset).max() > 0.05, offset
    error = np.linalg.norm(np.stack([edges[i] for i in range(n + 1)]) - truth, axis=1)
    drift_error = np.linalg.norm(drifted - truth, axis=1)
    assert error[n] < 0.35 * drift_error[n], (error, drift_error)
    truth, drifted = truth[:n], drifted[:n]
    # One parent per frame in everything the node put on /tf.
    parents: dict[str, set[str]] = {}
    for msg in tf.messages:
        for t in msg.transforms:
            parents.setdefault(t.child_frame_id, set()).add(t.header.frame_id)
    assert all(len(p) == 1 for p in parents.values()), parents
    # ~/path republished corrected: every pose (also those from before the loop) near the truth.
    xyz = np.array([[p.pose.position.x, p.pose.position.y, p.pose.position.z] for p in final_path.poses[:n]])
    path_rms = float(np.sqrt(np.mean(np.sum((xyz - truth) ** 2, axis=1))))
    drift_rms = float(np.sqrt(np.mean(np.sum((drifted - truth) ** 2, axis=1))))
    assert path_rms < 0.35 * drift_rms, (path_rms, drift_rms)
    # The rebuilt grid, and the loop edges between keyframe positions of the corrected path, in map.
    assert rebuilt.header.frame_id == "map" and any(v >= 0 for v in rebuilt.data)
    (marker,) = loop_markers.markers
    assert marker.type == Marker.LINE_LIST and marker.header.frame_id == "map"
    ends = np.array([[p.x, p.y, p.z] for p in marker.points])
    assert len(ends) >= 2 and len(ends) % 2 == 0
    assert np.min(np.linalg.norm(ends[:, None] - xyz[None], axis=2), axis=1).max() < 1e-3
    # /diagnostics: candidates, verified, rejected, last correction, optimisation time.
    assert (
        stats["loop_closure.verified"] >= 1
        and stats["loop_closure.candidates"] >= stats["loop_closure.verified"]
    )
    assert stats["loop_closure.last_optimize_ms"] > 0 and "loop_closure.last_correction_m" in stats
    # issue 31: every verification pass ran on the inference thread between live steps (engine/gpu_gaps.py)
    assert 1 <= stats["loop_closure.gap_tasks"] <= stats["loop_closure.candidates"], stats
    tracks = {"truth": truth, "stream": drifted, "tf": np.stack([edges[i] for i in range(n)]), "path": xyz}
    run = {"stats": stats, "path_rms": path_rms, "drift_rms": drift_rms, "edges": ends.tolist()}
    run.update({name: track.tolist() for name, track in tracks.items()})
    (tmp_path / "loop_closure_run.json").write_text(json.dumps(run))  # docs/img/loop_closure_node.png


def test_robot_mode_loop_jumps_map_to_odom(ros_client: RosClient, tmp_path: Path) -> None:
    """`tf.mode: map_to_odom`: odometry is the truth (odom = the first base frame), the model drifts; so
    `map -> odom` drifts away from identity until the loops pull it back: a jump of `map -> odom` alone."""
    scene = oracle_scene()
    n = len(scene.images)
    rest = camera_rest_pose()
    odom_base = [rest @ np.linalg.inv(scene.poses[0]) @ p @ np.linalg.inv(rest) for p in scene.poses]
    tf = collect(ros_client, TFMessage, "/tf")
    params = {**PARAMS, "tf.mode": "map_to_odom", "tf.publish_rate": 20.0}
    proc = start_tiny_node(tmp_path, "loop", params, client=ros_client, ready=("reset", "optimize"),
                           script=Path(__file__).parent.with_name("loop_oracle_node.py"))  # fmt: skip
    try:
        tf_pub = ros_client.publisher(TFMessage, "/tf", RELIABLE)
        static_pub = ros_client.publisher(TFMessage, "/tf_static", LATCHED)
        images = ros_client.publisher(Image, "/loop/image", RELIABLE)
        ros_client.wait_for_subscribers(images)
        static_pub.publish(
            TFMessage(transforms=[transform_msg(rest, seconds_stamp(0.0), "base_link", "camera")])
        )
        for i, rgb in enumerate(scene.images):
            stamp = seconds_stamp(T0 + 0.1 * i)
            tf_pub.publish(TFMessage(transforms=[transform_msg(odom_base[i], stamp, "odom", "base_link")]))
            images.publish(rgb_to_image(rgb, Header(stamp=stamp, frame_id="camera")))
            time.sleep(0.05)

        def map_odom(msgs: list[TFMessage]) -> list[np.ndarray]:
            return [
                np.array([t.transform.translation.x, t.transform.translation.y, t.transform.translation.z])
                for msg in msgs
                for t in msg.transforms
                if t.header.frame_id == "map"
                and t.child_frame_id == "odom"
                and frame_index(t.header.stamp) < n  # fmt: skip
            ]

        tf.wait_for(lambda msgs: any(frame_index(t.header.stamp) == n - 1 and t.child_frame_id == "odom"
                                     for m in msgs for t in m.transforms), timeout=90)  # fmt: skip
        time.sleep(0.5)
        # the largest drift while streaming: on a faster machine the closer corrects before the last frame
        drifted = max(np.linalg.norm(v) for v in map_odom(tf.messages))
        streamed = list(tf.messages)
        tf.clear()
        response = ros_client.call(Trigger, f"{NODE}/optimize", timeout=60)
        assert response.success, response.message
        republished = tf.wait_for(lambda msgs: len(msgs) >= 10, timeout=20)  # the timer's, stamped now
    finally:
        assert proc.stop() == 0, proc.output()
    after = [
        np.array([t.transform.translation.x, t.transform.translation.y, t.transform.translation.z])
        for m in republished
        for t in m.transforms
        if t.child_frame_id == "odom"
    ]
    assert drifted > 0.3, drifted  # the model's drift shows in map -> odom
    assert np.linalg.norm(after[-1]) < 0.35 * drifted, (after[-1], drifted)  # pulled back: the jump
    parents: dict[str, set[str]] = {}
    for msg in streamed + republished:
        for t in msg.transforms:
            parents.setdefault(t.child_frame_id, set()).add(t.header.frame_id)
    assert parents == {"odom": {"map"}, "base_link": {"odom"}}, parents  # one parent each, no map -> base
