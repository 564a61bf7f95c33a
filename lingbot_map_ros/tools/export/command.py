"""`lingbot-map-ros export SOURCE --format colmap|nerfstudio -o OUT`: a run's or a session's poses, images and
points for the tools people map with (COLMAP, nerfstudio, gsplat, ...).

SOURCE is either
* a `run` output folder (one camera: `trajectory.tum`, `map.ply`, and with `run --keep-frames` its
  `frames/` and `frames.json`): every posed frame becomes a view with its image and the model's intrinsics;
  without `frames.json` the poses are written with no image and a placeholder camera (`EXPORT_NOTE.txt`
  says so); or
* a saved session folder (docs/session.md): its anchor frames become the views (network-size images, posed
  from the session's trajectory by stamp; TF mode `map_to_camera` only: in a robot mode the trajectory holds
  the base, not the camera), the voxel map the points. A session stores no intrinsics: the camera is
  `--intrinsics` or COLMAP's prior (focal 1.2 x the larger side, centred), noted in `EXPORT_NOTE.txt`.

Poses stay in the source's `map` frame and unit; the file formats' conventions are in tools/export/formats.py.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from lingbot_map_ros.engine.face import TfMode, load_session, pose_from_quat
from lingbot_map_ros.engine.offline import read_ply, read_tum
from lingbot_map_ros.tools.export.formats import ExportScene, ExportView, write_colmap, write_nerfstudio
from lingbot_map_ros.tools.run.frames import read_frames

FORMATS = {"colmap": write_colmap, "nerfstudio": write_nerfstudio}
#: The size of the placeholder camera of a run without frames (its images are unknown).
PLACEHOLDER_WH = (640, 480)
#: COLMAP's prior focal length for an unknown camera, as a multiple of the image's larger side.
PRIOR_FOCAL_FACTOR = 1.2


def read_source(source: Path, intrinsics: tuple[float, float, float, float] | None = None) -> ExportScene:
    """The `ExportScene` of a run output folder or a session folder (module doc); ValueError for anything
    else. `intrinsics` (fx, fy, cx, cy in pixels of the exported images) replaces an unknown camera."""
    if (source / "manifest.json").is_file():
        return read_session(source, intrinsics)
    if (source / "trajectory.tum").is_file():
        return read_run(source, intrinsics)
    cameras = sorted(p.parent.name for p in source.glob("*/trajectory.tum"))
    if cameras:
        raise ValueError(f"{source} holds several cameras' runs: export one of {', '.join(cameras)}")
    raise ValueError(
        f"{source} is neither a `run` output folder (trajectory.tum) nor a session (manifest.json)"
    )


def read_run(folder: Path, intrinsics: tuple[float, float, float, float] | None = None) -> ExportScene:
    """A `run` output folder: the trajectory's poses, `frames.json`'s images and intrinsics, `map.ply`."""
    stamps, rows = read_tum(folder / "trajectory.tum")
    poses = [pose_from_quat(row[:3], row[3:]) for row in rows]
    xyz, rgb = read_ply(folder / "map.ply") if (folder / "map.ply").is_file() else _no_points()
    frames = read_frames(folder)
    notes = []
    if frames is None:
        notes.append(
            f"{folder} has no frames.json (run without --keep-frames): the poses are written without images "
            "(images/ stays empty) and "
            + ("with the camera of --intrinsics" if intrinsics else "with a placeholder camera")
        )
        k, (w, h) = _assumed_camera(intrinsics, None, notes)
        views = [
            ExportView(f"{_stamp_name(s)}.png", pose, k, w, h) for s, pose in zip(stamps, poses, strict=True)
        ]
        return ExportScene(views, xyz, rgb, notes)
    if len(frames) != len(stamps):
        raise ValueError(
            f"{folder}: frames.json has {len(frames)} frames, trajectory.tum {len(stamps)} poses"
        )
    views = []
    for stamp, pose, frame in zip(stamps, poses, frames, strict=True):
        if abs(float(frame["stamp_s"]) - stamp) > 1e-6:
            raise ValueError(
                f"{folder}: frame {frame['file']} is stamped {frame['stamp_s']}, its pose {stamp}"
            )
        file = Path(str(frame["file"]))
        views.append(
            ExportView(
                file.name,
                pose,
                np.asarray(frame["intrinsics"], np.float64),
                int(frame["width"]),
                int(frame["height"]),
                folder / file,
            )
        )
    return ExportScene(views, xyz, rgb, notes)


def read_session(folder: Path, intrinsics: tuple[float, float, float, float] | None = None) -> ExportScene:
    """A saved session (validated by `persistence.load_session`, no compatibility asked): the anchor frames
    posed by their stamps in the trajectory, the voxel map as points."""
    snapshot = load_session(folder, {})
    mode = snapshot.state.get("tf_mode")
    if mode != TfMode.MAP_TO_CAMERA:
        raise ValueError(
            f"session {folder.name} was saved in TF mode {mode}: its trajectory holds the robot's base, not "
            "the camera, so its anchor frames cannot be posed"
        )
    stamps = snapshot.trajectory_stamps_ns.tolist()
    images = snapshot.anchor_images
    source_h, source_w = snapshot.source_hw
    notes = [
        f"session {folder.name}: the views are its {len(images)} anchor frames at the network size "
        f"{images.shape[2]}x{images.shape[1]} (the camera's were {source_w}x{source_h})"
    ]
    k, (w, h) = _assumed_camera(intrinsics, (images.shape[2], images.shape[1]), notes)
    views = []
    for stamp_ns, image in zip(snapshot.anchor_stamps_ns.tolist(), images, strict=True):
        if stamp_ns not in stamps:
            notes.append(
                f"anchor frame {_stamp_name(stamp_ns * 1e-9)} has no pose in the trajectory: left out"
            )
            continue
        row = snapshot.trajectory_poses[stamps.index(stamp_ns)]
        views.append(
            ExportView(
                f"{_stamp_name(stamp_ns * 1e-9)}.png", pose_from_quat(row[:3], row[3:]), k, w, h, image
            )
        )
    if not views:
        raise ValueError(f"session {folder.name}: none of its anchor frames has a pose in its trajectory")
    return ExportScene(views, snapshot.map_xyz, snapshot.map_rgb, notes)


def _assumed_camera(
    intrinsics: tuple[float, float, float, float] | None, size_wh: tuple[int, int] | None, notes: list[str]
) -> tuple[np.ndarray, tuple[int, int]]:
    """The camera of views whose intrinsics the source does not hold: `intrinsics` or COLMAP's prior, on
    images of `size_wh` (None: unknown, twice the principal point, or `PLACEHOLDER_WH`); the choice goes
    into `notes`."""
    if intrinsics is not None:
        fx, fy, cx, cy = intrinsics
        size_wh = size_wh or (round(2 * cx), round(2 * cy))
        notes.append(f"intrinsics from --intrinsics: fx {fx}, fy {fy}, cx {cx}, cy {cy}")
    else:
        size_wh = size_wh or PLACEHOLDER_WH
        w, h = size_wh
        fx = fy = PRIOR_FOCAL_FACTOR * max(w, h)
        cx, cy = w / 2, h / 2
        notes.append(
            f"the source holds no intrinsics: assumed focal {fx:g} px ({PRIOR_FOCAL_FACTOR} x the larger "
            "side, COLMAP's prior) and a centred principal point; pass --intrinsics FX FY CX CY for real ones"
        )
    return np.array([[fx, 0.0, cx], [0.0, fy, cy], [0.0, 0.0, 1.0]]), size_wh


def _stamp_name(stamp_s: float) -> str:
    return f"{stamp_s:.9f}".replace(".", "_")


def _no_points() -> tuple[np.ndarray, np.ndarray]:
    return np.zeros((0, 3), np.float32), np.zeros((0, 3), np.uint8)


def export(
    source: Path, fmt: str, out: Path, intrinsics: tuple[float, float, float, float] | None = None
) -> Path:
    """Write `source` (run folder or session) in `fmt` into `out`; returns the main file or folder written."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}: one of {', '.join(FORMATS)}")
    if out.exists() and any(out.iterdir()):
        raise ValueError(f"{out} exists and is not empty")
    scene = read_source(source, intrinsics)
    return FORMATS[fmt](scene, out)


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Register `export`."""
    p = subparsers.add_parser(
        "export",
        help="a run's or session's poses, images and points as a COLMAP model or nerfstudio transforms.json",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("source", type=Path, help="a `run` output folder or a saved session folder")
    p.add_argument("--format", choices=sorted(FORMATS), required=True)
    p.add_argument("-o", "--output", type=Path, required=True, help="output folder (created; must be empty)")
    p.add_argument(
        "--intrinsics",
        type=float,
        nargs=4,
        default=None,
        metavar=("FX", "FY", "CX", "CY"),
        help="pinhole camera (pixels of the exported images) where the source holds none",
    )
    p.set_defaults(func=main_args)


def main_args(args: argparse.Namespace) -> int:
    """Run `export` from parsed arguments."""
    written = export(args.source, args.format, args.output, args.intrinsics)
    print(f"{args.format} -> {written}")
    note = args.output / "EXPORT_NOTE.txt"
    if note.is_file():
        print(f"note ({note}):\n{note.read_text()}", end="")
    return 0
