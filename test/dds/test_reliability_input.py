"""Reliability of the node's raw input over real DDS (node subprocess, tiny preset on CPU): a fuzz corpus of
170 malformed Image messages, a camera resolution change mid-stream, a 60 Hz flood into a model slowed to a
few FPS (docs/reliability.md). Compressed images and their decoding: test_reliability_input_compressed.py."""

from __future__ import annotations

import os
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator

import cv2
import numpy as np
import psutil
import pytest
from attack_helpers import INPUT_PARAMS, S0, collect, latest_values
from builtin_interfaces.msg import Time
from diagnostic_msgs.msg import DiagnosticArray
from fault_injection import FAULTS_ENV
from nav_msgs.msg import Odometry
from rclpy.qos import QoSProfile, ReliabilityPolicy
from ros_helpers import Collector, NodeProcess, RosClient, load_frames, start_tiny_node
from sensor_msgs.msg import Image
from std_msgs.msg import Header

from lingbot_map_ros.ros.messages.conversions import rgb_to_image

pytestmark = pytest.mark.dds

RELIABLE = QoSProfile(depth=500, reliability=ReliabilityPolicy.RELIABLE)
CONFIRM = 3  # stream.change_confirm_frames (default): frames of a new size/camera before the stream restarts


def stamp(i: int) -> Time:
    return Time(sec=2000 + i // 10, nanosec=(i % 10) * 100_000_000)


def raw_corpus(rng: np.random.Generator) -> list[tuple[str, Image]]:
    """170 malformed `sensor_msgs/Image`s with the rejection cause each must be counted under."""
    h = Header(stamp=stamp(0), frame_id="cam")
    cases: list[tuple[str, Image]] = []
    encodings = ["16UC1", "32FC1", "yuv422", "bayer_rggb8", "", "rgb16", "8UC3", "jpeg", "64FC1", "nv21"]
    for k in range(40):  # unknown encodings, 32FC1 full of NaN among them
        enc = encodings[k % len(encodings)]
        nan = np.full((4, 4), np.nan, np.float32).tobytes()
        cases.append(
            ("unsupported_encoding", Image(header=h, height=4, width=4, encoding=enc, step=16, data=nan))
        )
    for _ in range(30):  # step smaller than a row
        w, hh = int(rng.integers(16, 200)), int(rng.integers(16, 100))
        step = 3 * w - int(rng.integers(1, 3 * w))
        data = bytes(step * hh + 3 * w)
        cases.append(
            ("malformed_image", Image(header=h, height=hh, width=w, encoding="rgb8", step=step, data=data))
        )
    for k in range(40):  # data shorter than height * step
        enc = ("rgb8", "bgr8", "rgba8", "bgra8", "mono8")[k % 5]
        ch = {"rgb8": 3, "bgr8": 3, "rgba8": 4, "bgra8": 4, "mono8": 1}[enc]
        w, hh = int(rng.integers(16, 200)), int(rng.integers(16, 100))
        step = ch * w + int(rng.integers(0, 8))
        size = int(rng.integers(0, step * (hh - 1) + ch * w))
        data = rng.integers(0, 256, size, dtype=np.uint8).tobytes()
        cases.append(
            ("malformed_image", Image(header=h, height=hh, width=w, encoding=enc, step=step, data=data))
        )
    for k in range(20):  # zero sizes
        w, hh = (0, 10) if k % 2 else (10, 0)
        cases.append(
            ("malformed_image", Image(header=h, height=hh, width=w, encoding="rgb8", step=3 * w, data=b""))
        )
    for k in range(20):  # huge sizes with a few bytes
        w, hh = (2**31 - 1, 2**31 - 1) if k % 2 else (65535, 65535)
        step = min(3 * w, 2**32 - 1)
        cases.append(
            (
                "malformed_image",
                Image(header=h, height=hh, width=w, encoding="rgb8", step=step, data=bytes(64)),
            )
        )
    sizes = [(1, 1), (2, 2), (13, 100), (100, 13), (4, 64), (1, 4000)]
    for k in range(20):  # complete but unusable: under one patch, or no patch row after the resize
        hh, w = sizes[k % len(sizes)]
        pixels = rng.integers(0, 256, (hh, w, 3), dtype=np.uint8)
        cases.append(("unsupported_size", rgb_to_image(pixels, h)))
    return cases


@pytest.fixture(scope="module")
def frames() -> list[np.ndarray]:
    return load_frames(12, step=4)


@pytest.fixture(scope="module")
def raw_node(ros_client: RosClient, tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    proc = start_tiny_node(tmp_path_factory.mktemp("fuzz_raw"), "fuzz_raw", INPUT_PARAMS, client=ros_client)
    yield proc
    assert proc.stop() == 0, proc.output()


def publish_valid(
    pub: object,
    frames: list[np.ndarray],
    indices: range,
    size: tuple[int, int] | None = None,
    frame_id: str = "cam",
) -> None:
    for i in indices:
        rgb = frames[i % len(frames)]
        if size is not None:
            rgb = cv2.resize(rgb, size, interpolation=cv2.INTER_AREA)
        pub.publish(rgb_to_image(rgb, Header(stamp=stamp(i), frame_id=frame_id)))
        time.sleep(0.02)


def raw_node_streams(ros_client: RosClient) -> tuple[Collector, Collector, object]:
    """Odometry and /diagnostics collectors of the `fuzz_raw` node and a matched Image publisher into it."""
    odom = collect(ros_client, Odometry, "/fuzz_raw/fuzz_raw/odometry", RELIABLE)
    diag = collect(ros_client, DiagnosticArray, "/diagnostics", RELIABLE)
    pub = ros_client.publisher(Image, "/fuzz_raw/image", RELIABLE)
    ros_client.wait_for_subscribers(pub)
    return odom, diag, pub


def test_fuzzed_images_are_rejected_by_cause_and_mapping_continues(
    ros_client: RosClient, raw_node: NodeProcess, frames: list[np.ndarray]
) -> None:
    odom, diag, pub = raw_node_streams(ros_client)
    publish_valid(pub, frames, range(4))
    odom.wait_for(4)
    corpus = raw_corpus(np.random.default_rng(8))
    assert len(corpus) == 170
    for _, msg in corpus:
        pub.publish(msg)
    expected = Counter(cause for cause, _ in corpus)
    values = latest_values(diag, "fuzz_raw", lambda v: v.get("rejected_total") == str(len(corpus)))
    for cause, count in expected.items():
        assert values[f"rejected_{cause}"] == str(count), (cause, values)
    assert values["frames_received"] == "4" and values["failed_total"] == "0"  # nothing reached the model
    publish_valid(pub, frames, range(4, 8))
    stamps = [(m.header.stamp.sec, m.header.stamp.nanosec) for m in odom.wait_for(8)]
    assert stamps == [(stamp(i).sec, stamp(i).nanosec) for i in range(8)]  # mapping went on, in order
    assert raw_node.alive()
    log = raw_node.output()
    for cause in expected:  # one clear, throttled line per cause
        assert 1 <= log.count(f"frame rejected ({cause},") <= 2, cause
    assert "expected one of" in log and "smaller than a row" in log and "at least" in log


def test_resolution_or_camera_change_resets_with_a_log_line_and_mapping_continues(
    ros_client: RosClient, raw_node: NodeProcess, frames: list[np.ndarray]
) -> None:
    odom, diag, pub = raw_node_streams(ros_client)
    publish_valid(pub, frames, range(100, 104))
    odom.wait_for(4)
    before = latest_values(diag, "fuzz_raw", lambda v: v.get("session.input_hw") == "(294, 518)")
    # a new camera mode: the first CONFIRM - 1 frames are rejected (stream.change_confirm_frames), the
    # CONFIRM-th restarts the stream
    publish_valid(pub, frames, range(90, 90 + CONFIRM - 1), size=(259, 147))
    publish_valid(pub, frames, range(104, 104 + S0 + 2), size=(259, 147))
    got = odom.wait_for(4 + S0 + 2)
    assert [m.header.stamp for m in got[4:]] == [stamp(i) for i in range(104, 104 + S0 + 2)]
    after = latest_values(diag, "fuzz_raw", lambda v: v.get("session.input_hw") == "(147, 259)")
    assert int(after["session.epoch"]) == int(before["session.epoch"]) + 1
    assert "input resolution changed from 294x518 to 147x259" in after["session.last_reset_reason"]
    log = raw_node.output()
    assert "mapping restarted" in log and "input resolution changed from 294x518 to 147x259" in log

    publish_valid(pub, frames, range(92, 92 + CONFIRM - 1), size=(259, 147), frame_id="cam_b")
    publish_valid(pub, frames, range(110, 110 + S0 + 2), size=(259, 147), frame_id="cam_b")  # same size
    got = odom.wait_for(4 + 2 * (S0 + 2))
    assert [m.header.stamp for m in got[-(S0 + 2) :]] == [stamp(i) for i in range(110, 110 + S0 + 2)]
    assert {m.child_frame_id for m in got[-(S0 + 2) :]} == {"cam_b"}
    switched = latest_values(diag, "fuzz_raw", lambda v: "cam_b" in v.get("session.last_reset_reason", ""))
    assert int(switched["session.epoch"]) == int(after["session.epoch"]) + 1
    assert "camera changed from 'cam' to 'cam_b'" in raw_node.output()
    assert int(switched["rejected_unconfirmed_stream_change"]) == 2 * (CONFIRM - 1)


def test_flood_at_60hz_into_a_slow_model_is_bounded(
    ros_client: RosClient, tiny_node: Callable[..., NodeProcess], frames: list[np.ndarray]
) -> None:
    # every model step takes >= 0.25 s: a model at < 4 FPS
    flood = {"queue_size": 2, "qos.depth": 5}
    proc = tiny_node("flood60", INPUT_PARAMS, flood, faults="delay@*:0.25")
    try:
        odom = collect(ros_client, Odometry, "/flood60/flood60/odometry", RELIABLE)
        diag = collect(ros_client, DiagnosticArray, "/diagnostics", RELIABLE)
        pub = ros_client.publisher(Image, "/flood60/image", RELIABLE)
        ros_client.wait_for_subscribers(pub)
        msgs = [rgb_to_image(f, Header(frame_id="cam")) for f in frames]
        process = psutil.Process(proc.pid)
        rss: list[tuple[float, float]] = []
        stop = threading.Event()

        def sample() -> None:
            while not stop.wait(0.5):
                rss.append((time.monotonic(), process.memory_info().rss / 2**20))

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        seconds, count = 10.0, 600
        start_t = time.monotonic()
        for i in range(count):  # 60 Hz, paced against the clock
            msg = msgs[i % len(msgs)]
            msg.header.stamp = stamp(i)
            pub.publish(msg)
            time.sleep(max(0.0, start_t + (i + 1) / 60.0 - time.monotonic()))
        rate = count / (time.monotonic() - start_t)

        time.sleep(2.0)  # the last frames reach the node's queue

        def settled_counts(v: dict[str, str]) -> bool:
            done = int(v.get("frames_processed", -1)) + int(v.get("frames_dropped", -1))
            return done == int(v.get("frames_received", -2)) and v.get("queue_length") == "0"

        values = latest_values(diag, "flood60", settled_counts, timeout=20)
        received = int(values["frames_received"])
        # DDS (reliable, reader history 5) may drop part of the flood before the callback on a busy machine;
        # enough must reach the node to overflow its queue many times over.
        assert received >= 100, values
        stop.set()
        sampler.join()
        assert rate > 50, f"the flood ran at {rate:.1f} Hz"
        processed, dropped = int(values["frames_processed"]), int(values["frames_dropped"])
        assert processed <= seconds * 4 + 4 and dropped >= received - seconds * 4 - 4, values
        assert int(values["queue_max_length"]) <= 2
        published = len(odom.messages)
        assert S0 <= published <= processed
        settled = [mb for t, mb in rss if t > start_t + 3.0]  # after the caches were allocated
        assert len(settled) >= 10
        growth = max(settled) - min(settled)
        assert growth < 32, f"node RSS varied by {growth:.1f} MiB during the flood: {settled}"
        print(
            f"\nflood: {count} frames at {rate:.1f} Hz, received {received}, processed {processed}, "
            f"dropped {dropped}, "
            f"RSS {min(settled):.0f}..{max(settled):.0f} MiB"
        )
    finally:
        assert proc.stop() == 0, proc.output()
    assert os.environ.get(FAULTS_ENV) is None
