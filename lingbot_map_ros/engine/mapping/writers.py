"""Atomic file writers: binary PLY point clouds and TUM trajectories.

Both write to a temporary file in the destination directory and ``os.replace`` it onto the target, so a reader
never sees a half-written file and a crash leaves the previous file intact.
"""

from __future__ import annotations

import os
import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import IO

import numpy as np

from ..geometry import matrix_to_quat_xyzw

_PLY_VERTEX = np.dtype(
    [("x", "<f4"), ("y", "<f4"), ("z", "<f4"), ("red", "u1"), ("green", "u1"), ("blue", "u1")]
)


def process_umask() -> int:
    """The process's file-mode creation mask, read without changing it (Linux: /proc/self/status; else the
    racy `os.umask` set-and-restore)."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except OSError:
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def atomic_write(path: str | os.PathLike, write: Callable[[IO[bytes]], None]) -> Path:
    """Call ``write(file)`` on a temporary file next to ``path``, fsync it and rename it onto ``path``.

    The file gets the mode an ordinary ``open(path, "w")`` would give it (0666 less the umask), not the
    temporary file's private 0600, so other users and tools can read a saved map as usual.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fchmod(f.fileno(), 0o666 & ~process_umask())
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_ply(path: str | os.PathLike, xyz: np.ndarray, rgb: np.ndarray) -> Path:
    """Write a binary little-endian PLY with ``float x, y, z`` and ``uchar red, green, blue`` per vertex.

    Args:
        xyz: [N, 3] points (cast to float32).
        rgb: [N, 3] uint8 colours.
    Raises:
        ValueError: shapes or dtypes other than [N, 3] / [N, 3] uint8.
    """
    xyz = np.asarray(xyz)
    rgb = np.asarray(rgb)
    if xyz.ndim != 2 or xyz.shape[1] != 3:
        raise ValueError(f"expected xyz of shape [N, 3], got {xyz.shape}")
    if rgb.shape != xyz.shape or rgb.dtype != np.uint8:
        raise ValueError(f"expected rgb of shape {xyz.shape} and dtype uint8, got {rgb.shape} {rgb.dtype}")
    vertices = np.empty(xyz.shape[0], dtype=_PLY_VERTEX)
    for axis, name in enumerate("xyz"):
        vertices[name] = xyz[:, axis]
    for channel, name in enumerate(("red", "green", "blue")):
        vertices[name] = rgb[:, channel]
    header = (
        "ply\nformat binary_little_endian 1.0\n"
        f"element vertex {xyz.shape[0]}\n"
        "property float x\nproperty float y\nproperty float z\n"
        "property uchar red\nproperty uchar green\nproperty uchar blue\nend_header\n"
    ).encode("ascii")

    def _write(f: IO[bytes]) -> None:
        f.write(header)
        f.write(vertices.tobytes())

    return atomic_write(path, _write)


def read_ply(path: str | os.PathLike) -> tuple[np.ndarray, np.ndarray]:
    """Read back a PLY written by :func:`write_ply`: (xyz [N, 3] float32, rgb [N, 3] uint8)."""
    data = Path(path).read_bytes()
    end = data.index(b"end_header\n") + len(b"end_header\n")
    header = data[:end].decode("ascii").splitlines()
    if header[1] != "format binary_little_endian 1.0":
        raise ValueError(f"{path}: expected a binary_little_endian PLY, got {header[1]!r}")
    count = next(int(line.split()[2]) for line in header if line.startswith("element vertex"))
    vertices = np.frombuffer(data, dtype=_PLY_VERTEX, count=count, offset=end)
    xyz = np.stack([vertices[n] for n in "xyz"], axis=1)
    rgb = np.stack([vertices[n] for n in ("red", "green", "blue")], axis=1)
    return xyz, rgb


def tum_rows(poses_c2w: np.ndarray) -> np.ndarray:
    """[N, 4, 4] camera-to-world poses → [N, 7] rows (tx ty tz qx qy qz qw), float64."""
    poses_c2w = np.asarray(poses_c2w, dtype=np.float64)
    if poses_c2w.ndim != 3 or poses_c2w.shape[1:] != (4, 4):
        raise ValueError(f"expected poses of shape [N, 4, 4], got {poses_c2w.shape}")
    return np.concatenate([poses_c2w[:, :3, 3], matrix_to_quat_xyzw(poses_c2w[:, :3, :3])], axis=1)


def write_tum(path: str | os.PathLike, stamps: np.ndarray, poses: np.ndarray) -> Path:
    """Write a TUM trajectory: one line ``timestamp tx ty tz qx qy qz qw`` per pose.

    Args:
        stamps: [N] timestamps: integer nanoseconds (any integer dtype; written exactly, e.g. ROS
            ``sec * 10**9 + nanosec``: 2147483647.999999999 stays that), or float seconds (written with 9
            decimals; float64 cannot hold nanoseconds of today's epoch times, so prefer integers).
        poses: [N, 4, 4] camera-to-world matrices, or [N, 7] rows (tx ty tz qx qy qz qw).
    """
    stamps = np.asarray(stamps).reshape(-1)
    if np.issubdtype(stamps.dtype, np.integer):
        stamp_text = [stamp_ns_text(int(ns)) for ns in stamps]
    else:
        stamp_text = [f"{value:.9f}" for value in stamps.astype(np.float64)]
    poses = np.asarray(poses, dtype=np.float64)
    rows = poses if poses.ndim == 2 and poses.shape[1:] == (7,) else tum_rows(poses)
    if rows.shape[0] != stamps.shape[0]:
        raise ValueError(
            f"expected one timestamp per pose, got {stamps.shape[0]} stamps for {rows.shape[0]} poses"
        )
    lines = [
        f"{stamp} " + " ".join(f"{v:.9g}" for v in row) + "\n"
        for stamp, row in zip(stamp_text, rows, strict=True)
    ]

    def _write(f: IO[bytes]) -> None:
        f.write(b"# timestamp tx ty tz qx qy qz qw\n")
        f.write("".join(lines).encode("ascii"))

    return atomic_write(path, _write)


def stamp_ns_text(ns: int) -> str:
    """Integer nanoseconds as exact decimal seconds with 9 digits (``-1`` -> ``-0.000000001``)."""
    sign, ns = ("-", -ns) if ns < 0 else ("", ns)
    return f"{sign}{ns // 1_000_000_000}.{ns % 1_000_000_000:09d}"


def read_tum(path: str | os.PathLike) -> tuple[np.ndarray, np.ndarray]:
    """Read a TUM file: (stamps [N] float64, rows [N, 7] float64 tx ty tz qx qy qz qw); N may be 0."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "loadtxt: input contained no data", UserWarning)
        table = np.loadtxt(path, comments="#", ndmin=2)
    if table.size == 0:  # an empty trajectory (e.g. ~/save_map right after ~/reset)
        return np.zeros(0), np.zeros((0, 7))
    if table.shape[1] != 8:
        raise ValueError(f"{path}: expected 8 columns (timestamp tx ty tz qx qy qz qw), got {table.shape[1]}")
    return table[:, 0], table[:, 1:]
