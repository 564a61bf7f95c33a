"""VoxelMap accumulation and budget, Trajectory, atomic PLY / TUM writers."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from lingbot_map_ros.engine.mapping import writers
from lingbot_map_ros.engine.mapping.voxel_map import (
    Trajectory,
    VoxelMap,
    VoxelMapConfig,
    read_ply,
    read_tum,
    voxel_groups,
    write_ply,
    write_tum,
)


def test_points_in_one_voxel_average() -> None:
    vm = VoxelMap(VoxelMapConfig(voxel_size=1.0, max_points=10))
    vm.insert(
        np.array([[0.2, 0.2, 0.2], [0.4, 0.6, 0.8]], np.float32),
        np.array([[0, 0, 0], [100, 50, 20]], np.uint8),
    )
    vm.insert(np.array([[5.5, 0.5, 0.5]], np.float32), np.array([[9, 9, 9]], np.uint8))
    xyz, rgb = vm.points()
    order = np.argsort(xyz[:, 0])
    np.testing.assert_allclose(xyz[order], [[0.3, 0.4, 0.5], [5.5, 0.5, 0.5]], atol=1e-6)
    np.testing.assert_array_equal(rgb[order], [[50, 25, 10], [9, 9, 9]])
    # a second observation of the same voxel updates it (running mean), no duplicate
    vm.insert(np.array([[0.7, 0.4, 0.5]], np.float32), np.array([[80, 40, 20]], np.uint8))
    xyz, rgb = vm.points()
    assert len(vm) == 2
    np.testing.assert_allclose(xyz[np.argmin(xyz[:, 0])], [(0.6 + 0.7) / 3, 0.4, 0.5], atol=1e-6)


def test_index_finds_voxels_across_merges_and_ignores_non_finite() -> None:
    vm = VoxelMap(VoxelMapConfig(voxel_size=0.1, max_points=10_000, merge_threshold=64))
    rng = np.random.default_rng(0)
    xyz = rng.uniform(-5, 5, size=(2000, 3)).astype(np.float32)
    rgb = rng.integers(0, 256, size=(2000, 3), dtype=np.uint8)
    for chunk in np.array_split(np.arange(2000), 20):
        vm.insert(xyz[chunk], rgb[chunk])
    n = len(vm)
    expected = np.unique(np.floor(xyz / np.float32(0.1)).astype(np.int64), axis=0).shape[0]
    assert n == expected
    vm.insert(xyz[::-1].copy(), rgb[::-1].copy())  # same voxels again: found through main and pending runs
    assert len(vm) == n
    vm.insert(np.array([[np.nan, 0, 0], [1e9, 0, 0]], np.float32), np.zeros((2, 3), np.uint8))
    assert len(vm) == n and vm.dropped_out_of_range == 2
    with pytest.raises(ValueError, match="uint8"):
        vm.insert(xyz[:2], rgb[:2].astype(np.float32))


@pytest.mark.parametrize("spread", [3, 200, (1 << 21) - 1])
def test_voxel_groups_equal_np_unique_of_the_voxel_keys(spread: int) -> None:
    rng = np.random.default_rng(spread)
    for n in (1, 2, 5000):
        cells = rng.integers(0, spread + 1, size=(3, n), dtype=np.int64)
        keys = (cells[0] << 42) | (cells[1] << 21) | cells[2]
        expected = np.unique(keys, return_inverse=True, return_counts=True)
        got = voxel_groups(cells)
        for a, b in zip(got, expected, strict=True):
            assert a.dtype == np.int64
            np.testing.assert_array_equal(a, b)


def test_budget_evicts_least_recently_observed() -> None:
    vm = VoxelMap(VoxelMapConfig(voxel_size=1.0, max_points=100, evict_fraction=0.2))
    colours = np.zeros((10, 3), np.uint8)
    for frame in range(15):  # 10 new voxels per frame: x = frame
        pts = np.stack([np.full(10, frame + 0.5), np.arange(10) + 0.5, np.full(10, 0.5)], 1).astype(
            np.float32
        )
        vm.insert(pts, colours)
        if frame == 12:  # keep the x = 0 row alive: observed recently
            vm.insert(
                np.stack([np.full(10, 0.5), np.arange(10) + 0.5, np.full(10, 0.5)], 1).astype(np.float32),
                colours,
            )
    assert len(vm) <= 100 and vm.evicted_total >= 50
    xs = set(np.floor(vm.points()[0][:, 0]).astype(int).tolist())
    assert {0, 12, 13, 14} <= xs and not {1, 2, 3} & xs


def test_many_inserts_of_a_panning_surface_keep_one_point_per_voxel() -> None:
    """200 frames of ~10k points (what a keyframe inserts; its cost: benchmarks/voxel_map.py): one point per
    1 cm voxel, the map covers the surface swept, and every point lies on it."""
    vm = VoxelMap(VoxelMapConfig(voxel_size=0.01, max_points=1_000_000))
    rng = np.random.default_rng(0)
    u, v = np.meshgrid(np.linspace(0, 1, 125), np.linspace(0, 0.6, 80))
    colours = rng.integers(0, 256, size=(u.size, 3), dtype=np.uint8)
    for frame in range(200):
        noise = 0.002 * rng.standard_normal(u.size)
        xyz = np.stack([u.ravel() + 0.005 * frame, v.ravel(), 1 + noise], 1).astype(np.float32)
        vm.insert(xyz, colours)
    points = vm.points()[0]
    keys = np.floor(points / 0.01).astype(np.int64)
    assert len(np.unique(keys, axis=0)) == len(points) == len(vm)
    assert points[:, 0].min() < 0.01 and points[:, 0].max() > 1.99
    assert np.all(np.abs(points[:, 2] - 1.0) < 0.02)


def test_ply_round_trip_is_binary_little_endian(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    xyz = rng.normal(size=(57, 3)).astype(np.float32)
    rgb = rng.integers(0, 256, size=(57, 3), dtype=np.uint8)
    path = write_ply(tmp_path / "map.ply", xyz, rgb)
    data = path.read_bytes()
    assert data.startswith(b"ply\nformat binary_little_endian 1.0\nelement vertex 57\n")
    assert len(data) - (data.index(b"end_header\n") + 11) == 57 * 15
    got_xyz, got_rgb = read_ply(path)
    np.testing.assert_array_equal(got_xyz, xyz)
    np.testing.assert_array_equal(got_rgb, rgb)
    with pytest.raises(ValueError, match="uint8"):
        write_ply(tmp_path / "bad.ply", xyz, rgb.astype(np.int32))


def test_failed_write_keeps_previous_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write_ply(tmp_path / "map.ply", np.zeros((1, 3), np.float32), np.zeros((1, 3), np.uint8))
    before = path.read_bytes()

    def crash(f: object) -> None:
        f.write(b"partial")  # type: ignore[attr-defined]
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        writers.atomic_write(path, crash)
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["map.ply"]


def test_tum_and_trajectory(tmp_path: Path) -> None:
    traj = Trajectory(max_length=5, keep_full_history=True)
    for i in range(12):
        pose = np.eye(4)
        c, s = np.cos(0.1 * i), np.sin(0.1 * i)
        pose[:3, :3] = [[c, -s, 0], [s, c, 0], [0, 0, 1]]
        pose[:3, 3] = [0.1 * i, 0.0, 1.0]
        traj.append(100.0 + 0.1 * i, pose)
    assert len(traj) == 5 and traj.poses().shape == (5, 4, 4)
    np.testing.assert_allclose(traj.stamps(), 100.0 + 0.1 * np.arange(7, 12))
    traj.write_tum(str(tmp_path / "traj.txt"))
    stamps, rows = read_tum(tmp_path / "traj.txt")
    assert stamps.shape == (12,)
    np.testing.assert_allclose(rows[11], [1.1, 0, 1, 0, 0, np.sin(0.55), np.cos(0.55)], atol=1e-8)
    with pytest.raises(ValueError, match="one timestamp per pose"):
        write_tum(tmp_path / "x.txt", np.zeros(2), traj.poses())
    with pytest.raises(ValueError, match="full history is off"):
        Trajectory().full_history()


def test_trajectory_full_log_is_capped_oldest_dropped(tmp_path: Path) -> None:
    cap = 1500  # above the ring's initial 1024 rows: it grows once, then wraps
    traj = Trajectory(max_length=1, keep_full_history=True, max_history=cap)
    n = 4000
    for i in range(n):
        pose = np.eye(4)
        pose[:3, 3] = [float(i), 0.0, 0.0]
        traj.append(10.0 + i, pose)
    stamps, rows = traj.full_history()
    assert traj.history_length == cap and stamps.shape == (cap,) and rows.shape == (cap, 7)
    assert traj.history_dropped == n - cap
    np.testing.assert_array_equal(stamps, 10.0 + np.arange(n - cap, n))  # the newest, oldest first
    np.testing.assert_array_equal(rows[:, 0], np.arange(n - cap, n))
    np.testing.assert_array_equal(rows[:, 6], 1.0)  # qw of the identity rotation
    assert traj.history_capacity == cap  # bounded storage: 64 B per pose, no more
    traj.write_tum(str(tmp_path / "capped.tum"))
    assert read_tum(tmp_path / "capped.tum")[0].shape == (cap,)
    traj.clear()
    assert traj.history_length == 0 and traj.history_dropped == 0
    traj.append(1.0, np.eye(4))
    np.testing.assert_array_equal(traj.full_history()[0], [1.0])
    with pytest.raises(ValueError, match="max_history must be >= 1"):
        Trajectory(max_history=0)


def test_trajectory_cap_of_one_keeps_the_latest_pose() -> None:
    traj = Trajectory(keep_full_history=True, max_history=1)
    for i in range(3):
        traj.append(float(i), np.eye(4))
    np.testing.assert_array_equal(traj.full_history()[0], [2.0])
    assert traj.history_dropped == 2


def test_trajectory_correct_moves_the_window_and_the_wrapped_full_log() -> None:
    """Loop closure moves the one trajectory: ~/path's window and ~/save_map's log (after the ring wrapped)
    by the same per-stamp move; `resize` (live path.max_length) keeps the newest poses."""
    traj = Trajectory(max_length=4, keep_full_history=True, max_history=6)
    for i in range(9):  # the ring wrapped: stamps 3..8 kept
        pose = np.eye(4)
        pose[:3, 3] = [float(i), 0.0, 0.0]
        traj.append(float(i), pose)
    assert Trajectory().correct(lambda s, p: p) is None  # nothing to move

    def move(stamps: np.ndarray, poses: np.ndarray) -> np.ndarray:  # later stamps get a bigger lift in z
        lifted = poses.copy()
        lifted[:, 2, 3] += 0.1 * stamps
        return lifted

    jump = traj.correct(move)
    np.testing.assert_allclose(jump[:3, 3], [0.0, 0.0, 0.8])  # the newest pose's T_new · T_old⁻¹
    stamps, rows = traj.full_history()
    np.testing.assert_array_equal(stamps, np.arange(3.0, 9.0))
    np.testing.assert_allclose(rows[:, :3], np.stack([np.arange(3.0, 9.0), np.zeros(6), 0.1 * stamps], 1))
    np.testing.assert_allclose(traj.poses()[:, 2, 3], 0.1 * np.arange(5.0, 9.0))
    traj.resize(2)
    np.testing.assert_array_equal(traj.stamps(), [7.0, 8.0])
    traj.resize(3)
    traj.append(9.0, np.eye(4))
    np.testing.assert_array_equal(traj.stamps(), [7.0, 8.0, 9.0])
    with pytest.raises(ValueError, match="max_length must be >= 1"):
        traj.resize(0)
