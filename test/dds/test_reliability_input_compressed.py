"""Reliability of the node's compressed input (docs/reliability.md): decoding limits checked in-process (a PNG
bomb refused from its header, image sizes read from real JPEG/PNG headers, cv_bridge failures as rejections)
and, over real DDS (node subprocess, tiny preset on CPU), a fuzz corpus of 50 malformed CompressedImage
messages. Raw images, a resolution change and a flood: test_reliability_input.py."""

from __future__ import annotations

import functools
import resource
import struct
import zlib
from collections import Counter
from collections.abc import Callable

import cv2
import numpy as np
import pytest
from attack_helpers import INPUT_PARAMS, collect, latest_values
from builtin_interfaces.msg import Time
from diagnostic_msgs.msg import DiagnosticArray
from nav_msgs.msg import Odometry
from rclpy.qos import QoSProfile, ReliabilityPolicy
from ros_helpers import NodeProcess, RosClient, load_frames
from sensor_msgs.msg import CompressedImage
from std_msgs.msg import Header

from lingbot_map_ros.ros.messages import conversions
from lingbot_map_ros.ros.messages.conversions import (
    ImageConversionError,
    compressed_image_size,
    compressed_to_rgb,
    image_to_rgb,
    rgb_to_image,
)

pytestmark = pytest.mark.dds

RELIABLE = QoSProfile(depth=500, reliability=ReliabilityPolicy.RELIABLE)


def stamp(i: int) -> Time:
    return Time(sec=2000 + i // 10, nanosec=(i % 10) * 100_000_000)


def _png_chunk(kind: bytes, data: bytes) -> bytes:
    return (
        struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
    )


@functools.cache
def png_bomb(side: int, rows: int) -> bytes:
    """A PNG whose IHDR claims `side` x `side` RGB px, with `rows` all-zero rows of real zlib data (deflate
    ~1000:1: 3000 rows of 9000 px are ~80 kB; decoding would allocate the whole 243 MB image)."""
    deflate = zlib.compressobj(9)
    row = bytes(1 + 3 * side)
    idat = b"".join(deflate.compress(row) for _ in range(rows)) + deflate.flush()
    header = _png_chunk(b"IHDR", struct.pack(">IIBBBBB", side, side, 8, 2, 0, 0, 0))
    return b"\x89PNG\r\n\x1a\n" + header + _png_chunk(b"IDAT", idat) + _png_chunk(b"IEND", b"")


def test_a_png_bomb_is_rejected_from_its_header_without_decoding() -> None:
    bomb = png_bomb(9000, 3000)
    assert len(bomb) < 400_000
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(ImageConversionError, match="claims 9000x9000 px") as info:
        compressed_to_rgb(CompressedImage(format="png", data=bomb))
    assert info.value.cause == "oversized_image"
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak < 50_000  # kB: nothing was decoded
    assert compressed_image_size(bomb) == (9000, 9000)
    assert compressed_image_size(b"\xff\xd8\xff\xda") is None and compressed_image_size(b"GIF89a") is None


@pytest.mark.parametrize(
    ("ext", "params"),
    [
        (".jpg", []),
        (".jpg", [cv2.IMWRITE_JPEG_PROGRESSIVE, 1]),
        (".jpg", [cv2.IMWRITE_JPEG_OPTIMIZE, 1]),
        (".png", []),
    ],
)
def test_compressed_image_size_reads_real_headers(ext: str, params: list[int]) -> None:
    rgb = np.random.default_rng(2).integers(0, 256, (37, 91, 3), dtype=np.uint8)
    ok, buf = cv2.imencode(ext, rgb, params)
    assert ok and compressed_image_size(buf.tobytes()) == (37, 91)
    exif = b"\xff\xd8\xff\xe1\x00\x08Exif\x00\x00" + buf.tobytes()[2:]  # an APP1 segment before the frame
    if ext == ".jpg":
        assert compressed_image_size(exif) == (37, 91)
        np.testing.assert_array_equal(
            compressed_to_rgb(CompressedImage(format="jpeg", data=exif)).shape, (37, 91, 3)
        )


class StubBridge:
    """Stands in for cv_bridge (absent here): fails as cv_bridge does on a corrupt payload, or succeeds."""

    def __init__(self, result: object) -> None:
        self.result = result

    def _answer(self, *args: object, **kwargs: object) -> object:
        if isinstance(self.result, Exception):
            raise self.result
        return self.result

    imgmsg_to_cv2 = compressed_imgmsg_to_cv2 = _answer


@pytest.mark.parametrize(
    ("result", "accepted"),
    [
        (AttributeError("'NoneType' object has no attribute 'shape'"), False),  # a failed imdecode inside
        (cv2.error("bad image"), False),
        (None, False),
        (np.zeros((4, 4), np.uint8), False),
        (np.zeros((20, 30, 3), np.uint8), True),
    ],
)
def test_cv_bridge_failures_become_rejections(
    monkeypatch: pytest.MonkeyPatch, result: object, accepted: bool
) -> None:
    monkeypatch.setattr(conversions, "_BRIDGE", StubBridge(result))
    raw = rgb_to_image(np.zeros((20, 30, 3), np.uint8), Header())
    jpeg = CompressedImage(
        format="jpeg", data=cv2.imencode(".jpg", np.zeros((20, 30, 3), np.uint8))[1].tobytes()
    )
    for convert, msg, cause in (
        (image_to_rgb, raw, "malformed_image"),
        (compressed_to_rgb, jpeg, "undecodable_image"),
    ):
        if accepted:
            assert convert(msg).shape == (20, 30, 3)
        else:
            with pytest.raises(ImageConversionError, match="cv_bridge") as info:
                convert(msg)
            assert info.value.cause == cause


def compressed_corpus(rng: np.random.Generator, frame: np.ndarray) -> list[tuple[str, CompressedImage]]:
    """50 malformed `sensor_msgs/CompressedImage`s (each checked to fail locally as its cause says)."""
    h = Header(stamp=stamp(0), frame_id="cam")
    ok, jpeg = cv2.imencode(".jpg", frame)
    ok2, png = cv2.imencode(".png", frame)
    assert ok and ok2
    jpeg, png = jpeg.tobytes(), png.tobytes()
    payloads: list[tuple[str, bytes, str]] = []
    payloads += [("undecodable_image", b"", "jpeg")] * 5
    payloads += [("undecodable_image", rng.bytes(int(rng.integers(1, 5000))), "jpeg") for _ in range(10)]
    payloads += [
        ("undecodable_image", b"\xff\xd8\xff\xe0" + rng.bytes(int(rng.integers(10, 3000))), "jpeg")
        for _ in range(10)
    ]
    payloads += [("undecodable_image", png[: int(rng.integers(8, 200))], "png") for _ in range(10)]
    payloads += [("undecodable_image", png[:33], "png")]  # signature + IHDR of the frame, no pixel data
    payloads += [("undecodable_image", jpeg[:2] + rng.bytes(len(jpeg) // 4), "jpeg") for _ in range(4)]
    jpeg_sof = b"\xff\xd8\xff\xc0\x00\x11\x08" + struct.pack(">HH", 30000, 30000) + b"\x03" + rng.bytes(200)
    payloads += [
        ("oversized_image", png_bomb(20000, 1), "png"),
        ("oversized_image", png_bomb(9000, 3000), "png"),
    ]
    payloads += [("oversized_image", jpeg_sof, "jpeg")] * 2
    tiny = [
        cv2.imencode(".png", np.zeros((hh, w, 3), np.uint8))[1].tobytes()
        for hh, w in ((1, 1), (8, 8), (2, 300))
    ]
    payloads += [("unsupported_size", tiny[k % 3], "png") for k in range(6)]
    cases = []
    for cause, data, fmt in payloads:
        msg = CompressedImage(header=h, format=fmt, data=data)
        if cause != "unsupported_size":  # decided by the node's size check, after decoding
            with pytest.raises(ImageConversionError) as info:
                compressed_to_rgb(msg)
            assert info.value.cause == cause
        cases.append((cause, msg))
    return cases


@pytest.fixture(scope="module")
def frames() -> list[np.ndarray]:
    return load_frames(12, step=4)


def test_fuzzed_compressed_images_are_rejected(
    ros_client: RosClient, tiny_node: Callable[..., NodeProcess], frames: list[np.ndarray]
) -> None:
    proc = tiny_node("fuzz_comp", INPUT_PARAMS, {"image_transport": "compressed"})
    try:
        odom = collect(ros_client, Odometry, "/fuzz_comp/fuzz_comp/odometry", RELIABLE)
        diag = collect(ros_client, DiagnosticArray, "/diagnostics", RELIABLE)
        pub = ros_client.publisher(CompressedImage, "/fuzz_comp/image/compressed", RELIABLE)
        ros_client.wait_for_subscribers(pub)
        corpus = compressed_corpus(np.random.default_rng(9), frames[0])
        assert len(corpus) == 50
        good = [cv2.imencode(".jpg", f)[1].tobytes() for f in frames[:4]]

        def valid(i: int) -> CompressedImage:
            return CompressedImage(
                header=Header(stamp=stamp(i), frame_id="cam"), format="jpeg", data=good[i % 4]
            )

        for i in range(2):
            pub.publish(valid(i))
        for _, msg in corpus:
            pub.publish(msg)
        for i in range(2, 4):
            pub.publish(valid(i))
        odom.wait_for(4, timeout=90)  # 50 fuzzed images are decoded and refused first (a loaded CI machine)
        expected = Counter(cause for cause, _ in corpus)
        values = latest_values(diag, "fuzz_comp", lambda v: v.get("rejected_total") == str(len(corpus)))
        for cause, count in expected.items():
            assert values[f"rejected_{cause}"] == str(count), (cause, values)
        assert values["frames_received"] == "4" and proc.alive()
    finally:
        assert proc.stop() == 0, proc.output()
