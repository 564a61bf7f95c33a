"""replay and record over real DDS, each as its own process (the CLI), on the shared corridor frames."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from rclpy.qos import QoSProfile, ReliabilityPolicy
from rclpy.serialization import deserialize_message
from ros_helpers import RosClient
from rosbags.rosbag2 import Reader
from sensor_msgs.msg import Image

from lingbot_map_ros.tools.bags.make_bag import MakeBagConfig, image_files, read_images, write_camera_bag

SHARED = Path(__file__).resolve().parents[2].parent / "shared"
LOOP = SHARED / "data" / "loop"
FRAMES = 20

pytestmark = [pytest.mark.dds, pytest.mark.skipif(not LOOP.is_dir(), reason="../shared/data/loop is missing")]


@pytest.fixture(scope="module")
def bag(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("replay") / "loop"
    write_camera_bag(
        MakeBagConfig(output=path, rate_hz=10.0, start_time_ns=1_700_000_000_000_000_000),
        read_images(image_files(LOOP)[:FRAMES], 128),
        total=FRAMES,
    )
    return path


def _cli(*args: str, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "lingbot_map_ros.tools.cli", *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _messages(bag: Path, topic: str) -> list[tuple[int, bytes]]:
    with Reader(bag) as reader:
        conns = [c for c in reader.connections if c.topic == topic]
        return [(t, bytes(raw)) for _, t, raw in reader.messages(connections=conns)]


def _finish(proc: subprocess.Popen[str], timeout: float) -> tuple[str, str]:
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"{proc.args} did not finish in {timeout} s:\n{out}\n{err}")
    assert proc.returncode == 0, f"{proc.args} exited {proc.returncode}:\n{out}\n{err}"
    return out, err


def test_replay_into_record_keeps_every_message_byte_exact_at_the_scaled_timing(
    bag: Path, tmp_path: Path, dds_env: dict[str, str]
) -> None:
    env = {**os.environ, **dds_env}
    recorded = tmp_path / "recorded"
    recorder = _cli(
        "record",
        "-o",
        str(recorded),
        "--topics",
        "/camera/image_raw",
        "/camera/camera_info",
        "--until-idle",
        "3",
        env=env,
    )
    player = _cli("replay", str(bag), "--rate", "2", "--wait-for-subscribers", "20", env=env)
    out, _ = _finish(player, 60)
    assert "published 40 messages" in out and "all acknowledged" in out
    out, _ = _finish(recorder, 30)
    assert "/camera/image_raw: 20" in out

    original = _messages(bag, "/camera/image_raw")
    received = _messages(recorded, "/camera/image_raw")
    assert [raw for _, raw in received] == [raw for _, raw in original]
    assert len(_messages(recorded, "/camera/camera_info")) == FRAMES
    spacing = np.diff([t for t, _ in received]) / 1e9
    assert np.median(spacing) == pytest.approx(0.05, abs=0.015)  # 10 Hz bag played at rate 2


def test_replay_start_topics_remap_and_record_stops_on_sigint(
    bag: Path, tmp_path: Path, dds_env: dict[str, str]
) -> None:
    env = {**os.environ, **dds_env}
    recorded = tmp_path / "recorded"
    recorder = _cli("record", "-o", str(recorded), "--topics", "/front/image", "/camera/camera_info", env=env)
    player = _cli(
        "replay",
        str(bag),
        "--start",
        "1.0",
        "--topics",
        "/camera/image_raw",
        "--remap",
        "/camera/image_raw:=/front/image",
        "--rate",
        "4",
        "--wait-for-subscribers",
        "20",
        env=env,
    )
    out, _ = _finish(player, 60)
    assert "published 10 messages" in out
    time.sleep(3.0)  # acked = in the reader's history; leave the recorder time to run its callbacks
    recorder.send_signal(signal.SIGINT)
    out, err = _finish(recorder, 20)
    assert "never published: /camera/camera_info" in err
    received = _messages(recorded, "/front/image")
    assert [raw for _, raw in received] == [raw for _, raw in _messages(bag, "/camera/image_raw")[10:]]


def test_replay_reports_a_missing_topic_and_an_unreadable_bag(
    bag: Path, tmp_path: Path, dds_env: dict[str, str]
) -> None:
    env = {**os.environ, **dds_env}
    proc = _cli("replay", str(bag), "--topics", "/nope", env=env)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 2 and "topics ['/nope'] not in bag" in err
    proc = _cli("replay", str(tmp_path), env=env)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 2 and "not a readable rosbag2 bag" in err


def test_replay_loop_plays_again_until_interrupted(
    bag: Path, dds_env: dict[str, str], ros_client: RosClient
) -> None:
    """The test's own subscriber counts frames; SIGINT only once more than one pass has arrived."""
    reliable = QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE)
    collector = ros_client.collect(Image, "/camera/image_raw", reliable)
    player = _cli(
        "replay",
        str(bag),
        "--loop",
        "--rate",
        "10",
        "--topics",
        "/camera/image_raw",
        "--wait-for-subscribers",
        "30",
        env={**os.environ, **dds_env},
    )
    try:
        received = collector.wait_for(2 * FRAMES + 5, timeout=60.0)
    finally:
        player.send_signal(signal.SIGINT)
        _, err = player.communicate(timeout=20)
    assert player.returncode == 130 and "replay interrupted" in err, err[-3000:]
    original = [bytes(m.data) for m in (_image(raw) for _, raw in _messages(bag, "/camera/image_raw"))]
    assert [bytes(m.data) for m in received[FRAMES : 2 * FRAMES]] == original  # the second pass, complete
    first, second = received[:FRAMES], received[FRAMES : 2 * FRAMES]
    assert [m.header.stamp for m in first] == [m.header.stamp for m in second]  # stamps as recorded
    ros_client.node.destroy_subscription(collector.subscription)


def _image(raw: bytes) -> Image:
    return deserialize_message(raw, Image)
