"""Decoding of pose encodings, intrinsics and depth unprojection against hand-computed cases."""

from __future__ import annotations

import numpy as np
import pytest

from lingbot_map_ros.engine.geometry import Sim3, matrix_to_quat_xyzw, quat_xyzw_to_matrix, rotation_angle
from lingbot_map_ros.engine.stream.decode import (
    MIN_FOV_RAD,
    fov_to_intrinsics,
    pose_encoding_to_c2w,
    unproject_depth,
)

RZ90 = np.array([[0.0, -1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 1.0]])


def test_pose_encoding_is_camera_to_world_with_unnormalised_scalar_last_quaternion() -> None:
    s = np.sqrt(0.5)
    enc = np.array([1.0, 2.0, 3.0, 0.0, 0.0, 2 * s, 2 * s, 0.9, 1.2], np.float32)  # |q| = 2: 90° about z
    c2w = pose_encoding_to_c2w(enc)
    assert c2w.dtype == np.float64 and c2w.shape == (4, 4)
    np.testing.assert_allclose(c2w[:3, :3], RZ90, atol=1e-7)
    np.testing.assert_allclose(c2w[:3, 3], [1.0, 2.0, 3.0])
    np.testing.assert_array_equal(c2w[3], [0, 0, 0, 1])
    # the camera's optical axis (z) maps to the world direction R[:, 2]; the camera centre is t
    np.testing.assert_allclose(c2w @ [0, 0, 0, 1], [1, 2, 3, 1])
    batch = pose_encoding_to_c2w(np.stack([enc, enc]))
    assert batch.shape == (2, 4, 4)


def test_fov_to_intrinsics() -> None:
    enc = np.zeros(9)
    enc[6] = 1.0
    enc[7], enc[8] = 2 * np.arctan(0.5), 2 * np.arctan(1.0)  # fov_h, fov_w
    k = fov_to_intrinsics(enc, (56, 98))
    np.testing.assert_allclose(k, [[49.0, 0.0, 49.0], [0.0, 56.0, 28.0], [0.0, 0.0, 1.0]])
    enc[7] = 0.0  # the ReLU clips FoVs at 0: clamped to MIN_FOV_RAD, a finite focal length
    fy = fov_to_intrinsics(enc, (56, 98))[1, 1]
    assert np.isfinite(fy) and fy == pytest.approx(28.0 / np.tan(MIN_FOV_RAD / 2))
    with pytest.raises(ValueError, match=r"\[\.\.\., 9\]"):
        fov_to_intrinsics(np.zeros(8), (56, 98))


def test_unproject_hand_computed_pixel() -> None:
    k = np.array([[50.0, 0.0, 49.0], [0.0, 50.0, 28.0], [0.0, 0.0, 1.0]])
    c2w = np.eye(4)
    c2w[:3, :3], c2w[:3, 3] = RZ90, [1.0, 2.0, 3.0]
    depth = np.full((56, 98), np.nan, np.float32)
    depth[28, 59] = 2.0  # X_cam = 2·((59−49)/50, 0, 1) = (0.4, 0, 2) → R·X + t = (1, 2.4, 5)
    depth[38, 48] = 1.0  # X_cam = (−0.02, 0.2, 1) → (0.8, 1.98, 4)
    xyz, flat = unproject_depth(depth, k, c2w)
    assert xyz.dtype == np.float32
    np.testing.assert_array_equal(flat, [28 * 98 + 59, 38 * 98 + 48])
    np.testing.assert_allclose(xyz, [[1.0, 2.4, 5.0], [0.8, 1.98, 4.0]], atol=1e-6)
    xyz, flat = unproject_depth(depth, k, c2w, stride=2)  # (28, 59): odd column, skipped
    np.testing.assert_array_equal(flat, [38 * 98 + 48])


def test_quaternion_round_trip_and_sim3_consistency() -> None:
    rng = np.random.default_rng(1)
    q = rng.normal(size=(64, 4))
    rot = quat_xyzw_to_matrix(q)
    np.testing.assert_allclose(
        rot @ np.swapaxes(rot, 1, 2), np.broadcast_to(np.eye(3), rot.shape), atol=1e-12
    )
    np.testing.assert_allclose(quat_xyzw_to_matrix(matrix_to_quat_xyzw(rot)), rot, atol=1e-12)
    np.testing.assert_allclose(rotation_angle(RZ90), np.pi / 2)

    # A Sim(3) applied to a pose and to its depth (×s) moves the unprojected points by the same Sim(3).
    align = Sim3(quat_xyzw_to_matrix(q[0]), np.array([0.5, -1.0, 2.0]), 1.7)
    c2w = np.eye(4)
    c2w[:3, :3], c2w[:3, 3] = rot[1], [0.3, 0.1, -0.2]
    k = np.array([[40.0, 0, 20], [0, 40.0, 15], [0, 0, 1]])
    depth = rng.uniform(1, 3, size=(30, 40)).astype(np.float32)
    pts, _ = unproject_depth(depth, k, c2w)
    moved, _ = unproject_depth(depth * np.float32(align.scale), k, align.apply_pose(c2w))
    np.testing.assert_allclose(moved, align.apply_points(pts), atol=1e-4)
    with pytest.raises(ValueError, match="non-zero"):
        quat_xyzw_to_matrix(np.zeros(4))


def test_one_rotation_gives_the_same_bits_as_a_batch() -> None:
    """The node's pose path converts one rotation at a time through the float fast path: every quaternion
    equals the batched numpy path bit for bit (random, near-π, identity and slightly non-orthonormal)."""
    rng = np.random.default_rng(1)
    q = rng.standard_normal((5000, 4))
    rots = quat_xyzw_to_matrix(q / np.linalg.norm(q, axis=1, keepdims=True))
    rots = np.concatenate(
        [rots, np.stack([np.eye(3), np.diag([1.0, -1, -1]), np.diag([-1.0, 1, -1]), np.diag([-1.0, -1, 1])])]
    )
    rots = rots + 1e-7 * rng.standard_normal(rots.shape) * (rng.random((len(rots), 1, 1)) < 0.3)
    one_by_one = np.stack([matrix_to_quat_xyzw(rot) for rot in rots])
    assert np.array_equal(one_by_one, matrix_to_quat_xyzw(rots))
    assert matrix_to_quat_xyzw(rots[:1]).shape == (1, 4) and matrix_to_quat_xyzw(rots[0]).shape == (4,)
