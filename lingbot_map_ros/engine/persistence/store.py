"""Saved mapping sessions: one versioned folder a restarted node (or ``run --load``) goes on mapping from.

Layout of a session folder (format ``lingbot_map_session``, version `FORMAT_VERSION`; docs/session.md)::

    <name>/
      manifest.json    format, version, creation time, compatibility fields, JSON state, and for every array
                       file its size, sha256 and the dtype/shape of each array it holds
      manifest.sha256  the sha256 of manifest.json's bytes
      anchors.npz      images [S0, h, w, 3] uint8 (network-size inputs of the current model stream's anchors),
                       stamps_ns [S0] int64
      map.npz          xyz [N, 3] float32 and rgb [N, 3] uint8 (the voxel map, map frame)
      trajectory.npz   stamps_ns [M] int64 and poses [M, 7] float64 (tx ty tz qx qy qz qw, map frame)
      grid.npz         hits, passes [X, Y] uint16 and origin [2] int64 (the occupancy grid's counts)
      loop.npz         the loop closure's keyframe map and pose graph (engine/loop/persist.py; zero-size
                       arrays when none; from version 3)

A session file is untrusted input (anyone on the DDS domain can call the node's services): nothing is
ever unpickled (``allow_pickle=False``, JSON only), every file is hashed and its size bounded before it is
read, every array's header (dtype, shape) is checked against the manifest and `SessionLimits` before its data
is allocated, and `resolve_under` keeps paths below one base folder (no ``..``, no symbolic links). A save
writes a temporary folder next to the target and renames it into place: never a half-written session.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..geometry import Sim3
from ..npz_input import (
    SCHEMA,
    SessionError,
    SessionLimits,
    declared_bytes,
    declared_shapes,
    empty_arrays,
    read_npz,
    sha256_file,
)

FORMAT = "lingbot_map_session"
#: 2: `MANIFEST_HASH` beside the manifest (version-1 folders, without it, are still read).
#: 3: ``loop.npz`` (older folders, without it, load with no keyframe map).
FORMAT_VERSION = 3
#: The format version that introduced each file that older sessions lack.
FILE_SINCE = {"loop.npz": 3}
MANIFEST = "manifest.json"
#: The sha256 of the manifest's bytes (the manifest is covered by the integrity check too).
MANIFEST_HASH = "manifest.sha256"
MAX_MANIFEST_BYTES = 1 << 20

__all__ = ["SCHEMA", "SessionError", "SessionLimits", "SessionSnapshot", "load_session", "save_session"]


@dataclass
class SessionSnapshot:
    """Everything a session folder holds.

    Attributes:
        compat: fields that must equal the loading model's (preset, checkpoint fingerprint, sizes, ...).
        anchor_images: [S0, h, w, 3] uint8 network-size anchor images of the current model stream.
        anchor_stamps_ns: [S0] int64 their stamps.
        source_hw: (H, W) of the original camera images (the decode geometry).
        alignment: Sim(3) from the current model stream's world frame into the map frame.
        map_xyz: [N, 3] float32 voxel-map points (map frame); map_rgb: [N, 3] uint8 colours.
        trajectory_stamps_ns: [M] int64; trajectory_poses: [M, 7] float64 (t xyz, q xyzw), map frame.
        grid_hits / grid_passes: [X, Y] uint16 occupancy counts; grid_origin: [2] int64 cell of [0, 0].
        state: further JSON-able state (scale and its source, frames, map -> odom, the loop closure's
            ``state["loop_closure"]``, ...).
        loop: the arrays of ``loop.npz`` (engine/loop/persist.py `export_loop`; zero-size: no keyframe map).
    """

    compat: dict[str, Any]
    anchor_images: np.ndarray
    anchor_stamps_ns: np.ndarray
    source_hw: tuple[int, int]
    alignment: Sim3
    map_xyz: np.ndarray = field(default_factory=lambda: np.zeros((0, 3), np.float32))
    map_rgb: np.ndarray = field(default_factory=lambda: np.zeros((0, 3), np.uint8))
    trajectory_stamps_ns: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    trajectory_poses: np.ndarray = field(default_factory=lambda: np.zeros((0, 7), np.float64))
    grid_hits: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), np.uint16))
    grid_passes: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), np.uint16))
    grid_origin: np.ndarray = field(default_factory=lambda: np.zeros(2, np.int64))
    state: dict[str, Any] = field(default_factory=dict)
    loop: dict[str, np.ndarray] = field(default_factory=lambda: empty_arrays("loop.npz"))

    def arrays(self) -> dict[str, dict[str, np.ndarray]]:
        """The arrays by file, in `SCHEMA`'s dtypes (C-contiguous)."""
        out = {
            "anchors.npz": {"images": self.anchor_images, "stamps_ns": self.anchor_stamps_ns},
            "map.npz": {"xyz": self.map_xyz, "rgb": self.map_rgb},
            "trajectory.npz": {"stamps_ns": self.trajectory_stamps_ns, "poses": self.trajectory_poses},
            "grid.npz": {"hits": self.grid_hits, "passes": self.grid_passes, "origin": self.grid_origin},
            "loop.npz": self.loop,
        }
        return {
            f: {k: np.ascontiguousarray(a, dtype=np.dtype(SCHEMA[f][k][0])) for k, a in arrays.items()}
            for f, arrays in out.items()
        }


def resolve_under(base: str | os.PathLike, requested: str | os.PathLike) -> Path:
    """``requested`` (relative to ``base``, or absolute inside it) as a path below ``base``.

    Raises:
        SessionError: ``..`` components, a symbolic link anywhere below ``base``, or a path outside it.
    """
    base_path = Path(base).expanduser()
    if not base_path.is_absolute():
        raise SessionError(f"session.dir must be an absolute path, got {str(base)!r}")
    base_real = base_path.resolve()
    req = Path(requested)
    if ".." in req.parts:
        raise SessionError(f"session path {str(requested)!r} contains '..'")
    if req.is_absolute():
        try:
            req = req.relative_to(base_path)
        except ValueError:
            try:
                req = req.relative_to(base_real)
            except ValueError:
                raise SessionError(
                    f"session path {str(requested)!r} is outside session.dir {base_path}"
                ) from None
    if not req.parts:
        raise SessionError("empty session path")
    current = base_real
    for part in req.parts:
        current = current / part
        if current.is_symlink():
            raise SessionError(f"session path {str(requested)!r}: {current} is a symbolic link")
    return current


def checkpoint_fingerprint(path: str | os.PathLike | None, preset: str, seed: int = 0) -> str:
    """Identity of the weights: ``sha256:<hex>`` of the checkpoint, or ``synthetic:<preset>:seed=<n>``."""
    if not path:
        return f"synthetic:{preset}:seed={seed}"
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 24), b""):
            digest.update(chunk)
    return f"sha256:{digest.hexdigest()}"


def save_session(target: str | os.PathLike, snapshot: SessionSnapshot) -> Path:
    """Write ``snapshot`` as the session folder ``target`` (which must not exist), atomically.

    Returns:
        The folder written. Raises `SessionError` (target exists) or `OSError`.
    """
    target = Path(target)
    if target.exists() or target.is_symlink():
        raise SessionError(f"session {target} already exists")
    _check_snapshot(snapshot)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.parent / f".{target.name}.{secrets.token_hex(6)}.tmp"
    os.mkdir(tmp, 0o777)  # the umask applies, as to every file below
    try:
        files = {}
        for name, arrays in snapshot.arrays().items():
            path = tmp / name
            with open(path, "wb") as f:
                np.savez(f, **arrays)
                f.flush()
                os.fsync(f.fileno())
            files[name] = {
                "bytes": path.stat().st_size,
                "sha256": sha256_file(path),
                "arrays": {k: {"dtype": a.dtype.str, "shape": list(a.shape)} for k, a in arrays.items()},
            }
        align = snapshot.alignment
        manifest = {
            "format": FORMAT,
            "version": FORMAT_VERSION,
            "created_unix_s": time.time(),
            "compat": snapshot.compat,
            "source_hw": [int(v) for v in snapshot.source_hw],
            "alignment": {
                "rotation": np.asarray(align.rotation, np.float64).tolist(),
                "translation": np.asarray(align.translation, np.float64).tolist(),
                "scale": float(align.scale),
            },
            "state": snapshot.state,
            "files": files,
        }
        text = json.dumps(manifest, indent=1, allow_nan=False).encode("utf-8")
        for name, data in ((MANIFEST, text), (MANIFEST_HASH, hashlib.sha256(text).hexdigest().encode())):
            with open(tmp / name, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
        os.rename(tmp, target)
    except BaseException:
        for child in tmp.glob("*"):
            child.unlink(missing_ok=True)
        tmp.rmdir()
        raise
    _fsync_dir(target.parent)
    return target


def clean_stale_temporaries(base: str | os.PathLike) -> list[str]:
    """Remove the hidden temporary folders (``.<name>.<hex>.tmp``) of saves that never finished (the process
    was killed or ended with ``os._exit`` during a save) directly below ``base``; returns their names.
    Symbolic links and anything that is not such a folder are left alone."""
    removed = []
    base = Path(base)
    if not base.is_dir():
        return removed
    for tmp in base.glob(".*.tmp"):
        if tmp.is_symlink() or not tmp.is_dir():
            continue
        for child in tmp.iterdir():
            if child.is_file() and not child.is_symlink():
                child.unlink()
        try:
            tmp.rmdir()
        except OSError:
            continue  # not one of ours (holds something else): kept
        removed.append(tmp.name)
    return removed


def load_session(
    folder: str | os.PathLike, expected_compat: dict[str, Any], limits: SessionLimits | None = None
) -> SessionSnapshot:
    """Read and validate a session folder written by `save_session`.

    Args:
        folder: the session folder (already confined with `resolve_under` by the caller).
        expected_compat: the running model's compatibility fields; each must equal the saved one.
    Raises:
        SessionError: missing/oversized/tampered file, unknown format or newer version, a compatibility
            mismatch (naming the field), an array of the wrong dtype/shape, or non-finite values.
    """
    limits = limits or SessionLimits()
    folder = Path(folder)
    if folder.is_symlink() or not folder.is_dir():
        raise SessionError(f"session {folder} is not a folder")
    manifest = _read_manifest(folder)
    saved = manifest["compat"]
    for key, value in expected_compat.items():
        if saved.get(key) != value:
            raise SessionError(
                f"session {folder.name} is incompatible: {key} is {saved.get(key)!r} in the session, "
                f"{value!r} here"
            )
    names = [n for n in SCHEMA if manifest["version"] >= FILE_SINCE.get(n, 1)]
    shapes = {name: declared_shapes(name, manifest["files"][name], limits) for name in names}
    total = sum(declared_bytes(name, s) for name, s in shapes.items())
    if total > limits.max_total_bytes:
        raise SessionError(
            f"session {folder.name} declares {total} bytes of arrays, more than the "
            f"{limits.max_total_bytes} allowed"
        )
    arrays = {name: read_npz(folder, name, manifest["files"][name], shapes[name]) for name in names}
    snapshot = SessionSnapshot(
        compat=saved,
        anchor_images=arrays["anchors.npz"]["images"],
        anchor_stamps_ns=arrays["anchors.npz"]["stamps_ns"],
        source_hw=(int(manifest["source_hw"][0]), int(manifest["source_hw"][1])),
        alignment=_alignment(manifest["alignment"]),
        map_xyz=arrays["map.npz"]["xyz"],
        map_rgb=arrays["map.npz"]["rgb"],
        trajectory_stamps_ns=arrays["trajectory.npz"]["stamps_ns"],
        trajectory_poses=arrays["trajectory.npz"]["poses"],
        grid_hits=arrays["grid.npz"]["hits"],
        grid_passes=arrays["grid.npz"]["passes"],
        grid_origin=arrays["grid.npz"]["origin"],
        state=manifest["state"],
        loop=arrays.get("loop.npz") or empty_arrays("loop.npz"),
    )
    _check_snapshot(snapshot, limits)
    return snapshot


# ---------------------------------------------------------------------------------------------- internals


def _check_snapshot(s: SessionSnapshot, limits: SessionLimits | None = None) -> None:
    """Shapes and values that every session must have (also before a save: never write a bad session)."""
    limits = limits or SessionLimits()
    images = np.asarray(s.anchor_images)
    if images.ndim != 4 or images.shape[3] != 3 or not 1 <= images.shape[0] <= limits.max_anchor_frames:
        raise SessionError(
            f"anchors.npz: images must be [S0 <= {limits.max_anchor_frames}, h, w, 3], got {images.shape}"
        )
    if np.asarray(s.anchor_stamps_ns).shape != (images.shape[0],):
        raise SessionError(f"anchors.npz: stamps_ns must be [{images.shape[0]}]")
    if len(s.source_hw) != 2 or not all(1 <= int(v) <= 1 << 16 for v in s.source_hw):
        raise SessionError(f"manifest: source_hw must be two sizes in [1, 65536], got {s.source_hw}")
    n = np.asarray(s.map_xyz).shape
    if len(n) != 2 or n[1] != 3 or np.asarray(s.map_rgb).shape != n:
        raise SessionError(
            f"map.npz: xyz and rgb must both be [N, 3], got {n} and {np.asarray(s.map_rgb).shape}"
        )
    m = np.asarray(s.trajectory_poses).shape
    if len(m) != 2 or m[1] != 7 or np.asarray(s.trajectory_stamps_ns).shape != (m[0],):
        raise SessionError(f"trajectory.npz: poses must be [M, 7] with M stamps, got {m}")
    g = np.asarray(s.grid_hits).shape
    if len(g) != 2 or np.asarray(s.grid_passes).shape != g or np.asarray(s.grid_origin).shape != (2,):
        raise SessionError(f"grid.npz: hits and passes must both be [X, Y] and origin [2], got {g}")
    for name, a in (("map xyz", s.map_xyz), ("trajectory poses", s.trajectory_poses)):
        if not np.isfinite(np.asarray(a, np.float64)).all():
            raise SessionError(f"{name} contain non-finite values")
    align = s.alignment
    if not (math.isfinite(align.scale) and align.scale > 0 and np.isfinite(align.translation).all()):
        raise SessionError(f"alignment must have a finite positive scale, got {align.scale}")
    rot = np.asarray(align.rotation, np.float64)
    if rot.shape != (3, 3) or not np.allclose(rot @ rot.T, np.eye(3), atol=1e-6):
        raise SessionError("alignment rotation is not a rotation matrix")


def _read_manifest(folder: Path) -> dict[str, Any]:
    path = folder / MANIFEST
    if path.is_symlink() or not path.is_file():
        raise SessionError(f"session {folder.name}: {MANIFEST} is missing")
    if path.stat().st_size > MAX_MANIFEST_BYTES:
        raise SessionError(f"session {folder.name}: {MANIFEST} is larger than {MAX_MANIFEST_BYTES} bytes")
    text = path.read_bytes()
    hash_path = folder / MANIFEST_HASH
    has_hash = hash_path.is_file() and not hash_path.is_symlink()
    if has_hash and hash_path.read_bytes()[:128].strip() != hashlib.sha256(text).hexdigest().encode():
        raise SessionError(
            f"session {folder.name}: {MANIFEST} does not match {MANIFEST_HASH} (edited or corrupt)"
        )
    try:
        manifest = json.loads(text.decode("utf-8"), parse_constant=_reject_constant)
    except (ValueError, UnicodeDecodeError) as exc:
        raise SessionError(f"session {folder.name}: {MANIFEST} is not valid JSON ({exc})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise SessionError(f"session {folder.name}: {MANIFEST} is not a {FORMAT} manifest")
    version = manifest.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise SessionError(f"session {folder.name}: manifest version {version!r} is invalid")
    if version > FORMAT_VERSION:
        raise SessionError(
            f"session {folder.name} has format version {version}, newer than this node's {FORMAT_VERSION}"
        )
    if version >= 2 and not has_hash:
        raise SessionError(f"session {folder.name}: {MANIFEST_HASH} is missing")
    for key, kind in (
        ("compat", dict),
        ("state", dict),
        ("files", dict),
        ("alignment", dict),
        ("source_hw", list),
    ):
        if not isinstance(manifest.get(key), kind):
            raise SessionError(
                f"session {folder.name}: manifest field {key!r} is missing or not a {kind.__name__}"
            )
    for name in (n for n in SCHEMA if version >= FILE_SINCE.get(n, 1)):
        if not isinstance(manifest["files"].get(name), dict):
            raise SessionError(f"session {folder.name}: manifest lists no {name}")
    return manifest


def _reject_constant(name: str) -> None:
    raise ValueError(f"{name} is not allowed")


def _alignment(entry: dict[str, Any]) -> Sim3:
    try:
        rotation = np.asarray(entry["rotation"], dtype=np.float64)
        translation = np.asarray(entry["translation"], dtype=np.float64)
        scale = float(entry["scale"])
    except (KeyError, TypeError, ValueError) as exc:
        raise SessionError(f"manifest alignment is malformed ({exc})") from None
    if rotation.shape != (3, 3) or translation.shape != (3,):
        raise SessionError("manifest alignment must hold a 3x3 rotation and a 3-vector translation")
    return Sim3(rotation, translation, scale)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
