"""Issue 20 over real DDS, one node (tiny preset, CPU, `scale.source: depth`): refused session loads leave the
running map as it was, and depth images are checked like images.

Before the fix: a refused `~/load_session` (a manifest with `"tf_mode": "bogus"`, a grid saved at another
resolution) answered `success: false`, and at the next frame the map, the trajectory and the epoch were gone
(7,885 -> 804 points, 86 -> 8 poses); a 0x0 depth image with an image's stamp failed that frame's outputs
(`failed_publish_IndexError`); depth images had no pixel budget. The engine-level cases of every refusal
reason are in test_session_transaction.py.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from attack_helpers import collect, count, latest, warm_up
from builtin_interfaces.msg import Time
from diagnostic_msgs.msg import DiagnosticArray
from nav_msgs.msg import Odometry
from ros_helpers import RosClient, load_frames, start_tiny_node
from sensor_msgs.msg import Image
from std_msgs.msg import Header
from std_srvs.srv import Trigger

from lingbot_map_ros.ros.messages.conversions import depth_to_image, rgb_to_image

pytestmark = pytest.mark.dds

NAME = "sessions_i20"
NODE = f"/{NAME}/{NAME}"
S0 = 2
MAX_PIXELS = 1_000_000


def stamp(i: int) -> Time:
    return Time(sec=3000 + i // 10, nanosec=(i % 10) * 100_000_000)


def depth_msg(width: int, height: int, at: Time, metres: float = 2.0) -> Image:
    """A 32FC1 depth image of `metres` everywhere, `width` x `height`, in frame `cam`."""
    return depth_to_image(np.full((height, width), metres, np.float32), Header(stamp=at, frame_id="cam"))


def edit_manifest(folder: Path, edit) -> None:  # noqa: ANN001 - test helper
    """Edit the manifest and rewrite its hash (a careful attacker)."""
    path = folder / "manifest.json"
    manifest = json.loads(path.read_text())
    edit(manifest)
    text = json.dumps(manifest)
    path.write_text(text)
    (folder / "manifest.sha256").write_text(hashlib.sha256(text.encode()).hexdigest())


def bomb(manifest: dict) -> None:  # anchors declared 32 x 4096² x 3 (the 1.57 MB zip bomb)
    manifest["files"]["anchors.npz"]["arrays"]["images"]["shape"] = [32, 4096, 4096, 3]


def test_refused_loads_keep_the_map_and_depth_is_checked(ros_client: RosClient, tmp_path: Path) -> None:
    sessions = tmp_path / "sessions"
    params = {
        "kv_cache.scale_frames": S0,
        "diagnostics_rate": 10.0,
        "publish.frame_cloud": False,
        "scale.source": "depth",
        "scale.min_samples": 1,
        "max_input_pixels": MAX_PIXELS,
        "session.dir": str(sessions),
        "output_dir": str(tmp_path / "maps"),
    }
    proc = start_tiny_node(tmp_path, NAME, params, client=ros_client, ready=("reset", "load_session"))
    try:
        frames = load_frames(8, step=3)
        h, w = frames[0].shape[:2]
        odom = collect(ros_client, Odometry, f"{NODE}/odometry")
        diag = collect(ros_client, DiagnosticArray, "/diagnostics")
        image_pub = ros_client.publisher(Image, f"/{NAME}/image", odom.subscription.qos_profile)
        depth_pub = ros_client.publisher(Image, f"/{NAME}/depth_image", odom.subscription.qos_profile)
        ros_client.wait_for_subscribers(image_pub)

        def frame(i: int) -> Image:  # the depth first: the node keeps it for the image of the same stamp
            depth_pub.publish(depth_msg(w, h, stamp(i)))
            return rgb_to_image(frames[i % len(frames)], Header(stamp=stamp(i), frame_id="cam"))

        sent = warm_up(image_pub, odom, frame)
        for i in range(sent, sent + S0 + 4):
            image_pub.publish(frame(i))
        odom.wait_for(S0 + 4 + 1, timeout=60)
        _, _, values = latest(diag, NAME, lambda lv, msg, v: count(v, "map_points") > 0, timeout=60)
        saved = ros_client.call(Trigger, f"{NODE}/save_session")
        assert saved.success, saved.message
        (good,) = sessions.iterdir()

        # A 0x0 depth image with the next frame's stamp, and depth images over the pixel budget: rejected and
        # counted; the frame's outputs are published.
        n = len(odom)
        i = sent + S0 + 4
        depth_pub.publish(depth_msg(0, 0, stamp(i)))
        for k in range(3):
            depth_pub.publish(depth_msg(1100, 1000, stamp(i + 1 + k)))
        image_pub.publish(rgb_to_image(frames[0], Header(stamp=stamp(i), frame_id="cam")))
        odom.wait_for(n + 1, timeout=60)
        _, _, values = latest(
            diag,
            NAME,
            lambda lv, msg, v: count(v, "rejected_depth_oversized") == 3 and count(v, "frames_published") > 0,
        )
        assert count(values, "rejected_depth_empty") == 1 and count(values, "failed_total") == 0, values

        # Refused loads: the map, the trajectory and the resets are as before, also after the next frame.
        # Settled: every pose the node has is an odometry message received (frames still in flight under load
        # would make a fixed count miss), so the trajectory's length is known before the loads.
        _, _, before = latest(
            diag, NAME, lambda lv, msg, v: count(v, "trajectory_poses") == len(odom) >= n + 1, timeout=60
        )
        n = count(before, "trajectory_poses") - 1
        cases = [
            ("bogus_tf", lambda m: m["state"].__setitem__("tf_mode", "bogus"), "concrete mode"),
            ("other_grid", lambda m: m["state"].__setitem__("grid_resolution", 0.5), "grid resolution 0.5 m"),
            ("zip_bomb", bomb, "exceeds the limits of this node"),
        ]
        for name, edit, why in cases:
            shutil.copytree(good, sessions / name)
            edit_manifest(sessions / name, edit)
            (result,) = ros_client.set_parameters(NODE, {"session.load_path": name})
            assert result.successful, result.reason
            answer = ros_client.call(Trigger, f"{NODE}/load_session")
            assert not answer.success and why in answer.message, answer.message
        (result,) = ros_client.set_parameters(NODE, {"session.dir": str(tmp_path)})
        assert not result.successful and "needs a reload" in result.reason
        image_pub.publish(frame(i + 10))
        odom.wait_for(n + 2, timeout=60)
        _, _, after = latest(
            diag, NAME, lambda lv, msg, v: count(v, "trajectory_poses") == len(odom) >= n + 2, timeout=30
        )
        for key in ("session.epoch", "session.resets_total", "resets"):
            assert count(after, key) == count(before, key), (key, before, after)
        assert count(after, "map_points") >= count(before, "map_points") > 0, (before, after)
        assert "Traceback" not in proc.output()
    finally:
        assert proc.stop() == 0, proc.output()
