"""Issue 16, the "also seen" items over real DDS (node subprocess, tiny preset on CPU): an odd frame of
another size or camera no longer restarts the map, two cameras alternating on one topic raise a
/diagnostics ERROR naming both, invalid frame ids are rejected, corrupt and EXIF-rotated JPEGs, and
`use_sim_time` without /clock. docs/reliability.md."""

from __future__ import annotations

import io
import time
from pathlib import Path

import numpy as np
import pytest
from attack_helpers import ATTACK_PARAMS, RELIABLE, collect, count, latest, warm_up
from builtin_interfaces.msg import Time
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus
from nav_msgs.msg import Odometry
from PIL import Image as PilImage
from ros_helpers import RosClient, load_frames, start_tiny_node
from ros_messages import rgb_to_compressed
from sensor_msgs.msg import CompressedImage, Image, PointCloud2
from std_msgs.msg import Header

from lingbot_map_ros.ros.messages.conversions import rgb_to_image

pytestmark = pytest.mark.dds

ERROR = int.from_bytes(DiagnosticStatus.ERROR, "little") if isinstance(DiagnosticStatus.ERROR, bytes) else 2


def test_odd_frames_alternating_cameras_and_bad_frame_ids(ros_client: RosClient, tmp_path: Path) -> None:
    name = "streams"
    node = f"/{name}/{name}"
    frames = load_frames(4, step=5)
    tiny = np.ascontiguousarray(frames[0][:14, :14])
    proc = start_tiny_node(tmp_path, name, ATTACK_PARAMS, {"map.conf_threshold": 0.0, "queue_size": 50})
    try:
        proc.wait_ready(ros_client, [f"{node}/reset"])
        odom = collect(ros_client, Odometry, f"{node}/odometry")
        diag = collect(ros_client, DiagnosticArray, "/diagnostics")
        pub = ros_client.publisher(Image, f"/{name}/image", RELIABLE)
        ros_client.wait_for_subscribers(pub)
        sec = 0

        def send(rgb: np.ndarray, frame_id: str = "cam") -> None:
            nonlocal sec
            sec += 1
            pub.publish(rgb_to_image(rgb, Header(stamp=Time(sec=sec), frame_id=frame_id)))
            time.sleep(0.05)

        sec = warm_up(
            pub, odom, lambda i: rgb_to_image(frames[i % 4], Header(stamp=Time(sec=i), frame_id="cam"))
        )
        for i in range(2):
            send(frames[i])
        odom.wait_for(lambda ms: ms[-1].header.stamp.sec == sec, timeout=60)
        time.sleep(0.3)  # a /diagnostics after that frame (DDS may have lost warm-up frames: no exact counts)
        _, _, before = latest(diag, name, lambda lv, m, v: count(v, "map_points") > 0)
        mapped = len(odom)
        # one odd frame of another size, one of another camera, then the stream goes on: same epoch
        send(tiny)
        send(frames[0], "cam_b")
        for i in range(3):
            send(frames[i])
        odom.wait_for(mapped + 3, timeout=60)
        _, _, after = latest(diag, name, lambda lv, m, v: count(v, "rejected_unconfirmed_stream_change") == 2)
        assert after["session.epoch"] == before["session.epoch"], (before, after)
        assert count(after, "map_points") >= count(before, "map_points") > 0
        assert {m.child_frame_id for m in odom.messages} == {"cam"}
        # invalid TF child frame ids: rejected, never published
        for bad in ("map", "/cam", "ca\tm"):
            send(frames[0], bad)
        latest(diag, name, lambda lv, m, v: count(v, "rejected_invalid_frame_id") == 3)
        # consecutive frames of camera cam_b: a real change, the stream restarts on the third (then the
        # new anchor phase of kv_cache.scale_frames = 2 frames needs one more)
        for i in range(4):
            send(frames[i], "cam_b")
        odom.wait_for(lambda ms: any(m.child_frame_id == "cam_b" for m in ms), timeout=60)
        _, _, changed = latest(
            diag, name, lambda lv, m, v: count(v, "rejected_unconfirmed_stream_change") == 4
        )
        assert int(changed["session.epoch"]) == int(before["session.epoch"]) + 1
        # two cameras alternating on one topic: the current one (cam_b) maps, cam_c is rejected, ERROR
        mapped_before = len(odom)
        for i in range(40):
            send(frames[i % 4], "cam_b" if i % 2 == 0 else "cam_c")
        level, message, values = latest(diag, name, lambda lv, m, v: lv == ERROR)
        assert "'cam_b'" in message and "'cam_c'" in message, message
        odom.wait_for(mapped_before + 20, timeout=60)
        assert {m.child_frame_id for m in odom.messages[mapped_before:]} == {"cam_b"}
        out = proc.output()
        assert out.count("frame rejected (unconfirmed_stream_change") <= 3, out  # throttled (10 s)
        assert "Traceback" not in out
        print(
            f"\nstreams: epoch {before['session.epoch']} kept over 2 odd frames; alternating ids: {message}"
        )
    finally:
        assert proc.stop() == 0, proc.output()[-3000:]


def _exif_jpeg(rgb: np.ndarray, orientation: int) -> bytes:
    exif = PilImage.Exif()
    exif[0x0112] = orientation
    out = io.BytesIO()
    PilImage.fromarray(rgb).save(out, "JPEG", exif=exif.tobytes(), quality=90)
    return out.getvalue()


def test_compressed_corrupt_and_exif_jpegs_under_sim_time_without_clock(
    ros_client: RosClient, tmp_path: Path
) -> None:
    name = "simtime"
    node = f"/{name}/{name}"
    frames = load_frames(4, step=5)
    params = {"image_transport": "compressed", "use_sim_time": True, "map.conf_threshold": 0.0}
    proc = start_tiny_node(tmp_path, name, ATTACK_PARAMS, params)
    try:
        proc.wait_ready(ros_client, [f"{node}/reset"])
        odom = collect(ros_client, Odometry, f"{node}/odometry")
        diag = collect(ros_client, DiagnosticArray, "/diagnostics")  # on a wall-clock timer: it comes
        clouds = collect(ros_client, PointCloud2, f"{node}/map_cloud")
        pub = ros_client.publisher(CompressedImage, f"/{name}/image/compressed", RELIABLE)
        ros_client.wait_for_subscribers(pub)
        sent = warm_up(
            pub,
            odom,
            lambda i: rgb_to_compressed(frames[i % 3], Header(stamp=Time(sec=10 + i), frame_id="cam")),
        )
        bad, last = 10 + sent + 10, 10 + sent + 11  # after every warm-up stamp, however many it took
        corrupt = bytearray(rgb_to_compressed(frames[3], Header()).data)
        sos = corrupt.find(b"\xff\xda")
        start = sos + 2 + int.from_bytes(corrupt[sos + 2 : sos + 4], "big")
        corrupt[start:-2] = (
            np.random.default_rng(7).integers(0, 256, len(corrupt) - 2 - start, np.uint8).tobytes()
        )
        pub.publish(
            CompressedImage(
                header=Header(stamp=Time(sec=bad), frame_id="cam"), format="jpeg", data=bytes(corrupt)
            )
        )
        rotated = _exif_jpeg(frames[3], 6)  # a viewer would show it 294 wide, 518 high
        pub.publish(
            CompressedImage(header=Header(stamp=Time(sec=last), frame_id="cam"), format="jpeg", data=rotated)
        )
        odom.wait_for(lambda ms: ms[-1].header.stamp.sec == last, timeout=60)
        _, _, values = latest(
            diag, name, lambda lv, m, v: count(v, "rejected_undecodable_image") == 1, timeout=30
        )
        assert bad not in [m.header.stamp.sec for m in odom.messages]
        assert count(values, "rejected_unconfirmed_stream_change") == 0  # EXIF did not change the size
        assert values["clock"] == "sim, no /clock"
        assert values["session.epoch"] == "0", values
        assert clouds.wait_for(1, timeout=30)[-1].width > 0  # the map timer runs without /clock too
        deadline = time.monotonic() + 15
        while "no /clock message arrived" not in proc.output():
            assert time.monotonic() < deadline, proc.output()[-3000:]
            time.sleep(0.2)
        assert proc.output().count("no /clock message arrived") == 1
    finally:
        assert proc.stop() == 0, proc.output()[-3000:]
