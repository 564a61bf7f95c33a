"""Unit tests of lingbot_map_ros.ros.messages.conversions and .geometry (no DDS)."""

from __future__ import annotations

import sys

import numpy as np
import pytest
from ros_messages import cloud_to_points, image_to_depth, rgb_to_compressed
from sensor_msgs.msg import CompressedImage, Image
from std_msgs.msg import Header

from lingbot_map_ros.engine.geometry import OPTICAL_TO_BODY as OPTICAL_TO_MAP
from lingbot_map_ros.engine.geometry import matrix_to_quat_xyzw as rotation_to_quaternion
from lingbot_map_ros.engine.geometry import quat_xyzw_to_matrix as quaternion_to_rotation
from lingbot_map_ros.engine.mapping.frames import FrameChain, camera_rest_pose
from lingbot_map_ros.engine.mapping.mapper import body_twist
from lingbot_map_ros.ros.messages.conversions import (
    IMAGE_ENCODINGS,
    ImageConversionError,
    compressed_to_rgb,
    depth_to_image,
    image_to_rgb,
    points_to_cloud,
    rgb_to_image,
)
from lingbot_map_ros.ros.messages.poses import camera_info_msg, transform_msg, twist_msg

RNG = np.random.default_rng(7)
RGB = RNG.integers(0, 256, size=(5, 7, 3), dtype=np.uint8)
HEADER = Header(frame_id="cam")


def _gray(rgb: np.ndarray) -> np.ndarray:
    import cv2

    return cv2.cvtColor(rgb, cv2.COLOR_RGB2GRAY)


@pytest.mark.parametrize("encoding", sorted(IMAGE_ENCODINGS))
@pytest.mark.parametrize("padding", [0, 3, 64])
def test_every_encoding_round_trips_with_step_padding(encoding: str, padding: int) -> None:
    msg = rgb_to_image(RGB, HEADER, encoding=encoding, row_padding=padding)
    assert msg.step == RGB.shape[1] * IMAGE_ENCODINGS[encoding] + padding
    out = image_to_rgb(msg)
    assert out.shape == RGB.shape and out.dtype == np.uint8 and out.flags.c_contiguous
    expected = np.repeat(_gray(RGB)[:, :, None], 3, axis=2) if encoding == "mono8" else RGB
    np.testing.assert_array_equal(out, expected)


def test_bgr_channel_order_is_swapped_byte_exactly() -> None:
    raw = np.array([[[10, 20, 30], [40, 50, 60]]], np.uint8)  # B, G, R in memory
    msg = Image(height=1, width=2, encoding="bgr8", step=6, data=raw.tobytes())
    np.testing.assert_array_equal(image_to_rgb(msg), raw[:, :, ::-1])
    rgba = Image(height=1, width=1, encoding="bgra8", step=4, data=bytes([1, 2, 3, 4]))
    np.testing.assert_array_equal(image_to_rgb(rgba), [[[3, 2, 1]]])


def test_padding_bytes_are_ignored() -> None:
    msg = Image(height=2, width=1, encoding="rgb8", step=5, data=bytes([1, 2, 3, 99, 99, 4, 5, 6, 99, 99]))
    np.testing.assert_array_equal(image_to_rgb(msg), [[[1, 2, 3]], [[4, 5, 6]]])


def test_last_row_needs_no_padding() -> None:
    msg = Image(height=2, width=1, encoding="mono8", step=4, data=bytes([7, 0, 0, 0, 9]))
    np.testing.assert_array_equal(image_to_rgb(msg)[:, 0, 0], [7, 9])


@pytest.mark.parametrize(
    ("msg", "cause", "text"),
    [
        (Image(height=2, width=2, encoding="16UC1", step=4, data=bytes(8)), "unsupported_encoding", "16UC1"),
        (Image(height=2, width=2, encoding="yuv422", step=4, data=bytes(8)), "unsupported_encoding", "rgb8"),
        (Image(height=0, width=2, encoding="rgb8", step=6, data=b""), "malformed_image", "positive"),
        (Image(height=2, width=2, encoding="rgb8", step=5, data=bytes(12)), "malformed_image", "step 5"),
        (Image(height=2, width=2, encoding="rgb8", step=6, data=bytes(11)), "malformed_image", "11 bytes"),
    ],
)
def test_bad_images_raise_value_error_with_cause(msg: Image, cause: str, text: str) -> None:
    with pytest.raises(ValueError, match=text) as info:
        image_to_rgb(msg)
    assert isinstance(info.value, ImageConversionError) and info.value.cause == cause


@pytest.mark.parametrize("fmt", ["jpeg", "png"])
def test_compressed_round_trip(fmt: str) -> None:
    smooth = np.dstack([*np.meshgrid(np.arange(64) * 4, np.arange(48) * 5), np.full((48, 64), 128)])
    rgb = smooth.astype(np.uint8)
    out = compressed_to_rgb(rgb_to_compressed(rgb, HEADER, fmt=fmt))
    assert out.shape == rgb.shape
    tolerance = 0 if fmt == "png" else 6
    assert np.abs(out.astype(int) - rgb.astype(int)).mean() <= tolerance


@pytest.mark.parametrize("payload", [b"", b"not an image at all"])
def test_undecodable_compressed_image(payload: bytes) -> None:
    with pytest.raises(ImageConversionError, match="jpeg or png") as info:
        compressed_to_rgb(CompressedImage(format="jpeg", data=payload))
    assert info.value.cause == "undecodable_image"


def test_rgb_to_image_rejects_bad_arrays() -> None:
    with pytest.raises(ValueError, match=r"\[H, W, 3\] uint8"):
        rgb_to_image(RGB.astype(np.float32), HEADER)
    with pytest.raises(ValueError, match="unsupported encoding"):
        rgb_to_image(RGB, HEADER, encoding="rgb16")


def test_depth_image_is_32fc1_native_endian_and_round_trips() -> None:
    depth = RNG.random((4, 6), dtype=np.float32) * 10
    msg = depth_to_image(depth, Header(frame_id="cam"))
    assert (msg.encoding, msg.step, msg.height, msg.width) == ("32FC1", 24, 4, 6)
    assert msg.is_bigendian == (sys.byteorder == "big") and msg.header.frame_id == "cam"
    np.testing.assert_array_equal(image_to_depth(msg), depth)
    swapped = Image(
        height=4, width=6, encoding="32FC1", is_bigendian=1, step=24, data=depth.astype(">f4").tobytes()
    )
    np.testing.assert_array_equal(image_to_depth(swapped), depth)
    with pytest.raises(ValueError, match=r"\[H, W\]"):
        depth_to_image(depth[None], HEADER)


def test_point_cloud_layout_matches_rviz_xyz_rgb() -> None:
    xyz = RNG.normal(size=(50, 3)).astype(np.float32)
    rgb = RNG.integers(0, 256, size=(50, 3), dtype=np.uint8)
    msg = points_to_cloud(xyz, rgb, Header(frame_id="map"))
    assert [(f.name, f.offset, f.datatype, f.count) for f in msg.fields] == [
        ("x", 0, 7, 1),
        ("y", 4, 7, 1),
        ("z", 8, 7, 1),
        ("rgb", 12, 7, 1),
    ]
    assert (msg.point_step, msg.row_step, msg.width, msg.height) == (16, 800, 50, 1)
    packed = np.frombuffer(bytes(msg.data), np.uint32).reshape(50, 4)[:, 3]
    np.testing.assert_array_equal(
        packed, rgb[:, 0].astype(np.uint32) * 65536 + rgb[:, 1].astype(np.uint32) * 256 + rgb[:, 2]
    )
    xyz2, rgb2 = cloud_to_points(msg)
    np.testing.assert_array_equal(xyz2, xyz)
    np.testing.assert_array_equal(rgb2, rgb)
    empty = points_to_cloud(np.zeros((0, 3), np.float32), np.zeros((0, 3), np.uint8), HEADER)
    assert empty.width == 0 and len(empty.data) == 0
    with pytest.raises(ValueError, match=r"\[N, 3\]"):
        points_to_cloud(xyz, rgb[:10], HEADER)


def test_optical_to_map_is_rep103() -> None:
    # Optical z (forward) -> map x, optical x (right) -> map -y, optical y (down) -> map -z.
    np.testing.assert_array_equal(OPTICAL_TO_MAP @ [0, 0, 1], [1, 0, 0])
    np.testing.assert_array_equal(OPTICAL_TO_MAP @ [1, 0, 0], [0, -1, 0])
    np.testing.assert_array_equal(OPTICAL_TO_MAP @ [0, 1, 0], [0, 0, -1])
    assert np.isclose(np.linalg.det(OPTICAL_TO_MAP), 1.0)
    chain = FrameChain(np.eye(4), camera_rest_pose())
    pose = chain.camera_pose(np.eye(4))
    point_cam = np.array([0.0, 0.0, 2.0, 1.0])  # 2 m in front of the first camera
    np.testing.assert_allclose(pose @ point_cam, [2, 0, 0, 1])
    np.testing.assert_allclose(chain.world_points(point_cam[None, :3]), [[2, 0, 0]])


def _random_rotation() -> np.ndarray:
    q, _ = np.linalg.qr(RNG.normal(size=(3, 3)))
    return q * np.sign(np.linalg.det(q))


def test_quaternion_round_trip_all_branches() -> None:
    rotations = [_random_rotation() for _ in range(50)]
    rotations += [np.diag([1.0, -1, -1]), np.diag([-1.0, 1, -1]), np.diag([-1.0, -1, 1]), np.eye(3)]
    for rot in rotations:
        q = rotation_to_quaternion(rot)
        assert np.isclose(np.linalg.norm(q), 1.0) and q[3] >= 0
        np.testing.assert_allclose(quaternion_to_rotation(q), rot, atol=1e-9)


def test_transform_and_twist() -> None:
    pose = np.eye(4)
    pose[:3, :3] = _random_rotation()
    pose[:3, 3] = [1, 2, 3]
    tf = transform_msg(pose, HEADER.stamp, "map", "cam")
    assert (tf.header.frame_id, tf.child_frame_id, tf.transform.translation.z) == ("map", "cam", 3.0)
    moved = pose.copy()
    moved[:3, 3] += pose[:3, :3] @ [0.5, 0, 0]  # 0.5 along the body x axis
    yaw = 0.2
    moved[:3, :3] = pose[:3, :3] @ np.array(
        [[np.cos(yaw), -np.sin(yaw), 0], [np.sin(yaw), np.cos(yaw), 0], [0, 0, 1]]
    )
    twist = twist_msg(body_twist(pose, moved, dt=0.5))
    lin = moved[:3, :3].T @ (moved[:3, 3] - pose[:3, 3]) / 0.5
    np.testing.assert_allclose([twist.linear.x, twist.linear.y, twist.linear.z], lin, atol=1e-9)
    np.testing.assert_allclose([twist.angular.x, twist.angular.y, twist.angular.z], [0, 0, 0.4], atol=1e-9)
    with pytest.raises(ValueError, match=r"\[4, 4\]"):
        transform_msg(np.eye(3), HEADER.stamp, "map", "cam")


def test_camera_info() -> None:
    k = np.array([[300.0, 0, 259], [0, 310, 147], [0, 0, 1]])
    info = camera_info_msg(k, 518, 294, HEADER)
    assert (info.width, info.height, info.distortion_model) == (518, 294, "plumb_bob")
    np.testing.assert_array_equal(np.reshape(info.k, (3, 3)), k)
    np.testing.assert_array_equal(np.reshape(info.p, (3, 4))[:, :3], k)
    with pytest.raises(ValueError, match=r"\[3, 3\]"):
        camera_info_msg(k[:2], 1, 1, HEADER)
