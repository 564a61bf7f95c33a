"""make-bag and bag reading: real rosbag2 bags (mcap and sqlite3) from the shared corridor frames."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import cv2
import numpy as np
import pytest
import yaml
from rosbags.rosbag2 import Reader

from lingbot_map_ros.tools import cli
from lingbot_map_ros.tools.bags.bag_io import BagError, decode_image, iter_frames, open_bag, ros2_typestore
from lingbot_map_ros.tools.bags.make_bag import image_files, read_images

SHARED = Path(__file__).resolve().parents[2].parent / "shared"
LOOP = SHARED / "data" / "loop"
FRAMES = 12
START_S = 1_700_000_000.5

pytestmark = pytest.mark.skipif(not LOOP.is_dir(), reason="../shared/data/loop is missing")


def _expected_frames(width: int | None) -> list[np.ndarray]:
    return list(read_images(image_files(LOOP)[:FRAMES], width))


def _make(tmp_path: Path, *extra: str) -> Path:
    bag = tmp_path / "bag"
    rc = cli.main(
        [
            "make-bag",
            str(LOOP),
            "-o",
            str(bag),
            "--max-frames",
            str(FRAMES),
            "--start-time",
            str(START_S),
            "--rate",
            "5",
            *extra,
        ]
    )
    assert rc == 0
    return bag


def _installed_type_hash(msgtype: str) -> str:
    """RIHS01 hash from the installed type description (share/<pkg>/msg/<Name>.json, as rosidl writes it)."""
    package, kind, name = msgtype.split("/")
    prefixes = [p for p in os.environ.get("AMENT_PREFIX_PATH", "").split(os.pathsep) if p] + [sys.prefix]
    description = next(
        Path(p) / "share" / package / kind / f"{name}.json"
        for p in prefixes
        if (Path(p) / "share" / package / kind / f"{name}.json").is_file()
    )
    hashes = json.loads(description.read_text())["type_hashes"]
    return next(h["hash_string"] for h in hashes if h["type_name"] == msgtype)


@pytest.mark.parametrize("storage", ["mcap", "sqlite3"])
def test_raw_image_bag_round_trips_pixels_stamps_and_metadata(tmp_path: Path, storage: str) -> None:
    bag = _make(
        tmp_path,
        "--storage",
        storage,
        "--width",
        "160",
        "--frame-id",
        "cam_optical",
        "--intrinsics",
        "100",
        "101",
        "80",
        "45",
    )
    metadata = yaml.safe_load((bag / "metadata.yaml").read_text())["rosbag2_bagfile_information"]
    assert metadata["storage_identifier"] == storage
    topics = {t["topic_metadata"]["name"]: t for t in metadata["topics_with_message_count"]}
    assert topics["/camera/image_raw"]["message_count"] == FRAMES
    assert topics["/camera/camera_info"]["message_count"] == FRAMES
    for entry in topics.values():  # hashes equal the installed ROS message packages' (ros2 bag checks them)
        meta = entry["topic_metadata"]
        assert meta["type_description_hash"] == _installed_type_hash(meta["type"])

    frames = list(iter_frames(bag))
    expected = _expected_frames(160)
    assert len(frames) == FRAMES
    for i, (frame, rgb) in enumerate(zip(frames, expected, strict=True)):
        np.testing.assert_array_equal(frame.rgb, rgb)
        assert frame.stamp_ns == round(START_S * 1e9) + i * 200_000_000
        assert frame.log_time_ns == frame.stamp_ns
        assert frame.frame_id == "cam_optical"

    ts = ros2_typestore()
    with Reader(bag) as reader:
        conn = next(c for c in reader.connections if c.topic == "/camera/camera_info")
        info = ts.deserialize_cdr(next(reader.messages(connections=[conn]))[2], conn.msgtype)
    assert (info.width, info.height) == (160, expected[0].shape[0])
    np.testing.assert_allclose(info.k.reshape(3, 3), [[100, 0, 80], [0, 101, 45], [0, 0, 1]])


@pytest.mark.parametrize(("fmt", "tolerance"), [("png", 0.0), ("jpeg", 4.0)])
def test_compressed_bag_decodes_to_the_source_frames(tmp_path: Path, fmt: str, tolerance: float) -> None:
    bag = _make(tmp_path, "--compressed", fmt, "--no-camera-info")
    with Reader(bag) as reader:
        assert [(c.topic, c.msgtype) for c in reader.connections] == [
            ("/camera/image_raw/compressed", "sensor_msgs/msg/CompressedImage")
        ]
    frames = list(iter_frames(bag))
    for frame, rgb in zip(frames, _expected_frames(None), strict=True):
        assert np.abs(frame.rgb.astype(float) - rgb).mean() <= tolerance


def test_video_source_becomes_a_bag_at_the_video_rate(tmp_path: Path) -> None:
    video = tmp_path / "walk.avi"
    writer = cv2.VideoWriter(str(video), cv2.VideoWriter_fourcc(*"MJPG"), 15.0, (128, 96))
    for rgb in _expected_frames(128)[:6]:
        writer.write(np.ascontiguousarray(cv2.resize(rgb, (128, 96))[..., ::-1]))
    writer.release()
    bag = tmp_path / "bag"
    assert cli.main(["make-bag", str(video), "-o", str(bag), "--every", "2", "--start-time", "0"]) == 0
    frames = list(iter_frames(bag))
    assert len(frames) == 3
    assert [f.stamp_ns for f in frames] == [0, round(1e9 / 15), 2 * round(1e9 / 15)]
    assert frames[0].rgb.shape == (96, 128, 3)


def test_bad_inputs_give_clear_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    assert cli.main(["make-bag", str(empty), "-o", str(tmp_path / "b1")]) == 2
    assert "holds no images" in capsys.readouterr().err

    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "000.png").write_bytes(b"not a png")
    assert cli.main(["make-bag", str(broken), "-o", str(tmp_path / "b2")]) == 2
    assert "cannot read image" in capsys.readouterr().err

    (tmp_path / "clip.mp4").write_bytes(b"not a video")
    assert cli.main(["make-bag", str(tmp_path / "clip.mp4"), "-o", str(tmp_path / "b3")]) == 2
    assert "cannot open video" in capsys.readouterr().err
    assert not (tmp_path / "b3").exists()
    assert cli.main(["make-bag", str(broken), "-o", str(tmp_path / "b2"), "--compressed", "png"]) == 2
    assert not (tmp_path / "b2").exists()  # a conversion that fails half way leaves no bag behind

    with pytest.raises(BagError, match="does not exist"):
        open_bag(tmp_path / "nowhere")
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "metadata.yaml").write_text("this: is not rosbag2\n")
    with pytest.raises(BagError, match="not a readable rosbag2 bag"):
        open_bag(tmp_path / "junk")

    bag = _make(tmp_path)
    with pytest.raises(BagError, match="not in bag"):
        list(iter_frames(bag, topic="/front/image"))
    with pytest.raises(BagError, match="expected one of"):
        list(iter_frames(bag, topic="/camera/camera_info"))


def test_decode_image_handles_padding_bgr_mono_and_rejects_unknown_encodings() -> None:
    ts = ros2_typestore()
    rng = np.random.default_rng(0)
    rgb = rng.integers(0, 255, (5, 7, 3), dtype=np.uint8)
    padded = np.zeros((5, 24), np.uint8)
    padded[:, :21] = rgb[..., ::-1].reshape(5, 21)
    header = ts.types["std_msgs/msg/Header"](
        stamp=ts.types["builtin_interfaces/msg/Time"](sec=0, nanosec=0), frame_id="c"
    )
    image = ts.types["sensor_msgs/msg/Image"]
    bgr = image(
        header=header, height=5, width=7, encoding="bgr8", is_bigendian=0, step=24, data=padded.reshape(-1)
    )
    np.testing.assert_array_equal(decode_image(bgr), rgb)
    mono = image(
        header=header,
        height=5,
        width=7,
        encoding="mono8",
        is_bigendian=0,
        step=7,
        data=rgb[..., 0].reshape(-1).copy(),
    )
    np.testing.assert_array_equal(decode_image(mono), np.repeat(rgb[..., :1], 3, axis=2))
    with pytest.raises(ValueError, match="'16UC1' not supported"):
        decode_image(
            image(
                header=header,
                height=5,
                width=7,
                encoding="16UC1",
                is_bigendian=0,
                step=14,
                data=np.zeros(70, np.uint8),
            )
        )
    with pytest.raises(ValueError, match="too short"):
        decode_image(
            image(
                header=header,
                height=5,
                width=7,
                encoding="rgb8",
                is_bigendian=0,
                step=21,
                data=np.zeros(50, np.uint8),
            )
        )
