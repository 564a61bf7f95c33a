"""Reading a session's ``.npz`` array files as untrusted input (engine/persistence/store.py owns the format).

Order of the checks, so that nothing is hashed, decompressed or allocated beyond what the manifest declares
and `SessionLimits` allows (docs/session.md "Untrusted input"):

1. the manifest's declared arrays (`declared_shapes`): dtype and rank of `SCHEMA`, each count within its
   limit, their sum within ``max_total_bytes``; the file's declared size at most the declared arrays plus the
   npz framing (`NPZ_OVERHEAD_BYTES`): an 8 GiB file declared for a small map is refused before it is hashed;
2. the file's size and sha256 against the manifest;
3. the zip members: exactly the schema's names; each ``.npy`` header must declare the manifest's dtype and
   shape (a member that would inflate to more than declared is refused from its header), then exactly that
   many bytes are read (``zipfile`` inflates no further than it is asked to); nothing is unpickled.
"""

from __future__ import annotations

import hashlib
import math
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np

#: Every array of a session: file -> {array name: (dtype, rank)}.
SCHEMA: dict[str, dict[str, tuple[str, int]]] = {
    "anchors.npz": {"images": ("|u1", 4), "stamps_ns": ("<i8", 1)},
    "map.npz": {"xyz": ("<f4", 2), "rgb": ("|u1", 2)},
    "trajectory.npz": {"stamps_ns": ("<i8", 1), "poses": ("<f8", 2)},
    "grid.npz": {"hits": ("<u2", 2), "passes": ("<u2", 2), "origin": ("<i8", 1)},
    # the loop closure's keyframe map and pose graph (engine/loop/persist.py; format version >= 3). Poses are
    # [13] float64: rotation row-major [9], translation [3], scale.
    "loop.npz": {
        "kf_keys": ("<i8", 1),
        "kf_stamps_s": ("<f8", 1),
        "kf_poses": ("<f8", 2),
        "kf_stream_poses": ("<f8", 2),
        "kf_point_counts": ("<i8", 1),
        "kf_points": ("<f4", 2),
        "kf_colors": ("|u1", 2),
        "kf_descriptors": ("<f4", 2),
        "kf_has_image": ("|u1", 1),
        "kf_images": ("|u1", 4),
        "kf_depth": ("<f4", 3),
        "kf_conf": ("<f4", 3),
        "kf_merged_counts": ("<i8", 1),
        "kf_merged": ("<i8", 1),
        "edge_nodes": ("<i8", 2),
        "edge_measured": ("<f8", 2),
        "edge_sigmas": ("<f8", 2),
        "edge_loop": ("|u1", 1),
    },
}
#: Bytes an npz may hold beyond its arrays' data: zip headers and central directory, .npy headers.
NPZ_OVERHEAD_BYTES = 64 * 1024


class SessionError(ValueError):
    """A session folder cannot be saved or loaded; the message names the file or field and why."""


@dataclass(frozen=True)
class SessionLimits:
    """Bounds checked before any array of a session is hashed or allocated. A node derives them from its own
    configuration (`ros/services/session_files.py`: S0 anchors at most `model.image_width` a side,
    `map.max_points`, `trajectory.max_poses`, `grid.max_cells`²), which is what keeps a small hostile file
    from costing gigabytes.
    """

    max_anchor_frames: int = 64
    max_image_side: int = 4096
    max_points: int = 50_000_000
    max_poses: int = 10_000_000
    max_grid_cells: int = 25_000_000
    max_keyframes: int = 100_000
    max_keyframe_points: int = 50_000_000
    max_descriptor_dim: int = 8192
    max_edges: int = 1_000_000
    max_total_bytes: int = 4 << 30

    def max_elements(self, key: str) -> int:
        """Most elements array ``key`` may hold."""
        return {
            "images": self.max_anchor_frames * self.max_image_side**2 * 3,
            "xyz": self.max_points * 3,
            "rgb": self.max_points * 3,
            "poses": self.max_poses * 7,
            "stamps_ns": max(self.max_poses, self.max_anchor_frames),
            "hits": self.max_grid_cells,
            "passes": self.max_grid_cells,
            "origin": 2,
            **dict.fromkeys(
                ("kf_keys", "kf_stamps_s", "kf_point_counts", "kf_has_image", "kf_merged_counts"),
                self.max_keyframes,
            ),
            "kf_merged": self.max_keyframes * 64,  # the keys folded into submaps
            "kf_poses": self.max_keyframes * 13,
            "kf_stream_poses": self.max_keyframes * 13,
            "kf_points": self.max_keyframe_points * 3,
            "kf_colors": self.max_keyframe_points * 3,
            "kf_descriptors": self.max_keyframes * self.max_descriptor_dim,
            "kf_images": self.max_keyframes * self.max_image_side**2 * 3,
            "kf_depth": self.max_keyframes * self.max_image_side**2,
            "kf_conf": self.max_keyframes * self.max_image_side**2,
            "edge_nodes": self.max_edges * 2,
            "edge_measured": self.max_edges * 13,
            "edge_sigmas": self.max_edges * 3,
            "edge_loop": self.max_edges,
        }[key]


def empty_arrays(name: str) -> dict[str, np.ndarray]:
    """Zero-size arrays of file ``name`` in `SCHEMA`'s dtypes and ranks (e.g. no keyframe map)."""
    return {key: np.zeros((0,) * rank, np.dtype(dtype)) for key, (dtype, rank) in SCHEMA[name].items()}


def bounded_names(names: list[str], shown: int = 5) -> str:
    """The first ``shown`` of ``names`` and a count of the rest: replies and log lines stay short."""
    head = ", ".join(repr(n[:80]) for n in names[:shown])
    return head + (f" and {len(names) - shown} more" if len(names) > shown else "")


def declared_shapes(name: str, entry: dict[str, Any], limits: SessionLimits) -> dict[str, tuple[int, ...]]:
    """The manifest's dtype/shape of each array of file ``name``, checked against `SCHEMA` and ``limits``."""
    arrays = entry.get("arrays")
    if not isinstance(arrays, dict) or set(arrays) != set(SCHEMA[name]):
        raise SessionError(f"manifest: {name} must declare the arrays {sorted(SCHEMA[name])}")
    out = {}
    for key, (dtype, rank) in SCHEMA[name].items():
        declared = arrays[key] if isinstance(arrays[key], dict) else {}
        shape = declared.get("shape")
        if (
            declared.get("dtype") != dtype
            or not isinstance(shape, list)
            or len(shape) != rank
            or not all(type(v) is int and v >= 0 for v in shape)
        ):
            raise SessionError(f"manifest: {name}/{key} must be {dtype} of rank {rank}, got {declared}")
        if math.prod(shape) > limits.max_elements(key):
            raise SessionError(f"manifest: {name}/{key} shape {shape} exceeds the limits of this node")
        out[key] = tuple(shape)
    return out


def declared_bytes(name: str, shapes: dict[str, tuple[int, ...]]) -> int:
    """Data bytes of the arrays of file ``name`` as declared."""
    return sum(math.prod(s) * np.dtype(SCHEMA[name][k][0]).itemsize for k, s in shapes.items())


def read_npz(
    folder: Path, name: str, entry: dict[str, Any], shapes: dict[str, tuple[int, ...]]
) -> dict[str, np.ndarray]:
    """One array file (module doc, steps 2-3); ``shapes`` from `declared_shapes`."""
    path = folder / name
    if path.is_symlink() or not path.is_file():
        raise SessionError(f"{name} is missing or not a regular file")
    size = path.stat().st_size
    bound = declared_bytes(name, shapes) + NPZ_OVERHEAD_BYTES
    if type(entry.get("bytes")) is not int or entry["bytes"] > bound:
        raise SessionError(f"{name}: declared size {entry.get('bytes')} exceeds its arrays' {bound} bytes")
    if size != entry["bytes"]:
        raise SessionError(
            f"{name} has {size} bytes, the manifest says {entry['bytes']} (truncated or replaced)"
        )
    if sha256_file(path) != entry.get("sha256"):
        raise SessionError(f"{name} does not match its sha256 in the manifest (tampered or corrupt)")
    out = {}
    try:
        with zipfile.ZipFile(path) as archive:
            infos = archive.infolist()
            expected = {f"{k}.npy" for k in SCHEMA[name]}
            members = {info.filename: info for info in infos} if len(infos) == len(expected) else {}
            if set(members) != expected:
                names = [info.filename for info in infos]
                raise SessionError(
                    f"{name} holds {len(names)} members ({bounded_names(names)}), expected {sorted(expected)}"
                )
            for key, (dtype, _) in SCHEMA[name].items():
                info = members[f"{key}.npy"]
                with archive.open(info) as f:
                    out[key] = _read_member(f, name, key, np.dtype(dtype), shapes[key], info.file_size)
    except (zipfile.BadZipFile, OSError, EOFError, NotImplementedError) as exc:
        raise SessionError(f"{name} is not a readable npz archive ({exc})") from None
    return out


def _read_member(
    f: IO[bytes], name: str, key: str, dtype: np.dtype, shape: tuple[int, ...], member_size: int
) -> np.ndarray:
    """An .npy member whose header must declare ``dtype`` and exactly the manifest's ``shape``, and whose zip
    entry (``member_size`` inflated bytes) holds nothing more; then exactly its bytes are read (inflated) and
    copied, never more."""
    fmt = np.lib.format
    try:
        version = fmt.read_magic(f)
        header = {(1, 0): fmt.read_array_header_1_0, (2, 0): fmt.read_array_header_2_0}.get(version)
        if header is None:
            raise ValueError(f"unsupported .npy version {version}")
        found_shape, fortran, found = header(f)
    except ValueError as exc:
        raise SessionError(f"{name}/{key}: bad .npy header ({exc})") from None
    if found.hasobject or found != dtype or fortran or len(found_shape) != len(shape):
        raise SessionError(f"{name}/{key}: expected {dtype} of rank {len(shape)}, got {found} {found_shape}")
    if tuple(found_shape) != shape:
        raise SessionError(
            f"{name}/{key}: shape {found_shape} exceeds the limits or the stored data "
            f"(the manifest declares {list(shape)})"
        )
    n_bytes = math.prod(shape) * dtype.itemsize
    if member_size != f.tell() + n_bytes:
        raise SessionError(
            f"{name}/{key}: the zip entry inflates to {member_size} bytes, its array to "
            f"{f.tell() + n_bytes} (padded or truncated)"
        )
    data = f.read(n_bytes)
    if len(data) != n_bytes:
        raise SessionError(f"{name}/{key}: data is truncated")
    return np.frombuffer(data, dtype=dtype).reshape(shape).copy()


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file, read in 16 MiB chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 24), b""):
            digest.update(chunk)
    return digest.hexdigest()
