"""Localization mode over a saved session on the DDS node (issue 32; docs/session.md "Localization mode"):
the kidnapped drifting oracle through the model seam (test/kidnap_oracle_node.py), tracking health on (the
default), `map -> camera`.

Node A maps scene frames 0..19 and saves a session. Node B loads it with `mapping.enabled: false`: its
`~/tracking_state` says lost before any frame (the place in the loaded map is unknown), stays lost through a
cover and the oracle's confused frames (odometry covariance >= 100x A's tracking value, nothing added), and a
verified match against the loaded keyframes relocalises it (`map -> camera` at the mapped place). The loaded
map is never extended: B's voxel map keeps its points and a session B saves holds A's keyframes, no more.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from builtin_interfaces.msg import Time
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus
from loop_oracle_node import ORACLE_PARAMS, oracle_scene
from nav_msgs.msg import Odometry
from ros_helpers import RosClient, camera_position_in_map, start_tiny_node
from sensor_msgs.msg import Image
from std_msgs.msg import Header
from std_srvs.srv import Trigger
from test_node_tracking_state import (
    AFTER,
    CONFUSED,
    COVERED,
    KIDNAP,
    LATCHED,
    MAPPED,
    RELIABLE,
    collect,
    settled_map_points,
)
from tf2_msgs.msg import TFMessage

from lingbot_map_ros.engine.mapping.frames import camera_rest_pose
from lingbot_map_ros.ros.messages.conversions import rgb_to_image
from lingbot_map_ros.ros.messages.poses import seconds_stamp

pytestmark = pytest.mark.dds

NODE = "/loc/loc"
PARAMS = {**ORACLE_PARAMS, "publish.frame_cloud": False, "publish.depth": False, "diagnostics_rate": 5.0}


def stamp_s(stamp: Time) -> float:
    return stamp.sec + 1e-9 * stamp.nanosec


def test_localization_mode_on_a_loaded_session_starts_lost_and_never_extends_the_map(
    ros_client: RosClient, tmp_path: Path
) -> None:
    scene = oracle_scene()
    rel = np.linalg.inv(scene.poses[0]) @ scene.poses
    truth = (camera_rest_pose() @ rel)[:, :3, 3]  # camera centres in the node's map (first camera at rest)
    black = np.zeros_like(scene.images[0])
    sessions = tmp_path / "sessions"
    odometry = collect(ros_client, Odometry, f"{NODE}/odometry")
    tf = collect(ros_client, TFMessage, "/tf")
    script = Path(__file__).parent.with_name("kidnap_oracle_node.py")
    images = ros_client.publisher(Image, "/loc/image", RELIABLE)
    sent: list[tuple[float, int | None]] = []  # (stamp, scene frame or None: black) of every frame sent

    def show(frames: list[int | None], t0: float) -> None:
        """One frame at a time, 0.1 s apart from `t0`: the next once the last one's odometry is out."""
        for k, frame in enumerate(frames):
            stamp = t0 + 0.1 * k
            sent.append((stamp, frame))
            rgb = black if frame is None else scene.images[frame]
            images.publish(rgb_to_image(rgb, Header(stamp=seconds_stamp(stamp), frame_id="camera")))
            done = len(sent) - 1 if len(sent) == 1 else len(sent)  # the anchor pair comes out together
            odometry.wait_for(done, timeout=60)

    params = {**PARAMS, "session.dir": str(sessions), "output_dir": str(tmp_path / "maps")}
    node_a = start_tiny_node(
        tmp_path / "a", "loc", params, client=ros_client, ready=("save_session",), script=script
    )
    try:
        ros_client.wait_for_subscribers(images)
        show(list(range(MAPPED)), 100.0)
        saved = ros_client.call(Trigger, f"{NODE}/save_session", timeout=60)
        assert saved.success, saved.message
    finally:
        assert node_a.stop() == 0, node_a.output()
    (saved_dir,) = sorted(sessions.iterdir())
    with np.load(saved_dir / "loop.npz") as loop:
        saved_keys = sorted(loop["kf_keys"].tolist())
    assert len(saved_keys) >= 3, saved_keys
    tracked_covariance = odometry.messages[-1].pose.covariance[0]

    odometry.clear()
    sent.clear()
    state = collect(ros_client, DiagnosticStatus, f"{NODE}/tracking_state", LATCHED)
    diagnostics = collect(ros_client, DiagnosticArray, "/diagnostics")
    load = {"session.load_path": saved_dir.name, "mapping.enabled": False}
    node_b = start_tiny_node(
        tmp_path / "b", "loc", params, load, client=ros_client, ready=("save_session",), script=script
    )
    try:
        lost = state.wait_for(lambda m: m and m[-1].message == "lost", timeout=30)[-1]
        assert lost.level == DiagnosticStatus.ERROR and ("maps", "false") in [
            (v.key, v.value) for v in lost.values
        ]
        loaded_points = settled_map_points(diagnostics)
        assert loaded_points > 0
        ros_client.wait_for_subscribers(images)
        show([None] * COVERED + KIDNAP[:CONFUSED], 200.0)
        assert state.messages[-1].message == "lost", state.messages[-1]  # lost stays lost: no new map
        assert settled_map_points(diagnostics) == loaded_points
        show(KIDNAP[CONFUSED:], 200.0 + 0.1 * len(sent))
        found = state.wait_for(lambda m: m and m[-1].message in ("relocalised", "tracking"), timeout=30)[-1]
        assert found.level == DiagnosticStatus.OK, found  # a verified match against the loaded keyframes
        show(list(range(KIDNAP[-1] + 1, KIDNAP[-1] + 1 + AFTER)), 200.0 + 0.1 * len(sent))
        assert settled_map_points(diagnostics) == loaded_points  # localization mode: never extended
        resaved = ros_client.call(Trigger, f"{NODE}/save_session", timeout=60)
        assert resaved.success, resaved.message
    finally:
        assert node_b.stop() == 0, node_b.output()

    (b_dir,) = [d for d in sessions.iterdir() if d != saved_dir]
    with np.load(b_dir / "loop.npz") as loop:
        assert sorted(loop["kf_keys"].tolist()) == saved_keys  # the keyframe map as loaded
    by_stamp = {round(stamp_s(m.header.stamp), 3): m for m in odometry.messages}
    for stamp, _ in sent[: COVERED + CONFUSED]:  # lost from the start: inflated on every frame
        assert by_stamp[round(stamp, 3)].pose.covariance[0] >= 100.0 * tracked_covariance, stamp
    edges = {}
    for msg in tf.messages:
        for t in msg.transforms:
            position = camera_position_in_map(t)
            if position is not None:
                edges[round(stamp_s(t.header.stamp), 3)] = position
    # Placed in the loaded map by the match: where node A put the same scene frames (stamps 100 + 0.1 k).
    errors = [np.linalg.norm(edges[round(s, 3)] - edges[round(100.0 + 0.1 * f, 3)]) for s, f in sent[-AFTER:]]
    assert max(errors) < 0.5, errors
    truth_errors = [np.linalg.norm(edges[round(s, 3)] - truth[f]) for s, f in sent[-AFTER:]]
    assert max(truth_errors) < 1.0, truth_errors  # the map's own drift
