"""Issue 20, in-process (no DDS): budgets on every input that allocates, no silent map loss, paths fixed at
configure, saves that leave all or nothing. Each test reproduces one finding of the issue and fails on the
code before it (see docs/reliability.md, "Reliability III")."""

from __future__ import annotations

import hashlib
import json
import logging
import zipfile
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from builtin_interfaces.msg import Time
from rclpy.parameter import Parameter
from sensor_msgs.msg import Image
from std_msgs.msg import Header
from std_srvs.srv import Trigger

from lingbot_map_ros.engine.geometry import Sim3
from lingbot_map_ros.engine.mapping.mapper import Mapper, MapperConfig
from lingbot_map_ros.engine.mapping.scale import ScaleConfig, ScaleEstimator
from lingbot_map_ros.engine.mapping.voxel_map import VoxelMap, VoxelMapConfig
from lingbot_map_ros.engine.persistence.store import (
    SessionError,
    SessionLimits,
    SessionSnapshot,
    clean_stale_temporaries,
    load_session,
    save_session,
)
from lingbot_map_ros.ros.input import depth as depth_input
from lingbot_map_ros.ros.input.depth import DepthInput, depth_problem
from lingbot_map_ros.ros.outputs.config import OutputConfig
from lingbot_map_ros.ros.params.declare import MAX_CAMERAS, NodeParams, check_update, cross_check, field_name
from lingbot_map_ros.ros.params.table import PARAMETERS
from lingbot_map_ros.ros.services.triggers import MappingServices

S0 = 2
COMPAT = {"preset": "tiny", "weights": "synthetic:tiny", "image_width": 56, "scale_frames": S0}
#: What a node with S0 2 at width 56 allows (ros/services/session_files.py derives the same from its
# parameters).
NODE_LIMITS = SessionLimits(max_anchor_frames=S0, max_image_side=56, max_points=1000, max_poses=1000)


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    snapshot = SessionSnapshot(
        compat=dict(COMPAT),
        anchor_images=np.zeros((S0, 28, 56, 3), np.uint8),
        anchor_stamps_ns=np.arange(S0, dtype=np.int64),
        source_hw=(42, 74),
        alignment=Sim3(np.eye(3), np.zeros(3), 1.0),
        map_xyz=np.zeros((10, 3), np.float32),
        map_rgb=np.zeros((10, 3), np.uint8),
        state={"tf_mode": "map_to_camera"},
    )
    return save_session(tmp_path / "sessions" / "s", snapshot)


def _rewrite(folder: Path, name: str, members: dict[str, bytes], declared: dict | None = None) -> None:
    """Replace an npz by raw (deflated) members and make the manifest agree (a careful attacker)."""
    path = folder / name
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for member, data in members.items():
            z.writestr(member, data)
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["files"][name].update(
        bytes=path.stat().st_size, sha256=hashlib.sha256(path.read_bytes()).hexdigest()
    )
    if declared is not None:
        manifest["files"][name]["arrays"] = declared
    text = json.dumps(manifest)
    (folder / "manifest.json").write_text(text)
    (folder / "manifest.sha256").write_text(hashlib.sha256(text.encode()).hexdigest())


def _npy_header(shape: tuple[int, ...], descr: str = "|u1") -> bytes:
    import io

    buffer = io.BytesIO()
    np.lib.format.write_array_header_1_0(buffer, {"descr": descr, "fortran_order": False, "shape": shape})
    return buffer.getvalue()


def test_anchor_zip_bomb_is_refused_before_anything_is_inflated(folder: Path) -> None:
    """Issue 20: 1.57 MB whose anchors.npz deflated to 32 x 4096² x 3 took 13 s and 3.6 GB, then was
    refused."""
    bomb = (32, 4096, 4096, 3)
    stamps_npy = _npy_header((S0,), "<i8") + np.arange(S0, dtype="<i8").tobytes()
    declared = {"images": {"dtype": "|u1", "shape": list(bomb)}, "stamps_ns": {"dtype": "<i8", "shape": [S0]}}
    # the header alone (no payload needed: nothing past it may be read)
    _rewrite(folder, "anchors.npz", {"images.npy": _npy_header(bomb), "stamps_ns.npy": stamps_npy}, declared)
    with pytest.raises(SessionError, match="anchors.npz/images shape .* exceeds the limits of this node"):
        load_session(folder, COMPAT, NODE_LIMITS)
    # the manifest declaring the true size, the member's header the bomb: refused from the header
    declared["images"]["shape"] = [S0, 28, 56, 3]
    _rewrite(folder, "anchors.npz", {"images.npy": _npy_header(bomb), "stamps_ns.npy": stamps_npy}, declared)
    with pytest.raises(SessionError, match=r"the manifest declares \[2, 28, 56, 3\]"):
        load_session(folder, COMPAT, NODE_LIMITS)


def test_a_member_padded_past_its_array_is_refused_unread(folder: Path) -> None:
    images = _npy_header((S0, 28, 56, 3)) + bytes(S0 * 28 * 56 * 3)
    stamps_npy = _npy_header((S0,), "<i8") + np.arange(S0, dtype="<i8").tobytes()
    padded = images + bytes(64 << 20)  # 64 MiB of zeros after the array: ~64 kB deflated
    _rewrite(folder, "anchors.npz", {"images.npy": padded, "stamps_ns.npy": stamps_npy})
    with pytest.raises(SessionError, match="the zip entry inflates to"):
        load_session(folder, COMPAT, NODE_LIMITS)


def test_a_huge_file_declared_for_a_small_map_is_refused_before_hashing(folder: Path) -> None:
    """Issue 20: an 8 GiB sparse map.npz was hashed for 35.8 s on the service thread."""
    path = folder / "map.npz"
    with open(path, "r+b") as f:
        f.truncate(8 << 30)  # sparse
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["files"]["map.npz"]["bytes"] = 8 << 30
    text = json.dumps(manifest)
    (folder / "manifest.json").write_text(text)
    (folder / "manifest.sha256").write_text(hashlib.sha256(text.encode()).hexdigest())
    with pytest.raises(SessionError, match="map.npz: declared size 8589934592 exceeds its arrays'"):
        load_session(folder, COMPAT, NODE_LIMITS)


def test_a_refused_npz_names_a_few_members_and_counts_the_rest(folder: Path) -> None:
    members = {f"m{i:06d}.npy": b"" for i in range(400)}  # issue 20: 300k names were listed in the reply
    _rewrite(folder, "grid.npz", members)
    with pytest.raises(SessionError) as info:
        load_session(folder, COMPAT)
    assert "holds 400 members" in str(info.value) and "and 395 more" in str(info.value)
    assert len(str(info.value)) < 400


def test_stale_temporaries_of_interrupted_saves_are_removed(tmp_path: Path) -> None:
    base = tmp_path / "sessions"
    stale = base / ".session_x.0123456789ab.tmp"
    stale.mkdir(parents=True)
    (stale / "map.npz").write_bytes(b"partial")
    (base / "kept").mkdir()
    (base / ".link.tmp").symlink_to(tmp_path)
    assert clean_stale_temporaries(base) == [stale.name]
    assert sorted(p.name for p in base.iterdir()) == [".link.tmp", "kept"]


# ------------------------------------------------------------------------------------------- depth input
def _depth(width: int, height: int, data: bytes | None = None, stamp: int = 7) -> Image:
    data = bytes(width * height * 4) if data is None else data
    return Image(
        header=Header(stamp=Time(sec=stamp)),
        height=height,
        width=width,
        encoding="32FC1",
        step=width * 4,
        data=data,
    )


class _Node:
    def create_subscription(self, *args: object, **kwargs: object) -> object:
        return object()


def test_depth_images_are_checked_before_they_are_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 20: 36 x 4096² 32FC1 were all kept (RSS +2 GB); a 0x0 one failed the frame's outputs
    (failed_publish_IndexError)."""
    assert depth_problem(_depth(0, 0, b""), 1 << 24)[0] == "depth_empty"
    assert depth_problem(_depth(4097, 4096, b""), 1 << 24)[0] == "depth_oversized"
    assert depth_problem(_depth(8, 8, bytes(10)), 1 << 24)[0] == "depth_malformed"
    assert depth_problem(_depth(8, 8), 1 << 24) is None
    rejected: list[str] = []
    monkeypatch.setattr(depth_input, "KEEP_BYTES", 10 << 20)
    depth = DepthInput(_Node(), lambda: 1 << 24, lambda cause, reason: rejected.append(cause))
    depth._on_image(_depth(0, 0, b"", stamp=5))
    assert rejected == ["depth_empty"] and depth.take(5.0, (20, 20)) is None
    for i in range(36):
        depth._on_image(_depth(1000, 1000, stamp=100 + i))  # 4 MB each
    assert depth._bytes <= 10 << 20 and len(depth._images) == 2
    assert depth.take(135.0, (100, 100)).shape == (100, 100)
    depth._on_image(_depth(30, 10, stamp=200))
    assert depth.take(200.0, (20, 20)) is None and rejected[-1] == "depth_size_mismatch"


# -------------------------------------------------------------------------------------- far maps, scale
def test_far_points_are_mapped_or_counted_never_silently_lost(caplog: pytest.LogCaptureFixture) -> None:
    """Issue 20: an extrinsic at x = 1e6 m gave odometry and a map of 0 points, no counter, no warning."""
    voxels = VoxelMap(VoxelMapConfig(voxel_size=0.02, max_points=50_000_000))
    assert voxels._mean.nbytes < 4 << 20  # the budget is not preallocated (issue 20: 4 x 50 M = 10.2 GB VMS)
    far = np.array([[1e6, 0.0, 0.5], [1e6 + 1, 0.0, 0.5]], np.float32)
    rgb = np.zeros((2, 3), np.uint8)
    with caplog.at_level(logging.WARNING):
        voxels.insert(far, rgb)
    assert len(voxels) == 2 and voxels.dropped_out_of_range == 0 and "re-centred" in caplog.text
    with caplog.at_level(logging.WARNING):
        voxels.insert(-far, rgb)
        voxels.insert(-far, rgb)
    assert len(voxels) == 2 and voxels.dropped_out_of_range == 4
    assert caplog.text.count("outside the voxel key range") == 1  # warned once
    mapper = Mapper(MapperConfig())
    mapper.voxels = voxels
    assert mapper.stats()["map.points_out_of_range"] == 4
    grown = VoxelMap(VoxelMapConfig(voxel_size=0.01, max_points=200_000))
    pts = np.random.default_rng(0).uniform(-5, 5, (150_000, 3)).astype(np.float32)
    grown.insert(pts, np.zeros_like(pts, np.uint8))
    assert len(grown) == len(np.unique(np.floor(pts / np.float32(0.01)), axis=0))


def test_a_scale_jump_beyond_max_change_is_rejected_and_counted() -> None:
    """Issue 20: odometry jumping 2 km a frame drove the scale to 5,069."""
    scale = ScaleEstimator(ScaleConfig(source="odometry", min_samples=3, min_baseline=0.0, max_change=3.0))
    for i in range(4):
        scale.add_odometry(np.array([i * 1.0, 0, 0]), np.array([i * 2.0, 0, 0]), float(i))
    assert scale.converged and scale.value == pytest.approx(2.0)
    scale.add_odometry(np.array([5.0, 0, 0]), np.array([2000.0, 0, 0]), 5.0)
    assert scale.rejected == 1 and scale.value == pytest.approx(2.0)


# ---------------------------------------------------------------------------------- parameters, services
def _defaults(**changes: object) -> NodeParams:
    values = {
        field_name(s.name): (tuple(s.default) if isinstance(s.default, list) else s.default)
        for s in PARAMETERS
    }
    values.update(changes)
    return NodeParams(**values)


def test_paths_are_fixed_while_configured_and_load_path_is_a_name() -> None:
    """Issue 20: `session.dir` set live to /dev/shm/../../proc/self/cwd made ~/save_session write there."""
    current = _defaults()
    for name in ("output_dir", "session.dir"):
        result = check_update([Parameter(name, value="/tmp/elsewhere")], current, configured=True)
        assert not result.successful and "needs a reload" in result.reason
        assert check_update([Parameter(name, value="/tmp/elsewhere")], current, configured=False).successful
    for bad in ("../a", "/etc", "a/b", ".hidden", "..", "x" * 300):
        result = check_update([Parameter("session.load_path", value=bad)], current, configured=True)
        assert not result.successful and "one folder name below session.dir" in result.reason, bad
    ok = check_update([Parameter("session.load_path", value="session_20261201_120000_001")], current, True)
    assert ok.successful


def test_cameras_are_limited_and_share_one_point_budget() -> None:
    """Issue 20: 64 cameras took 2.1 GB; map.max_points was preallocated per camera."""
    many = [f"cam{i}" for i in range(MAX_CAMERAS + 1)]
    assert any(
        "at most 16" in p
        for p in cross_check({**{"kv_cache.sliding_window": 1, "kv_cache.max_window": 1}, "cameras": many})
    )
    four = _defaults(cameras=("a", "b", "c", "d"), map_max_points=2_000_000, scale_source="none")
    assert OutputConfig.from_params(four).mapper.voxel.max_points == 500_000


class _Outputs:
    def __init__(self, points: int) -> None:
        self.points = points

    def map_size(self) -> int:
        return self.points

    def trajectory_stats(self) -> dict[str, object]:
        return {"trajectory_poses": 3, "map.points_out_of_range": 12, "scale_converged": True}

    def save(self, out_dir: Path, tag: str) -> str:
        for name in (f"map_{tag}.ply", f"trajectory_{tag}.tum", f"map_{tag}.pgm", f"map_{tag}.yaml"):
            (out_dir / name).write_text("x")
        return "map: ..."


def test_save_map_answers_zero_points_and_leaves_all_files_or_none(tmp_path: Path) -> None:
    """Issue 20: ~/save_map answered success with 0 points; a failure after the first files left them."""
    params = SimpleNamespace(
        output_dir=str(tmp_path / "maps"), session_save_with_map=True, kv_cache_scale_frames=2
    )
    outputs = _Outputs(0)

    def failing_session() -> str:
        raise OSError("No space left on device")

    services = MappingServices(
        logging.getLogger("test"), lambda: params, lambda: outputs, lambda: 0, failing_session, lambda: ""
    )
    empty = services.on_save_map(Trigger.Request(), Trigger.Response())
    assert not empty.success and "the map has 0 points" in empty.message
    assert "12 points outside the voxel key range" in empty.message and not list(
        (tmp_path / "maps").iterdir()
    )
    outputs.points = 100
    full = services.on_save_map(Trigger.Request(), Trigger.Response())
    assert (
        not full.success
        and "No space left on device" in full.message
        and "4 partial file(s) removed" in (full.message)
    )
    assert not list((tmp_path / "maps").iterdir())
