"""Saved sessions (engine/persistence/store.py, StreamingSession.anchor_state/restore_anchors), tiny preset,
CPU.

Round trip: a restored session gives the saved session's anchor outputs and, for the first frame after the
anchor phase, exactly the saving run's pose. Untrusted input: each tampering of a session folder is one
`SessionError` naming the cause, and nothing is unpickled.
"""

from __future__ import annotations

import json
import os
import zipfile
from pathlib import Path

import numpy as np
import pytest
from tiny_stream import pan_frames, tiny_model, tiny_session

from lingbot_map_ros.engine.geometry import Sim3
from lingbot_map_ros.engine.persistence.store import (
    FORMAT_VERSION,
    SessionError,
    SessionLimits,
    SessionSnapshot,
    load_session,
    resolve_under,
    save_session,
)
from lingbot_map_ros.engine.stream.session import AnchorState, StreamingSession
from lingbot_map_ros.model import LingBotMap

S0 = 3
WIDTH = 56
COMPAT = {"preset": "tiny", "weights": "synthetic:tiny", "image_width": WIDTH, "scale_frames": S0}


@pytest.fixture(scope="module")
def model() -> LingBotMap:
    return tiny_model()


frames = pan_frames


def new_session(model: LingBotMap, **overrides: object) -> StreamingSession:
    return tiny_session(model, S0, **overrides)


def snapshot_of(anchors: AnchorState, n_points: int = 50) -> SessionSnapshot:
    rng = np.random.default_rng(1)
    return SessionSnapshot(
        compat=dict(COMPAT),
        anchor_images=anchors.images,
        anchor_stamps_ns=np.asarray(anchors.metas, np.int64),
        source_hw=anchors.source_hw,
        alignment=anchors.alignment,
        map_xyz=rng.normal(size=(n_points, 3)).astype(np.float32),
        map_rgb=rng.integers(0, 256, (n_points, 3), dtype=np.uint8),
        trajectory_stamps_ns=np.arange(4, dtype=np.int64) * 10**8,
        trajectory_poses=np.tile([0, 0, 0, 0, 0, 0, 1.0], (4, 1)),
        state={"scale": {"value": 1.0, "source": "none"}},
    )


def saved_session(model: LingBotMap, tmp_path: Path, n_frames: int = S0 + 4, **overrides: object):
    """Run A: n_frames through a session, save its anchors; returns (folder, run A's results)."""
    a = new_session(model, **overrides)
    results = []
    for i, rgb in enumerate(frames(n_frames)):
        results += a.push(rgb, meta=1_000_000_000 + i)
    anchors = a.anchor_state()
    assert anchors is not None
    return save_session(tmp_path / "sessions" / "run_a", snapshot_of(anchors)), results, a


def test_round_trip_restores_anchor_outputs_and_the_first_streaming_pose(
    model: LingBotMap, tmp_path: Path
) -> None:
    folder, run_a, _ = saved_session(model, tmp_path)
    loaded = load_session(folder, COMPAT)
    assert loaded.anchor_images.shape == (S0, 28, 56, 3) and loaded.anchor_images.dtype == np.uint8
    assert loaded.anchor_stamps_ns.tolist() == [1_000_000_000 + i for i in range(S0)]
    assert loaded.state == {"scale": {"value": 1.0, "source": "none"}}

    b = new_session(model)
    replayed = b.restore_anchors(
        AnchorState(
            loaded.anchor_images, tuple(loaded.anchor_stamps_ns.tolist()), loaded.source_hw, loaded.alignment
        )
    )
    assert [r.meta for r in replayed] == [r.meta for r in run_a[:S0]]
    for got, want in zip(replayed, run_a[:S0], strict=True):
        assert got.phase == 1 and got.is_keyframe
        np.testing.assert_array_equal(got.pose_c2w, want.pose_c2w)
        np.testing.assert_array_equal(got.depth, want.depth)
    # Frame S0 attends to the anchors alone in both runs: the same pose, bit for bit.
    (first,) = b.push(frames(S0 + 4)[S0], meta="S0")
    np.testing.assert_array_equal(first.pose_c2w, run_a[S0].pose_c2w)
    np.testing.assert_array_equal(first.depth, run_a[S0].depth)
    assert first.epoch == replayed[0].epoch and first.phase == 2


def test_after_reanchors_the_restored_stream_lands_in_the_first_epochs_map_frame(
    model: LingBotMap, tmp_path: Path
) -> None:
    """max_stored_frames small: run A re-anchors twice. The frame right after a re-anchor attends to the
    re-anchored keyframes alone, exactly like the first frame after a load: a session saved there and loaded
    gives that frame run A's pose (in the first epoch's map frame, through the saved alignment)."""
    a = new_session(model, max_stored_frames=S0 + 3)
    inputs = frames(S0 + 20)
    for i, rgb in enumerate(inputs):
        results = a.push(rgb, meta=1_000 + i)
        if results and results[-1].segment == 2:
            break
    after_reanchor = results[-1]
    anchors = a.anchor_state()
    assert anchors is not None and after_reanchor.phase == 2
    assert not np.allclose(anchors.alignment.rotation, np.eye(3))  # a real carry-over, not the identity
    folder = save_session(tmp_path / "s" / "after_reanchor", snapshot_of(anchors))

    loaded = load_session(folder, COMPAT)
    b = new_session(model, max_stored_frames=S0 + 3)
    b.restore_anchors(
        AnchorState(
            loaded.anchor_images, tuple(loaded.anchor_stamps_ns.tolist()), loaded.source_hw, loaded.alignment
        )
    )
    (again,) = b.push(inputs[after_reanchor.meta - 1_000], meta=after_reanchor.meta)
    np.testing.assert_array_equal(again.pose_c2w, after_reanchor.pose_c2w)
    np.testing.assert_array_equal(again.depth, after_reanchor.depth)


def test_restore_rejects_anchors_of_another_size_and_keeps_the_session(model: LingBotMap) -> None:
    s = new_session(model)
    for rgb in frames(S0 + 1):
        s.push(rgb)
    before = s.stats().epoch
    bad = AnchorState(np.zeros((S0, 28, 42, 3), np.uint8), (0,) * S0, (42, 74), Sim3.identity())
    with pytest.raises(ValueError, match="restore_anchors needs"):
        s.restore_anchors(bad)
    assert s.stats().epoch == before and s.stats().phase == 2


def test_anchor_state_is_none_during_the_anchor_phase(model: LingBotMap) -> None:
    s = new_session(model)
    s.push(frames(1)[0])
    assert s.anchor_state() is None


# ------------------------------------------------------------------------------------------ untrusted input


@pytest.fixture()
def folder(model: LingBotMap, tmp_path: Path) -> Path:
    return saved_session(model, tmp_path)[0]


def test_save_is_atomic_and_never_overwrites(folder: Path) -> None:
    siblings = sorted(p.name for p in folder.parent.iterdir())
    assert siblings == ["run_a"], siblings  # no temporary folder left behind
    assert sorted(p.name for p in folder.iterdir()) == [
        "anchors.npz",
        "grid.npz",
        "loop.npz",
        "manifest.json",
        "manifest.sha256",
        "map.npz",
        "trajectory.npz",
    ]
    mask = os.umask(0)
    os.umask(mask)
    assert (folder / "map.npz").stat().st_mode & 0o777 == 0o666 & ~mask
    with pytest.raises(SessionError, match="already exists"):
        save_session(folder, load_session(folder, COMPAT))


@pytest.mark.parametrize(
    ("field", "value"),
    [("preset", "lingbot-map"), ("image_width", 518), ("weights", "sha256:00ff")],
)
def test_incompatible_session_names_the_field(folder: Path, field: str, value: object) -> None:
    with pytest.raises(SessionError, match=f"incompatible: {field} is"):
        load_session(folder, {**COMPAT, field: value})


def _edit_manifest(folder: Path, edit) -> None:  # noqa: ANN001 - test helper
    """Edit the manifest and rewrite its hash (a careful attacker: the hash detects corruption, it does not
    authenticate)."""
    import hashlib

    path = folder / "manifest.json"
    manifest = json.loads(path.read_text())
    edit(manifest)
    path.write_text(json.dumps(manifest))
    (folder / "manifest.sha256").write_text(hashlib.sha256(path.read_bytes()).hexdigest())


def test_newer_format_version_is_refused(folder: Path) -> None:
    _edit_manifest(folder, lambda m: m.update(version=FORMAT_VERSION + 1))
    with pytest.raises(SessionError, match="newer than this node's"):
        load_session(folder, COMPAT)


def test_truncated_file_is_refused(folder: Path) -> None:
    path = folder / "map.npz"
    path.write_bytes(path.read_bytes()[:-100])
    with pytest.raises(SessionError, match="truncated or replaced"):
        load_session(folder, COMPAT)


def test_tampered_file_is_refused(folder: Path) -> None:
    path = folder / "trajectory.npz"
    data = bytearray(path.read_bytes())
    data[-20] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(SessionError, match="sha256"):
        load_session(folder, COMPAT)


def _replace_array_file(
    folder: Path, name: str, arrays: dict[str, np.ndarray], allow_pickle: bool = False
) -> None:
    """Rewrite an array file and make the manifest's size and hash agree (a careful attacker)."""
    import hashlib

    path = folder / name
    with open(path, "wb") as f:
        if allow_pickle:
            with zipfile.ZipFile(f, "w") as z:
                for key, a in arrays.items():
                    with z.open(f"{key}.npy", "w") as member:
                        np.lib.format.write_array(member, a, allow_pickle=True)
        else:
            np.savez(f, **arrays)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    declared = {k: {"dtype": a.dtype.str, "shape": list(a.shape)} for k, a in arrays.items()}
    if allow_pickle:
        declared = None

    def edit(m: dict) -> None:
        m["files"][name].update(bytes=path.stat().st_size, sha256=digest)
        if declared is not None:
            m["files"][name]["arrays"] = declared

    _edit_manifest(folder, edit)


class _Boom:
    def __reduce__(self):  # noqa: ANN204 - pickle protocol
        return (Path("/tmp/lingbot_pickle_executed").touch, ())


def test_pickle_payload_is_never_executed(folder: Path) -> None:
    marker = Path("/tmp/lingbot_pickle_executed")
    marker.unlink(missing_ok=True)
    payload = np.array([_Boom(), 1], dtype=object)
    _replace_array_file(
        folder, "map.npz", {"xyz": payload, "rgb": np.zeros((1, 3), np.uint8)}, allow_pickle=True
    )
    with pytest.raises(SessionError, match="map.npz/xyz: expected float32 of rank 2, got object"):
        load_session(folder, COMPAT)
    assert not marker.exists()


def test_oversized_array_header_is_refused_before_allocation(folder: Path) -> None:
    big = np.zeros((10, 3), np.float32)
    _replace_array_file(folder, "map.npz", {"xyz": big, "rgb": np.zeros((10, 3), np.uint8)})
    with pytest.raises(SessionError, match="exceeds the limits"):
        load_session(folder, COMPAT, SessionLimits(max_points=5))


def test_header_claiming_more_than_the_file_holds_is_refused_unread(folder: Path) -> None:
    import hashlib

    path = folder / "map.npz"
    with zipfile.ZipFile(path, "w") as z:
        with z.open("xyz.npy", "w") as member:
            header = {"descr": "<f4", "fortran_order": False, "shape": (40_000_000, 3)}
            np.lib.format.write_array_header_1_0(member, header)
            member.write(b"\0" * 12)
        with z.open("rgb.npy", "w") as member:
            np.lib.format.write_array(member, np.zeros((1, 3), np.uint8))
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    _edit_manifest(folder, lambda m: m["files"]["map.npz"].update(bytes=path.stat().st_size, sha256=digest))
    with pytest.raises(SessionError, match="exceeds the limits or the stored data"):
        load_session(folder, COMPAT)


def test_non_finite_values_are_refused(folder: Path) -> None:
    xyz = np.array([[0.0, np.nan, 1.0]], np.float32)
    _replace_array_file(folder, "map.npz", {"xyz": xyz, "rgb": np.zeros((1, 3), np.uint8)})
    with pytest.raises(SessionError, match="non-finite"):
        load_session(folder, COMPAT)


def _write_manifest(folder: Path, text: str) -> None:
    import hashlib

    (folder / "manifest.json").write_text(text)
    (folder / "manifest.sha256").write_text(hashlib.sha256(text.encode()).hexdigest())


def test_malformed_manifest_is_refused(folder: Path) -> None:
    _write_manifest(folder, '{"format": "lingbot_map_session", "version": NaN}')
    with pytest.raises(SessionError, match="not valid JSON"):
        load_session(folder, COMPAT)
    _write_manifest(folder, "[1, 2]")
    with pytest.raises(SessionError, match="not a lingbot_map_session manifest"):
        load_session(folder, COMPAT)


def test_paths_stay_below_the_session_dir(tmp_path: Path) -> None:
    base = tmp_path / "sessions"
    (base / "ok").mkdir(parents=True)
    assert resolve_under(base, "ok") == (base / "ok").resolve()
    assert resolve_under(base, base / "ok") == (base / "ok").resolve()
    with pytest.raises(SessionError, match=r"contains '\.\.'"):
        resolve_under(base, "../etc")
    with pytest.raises(SessionError, match="outside session.dir"):
        resolve_under(base, "/etc/passwd")
    (base / "link").symlink_to(tmp_path)
    with pytest.raises(SessionError, match="symbolic link"):
        resolve_under(base, "link/sessions/ok")
    with pytest.raises(SessionError, match="absolute"):
        resolve_under("relative/dir", "ok")
