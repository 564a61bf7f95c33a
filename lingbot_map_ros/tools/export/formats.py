"""The files of `export`: a COLMAP text model and a nerfstudio `transforms.json`, from an `ExportScene`.

Conventions (docs/tools.md "export"):

* our poses are camera -> world (`c2w`) with the camera in OpenCV optical axes (x right, y down, z forward);
  the world is the source's `map` frame (REP-103 for a run: x forward, y left, z up), left as it is;
* COLMAP stores world -> camera (`R_cw = R_wcᵀ`, `t_cw = -R_wcᵀ t_wc`) as a quaternion `QW QX QY QZ` and a
  translation, the camera in OpenCV axes: no axis change;
* nerfstudio's `transform_matrix` is camera -> world with the camera in OpenGL axes (x right, y up, z back):
  `c2w_gl = c2w_cv @ diag(1, -1, -1, 1)` (`opencv_to_opengl`, its own inverse).
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import cv2
import numpy as np

from lingbot_map_ros.engine.face import matrix_to_quat_xyzw, write_ply
from lingbot_map_ros.engine.offline import atomic_write

#: Flips the camera's y and z axes: OpenCV optical <-> OpenGL (nerfstudio, Blender); its own inverse.
OPENCV_TO_OPENGL = np.diag([1.0, -1.0, -1.0, 1.0])
IMAGES_DIR = "images"
NOTE_FILE = "EXPORT_NOTE.txt"


@dataclass
class ExportView:
    """One posed camera view.

    Attributes:
        name: the image file's name below `images/` (e.g. `000000.png`).
        c2w: [4, 4] float64 camera (OpenCV optical axes) -> world.
        intrinsics: [3, 3] float64 pinhole matrix in pixels of the image.
        width, height: the image size in pixels.
        image: a file to copy, an [H, W, 3] uint8 RGB array to write as PNG, or None (no image in the source).
    """

    name: str
    c2w: np.ndarray
    intrinsics: np.ndarray
    width: int
    height: int
    image: Path | np.ndarray | None = None


@dataclass
class ExportScene:
    """What an export writes: the views, the sparse points (xyz [N, 3] float32 and rgb [N, 3] uint8 in the
    world frame) and notes for the reader (what is missing or assumed; written to `EXPORT_NOTE.txt`)."""

    views: list[ExportView]
    xyz: np.ndarray
    rgb: np.ndarray
    notes: list[str] = field(default_factory=list)


def opencv_to_opengl(c2w: np.ndarray) -> np.ndarray:
    """[..., 4, 4] camera -> world with the camera axes changed OpenCV <-> OpenGL (either way)."""
    return np.asarray(c2w, np.float64) @ OPENCV_TO_OPENGL


def world_to_camera(c2w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """COLMAP's pose of a camera -> world [4, 4]: world -> camera as (quaternion [4] `w x y z`,
    translation [3])."""
    rot_cw = np.asarray(c2w, np.float64)[:3, :3].T
    t_cw = -rot_cw @ np.asarray(c2w, np.float64)[:3, 3]
    x, y, z, w = matrix_to_quat_xyzw(rot_cw)
    return np.array([w, x, y, z]), t_cw


def write_colmap(scene: ExportScene, out: Path) -> Path:
    """A COLMAP text model in `out/sparse/0/` (cameras.txt: one PINHOLE camera per distinct size and
    intrinsics; images.txt: each view's world -> camera pose, no 2D points; points3D.txt: the sparse points
    without tracks) and the images in `out/images/`. Returns the model folder."""
    model = out / "sparse" / "0"
    model.mkdir(parents=True, exist_ok=True)
    cameras: dict[tuple[float, ...], int] = {}
    image_lines = []
    for image_id, view in enumerate(scene.views, start=1):
        k = view.intrinsics
        params = (
            int(view.width),
            int(view.height),
            *(float(v) for v in (k[0, 0], k[1, 1], k[0, 2], k[1, 2])),
        )
        camera_id = cameras.setdefault(params, len(cameras) + 1)
        q, t = world_to_camera(view.c2w)
        pose = " ".join(repr(float(v)) for v in (*q, *t))
        image_lines += [f"{image_id} {pose} {camera_id} {view.name}", ""]  # the empty line: no 2D points
    camera_lines = [
        f"{camera_id} PINHOLE {w} {h} {fx!r} {fy!r} {cx!r} {cy!r}"
        for (w, h, fx, fy, cx, cy), camera_id in cameras.items()
    ]
    point_lines = [  # error 0 and an empty track: the points come from depth maps, not from matches
        f"{i} {x!r} {y!r} {z!r} {r} {g} {b} 0"
        for i, ((x, y, z), (r, g, b)) in enumerate(
            zip(scene.xyz.astype(float).tolist(), scene.rgb.astype(int).tolist(), strict=True), start=1
        )
    ]
    _write_text(model / "cameras.txt", "# CAMERA_ID, MODEL, WIDTH, HEIGHT, PARAMS[]", camera_lines)
    _write_text(
        model / "images.txt",
        "# IMAGE_ID, QW, QX, QY, QZ, TX, TY, TZ, CAMERA_ID, NAME\n# POINTS2D[] as (X, Y, POINT3D_ID)",
        image_lines,
    )
    _write_text(model / "points3D.txt", "# POINT3D_ID, X, Y, Z, R, G, B, ERROR, TRACK[]", point_lines)
    _write_images(scene, out)
    _write_note(scene, out)
    return model


def write_nerfstudio(scene: ExportScene, out: Path) -> Path:
    """nerfstudio's `out/transforms.json` (camera_model OPENCV without distortion; `fl_x fl_y cx cy w h` at
    the top when every view shares them, else per frame; `frames[].transform_matrix` camera -> world in
    OpenGL axes), the images in `out/images/` and the sparse points in `out/sparse_pc.ply`
    (`ply_file_path`). Returns the transforms.json path."""
    out.mkdir(parents=True, exist_ok=True)
    intrinsics = [_intrinsics_keys(view) for view in scene.views]
    shared = len({tuple(i.items()) for i in intrinsics}) == 1
    frames = [
        {
            "file_path": f"{IMAGES_DIR}/{view.name}",
            "transform_matrix": opencv_to_opengl(view.c2w).tolist(),
            **({} if shared else keys),
        }
        for view, keys in zip(scene.views, intrinsics, strict=True)
    ]
    transforms: dict[str, object] = {
        "camera_model": "OPENCV",
        **(intrinsics[0] if shared else {}),
        "k1": 0.0,
        "k2": 0.0,
        "p1": 0.0,
        "p2": 0.0,
        "frames": frames,
    }
    if len(scene.xyz):
        write_ply(out / "sparse_pc.ply", scene.xyz, scene.rgb)
        transforms["ply_file_path"] = "sparse_pc.ply"
    path = atomic_write(out / "transforms.json", lambda f: f.write(json.dumps(transforms, indent=2).encode()))
    _write_images(scene, out)
    _write_note(scene, out)
    return path


def _intrinsics_keys(view: ExportView) -> dict[str, float | int]:
    k = view.intrinsics
    return {
        "fl_x": float(k[0, 0]),
        "fl_y": float(k[1, 1]),
        "cx": float(k[0, 2]),
        "cy": float(k[1, 2]),
        "w": int(view.width),
        "h": int(view.height),
    }


def _write_text(path: Path, header: str, lines: list[str]) -> None:
    text = header + "\n" + "".join(line + "\n" for line in lines)
    atomic_write(path, lambda f: f.write(text.encode()))


def _write_images(scene: ExportScene, out: Path) -> None:
    """The views' images into `out/images/` (copied, or encoded as PNG from arrays); none without a source."""
    for view in scene.views:
        if view.image is None:
            continue
        target = out / IMAGES_DIR / view.name
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(view.image, Path):
            shutil.copyfile(view.image, target)
        elif not cv2.imwrite(str(target), cv2.cvtColor(view.image, cv2.COLOR_RGB2BGR)):
            raise RuntimeError(f"could not write {target}")


def _write_note(scene: ExportScene, out: Path) -> None:
    if scene.notes:
        text = "".join(f"- {note}\n" for note in scene.notes)
        atomic_write(out / NOTE_FILE, lambda f: f.write(text.encode()))
