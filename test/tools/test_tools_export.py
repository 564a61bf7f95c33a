"""`export`: a tiny-model `run` (and its saved session) as a COLMAP model read back by pycolmap and as a
nerfstudio transforms.json, poses compared with the trajectory."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from run_bags import write_two_camera_bag

from lingbot_map_ros.engine.geometry import pose_from_quat
from lingbot_map_ros.engine.mapping.writers import read_ply, read_tum
from lingbot_map_ros.tools import cli
from lingbot_map_ros.tools.bags.synthetic_scene import SceneConfig, write_scene_bag
from lingbot_map_ros.tools.export.formats import opencv_to_opengl, world_to_camera

FRAMES = 12
START_NS = 1_700_000_000_000_000_000
NERFSTUDIO_INTRINSICS = ("fl_x", "fl_y", "cx", "cy", "w", "h")


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run with --keep-frames and --save (its session in run/session)."""
    root = tmp_path_factory.mktemp("export")
    bag = root / "scene"
    scene = SceneConfig(width=128, height=96, frames=FRAMES, supersample=1)
    write_scene_bag(scene, bag, root / "ground_truth.tum", storage="sqlite3", start_time_ns=START_NS)
    out = root / "run"
    args = [
        "run",
        str(bag),
        "-o",
        str(out),
        "--width",
        "112",
        "--keep-frames",
        "--save",
        str(root / "session"),
    ]
    assert cli.main(args) == 0
    return out


def _trajectory(folder: Path) -> tuple[np.ndarray, list[np.ndarray]]:
    stamps, rows = read_tum(folder / "trajectory.tum")
    return stamps, [pose_from_quat(row[:3], row[3:]) for row in rows]


def test_world_to_camera_inverts_the_pose_and_opengl_flips_y_and_z() -> None:
    c2w = pose_from_quat(
        np.array([1.0, -2.0, 0.5]), np.array([0.1, -0.3, 0.2, 0.9]) / np.linalg.norm([0.1, -0.3, 0.2, 0.9])
    )
    (w, x, y, z), t = world_to_camera(c2w)
    w2c = np.linalg.inv(c2w)
    np.testing.assert_allclose(pose_from_quat(t, np.array([x, y, z, w])), w2c, atol=1e-12)
    gl = opencv_to_opengl(c2w)
    np.testing.assert_allclose(gl[:3, 0], c2w[:3, 0])  # x right in both
    np.testing.assert_allclose(gl[:3, 1:3], -c2w[:3, 1:3])  # y up and z back in OpenGL
    np.testing.assert_allclose(opencv_to_opengl(gl), c2w)


def test_run_keeps_one_frame_per_trajectory_line(run_dir: Path) -> None:
    stamps, _ = _trajectory(run_dir)
    frames = json.loads((run_dir / "frames.json").read_text())["frames"]
    assert len(frames) == len(stamps) == FRAMES
    np.testing.assert_allclose([f["stamp_s"] for f in frames], stamps, atol=1e-6)
    for frame in frames:
        assert (run_dir / frame["file"]).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        k = np.array(frame["intrinsics"])
        assert k.shape == (3, 3) and k[0, 0] > 0 and 0 < k[0, 2] < frame["width"]


def test_colmap_export_of_a_run_reads_back_with_pycolmap(run_dir: Path, tmp_path: Path) -> None:
    pycolmap = pytest.importorskip("pycolmap")
    out = tmp_path / "colmap"
    assert cli.main(["export", str(run_dir), "--format", "colmap", "-o", str(out)]) == 0
    model = pycolmap.Reconstruction(str(out / "sparse" / "0"))
    stamps, poses = _trajectory(run_dir)
    frames = json.loads((run_dir / "frames.json").read_text())["frames"]
    assert model.num_reg_images() == len(model.images) == FRAMES
    by_name = {image.name: image for image in model.images.values()}
    for frame, c2w in zip(frames, poses, strict=True):
        name = Path(frame["file"]).name
        image = by_name[name]
        np.testing.assert_allclose(image.cam_from_world().matrix(), np.linalg.inv(c2w)[:3], atol=1e-9)
        np.testing.assert_allclose(image.projection_center(), c2w[:3, 3], atol=1e-9)
        camera = model.cameras[image.camera_id]
        assert (camera.model_name, camera.width, camera.height) == (
            "PINHOLE",
            frame["width"],
            frame["height"],
        )
        np.testing.assert_allclose(camera.calibration_matrix(), frame["intrinsics"], rtol=1e-12)
        assert (out / "images" / name).read_bytes() == (run_dir / frame["file"]).read_bytes()
    xyz, rgb = read_ply(run_dir / "map.ply")
    assert len(model.points3D) == len(xyz) > 0
    first = model.points3D[1]
    np.testing.assert_allclose(first.xyz, xyz[0], atol=1e-6)
    np.testing.assert_array_equal(first.color, rgb[0])
    assert not (out / "EXPORT_NOTE.txt").exists()


def test_nerfstudio_export_of_a_run_follows_the_schema(run_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "ns"
    assert cli.main(["export", str(run_dir), "--format", "nerfstudio", "-o", str(out)]) == 0
    transforms = json.loads((out / "transforms.json").read_text())
    stamps, poses = _trajectory(run_dir)
    frames = json.loads((run_dir / "frames.json").read_text())["frames"]
    assert transforms["camera_model"] == "OPENCV"
    # nerfstudio: the intrinsics at the top when every frame shares them, else in every frame (the model's
    # estimate changes per frame here)
    assert not set(NERFSTUDIO_INTRINSICS) & set(transforms)
    assert len(transforms["frames"]) == len(stamps)
    for entry, frame, c2w in zip(transforms["frames"], frames, poses, strict=True):
        assert set(NERFSTUDIO_INTRINSICS) <= set(entry)
        k = np.array(frame["intrinsics"])
        assert (entry["fl_x"], entry["fl_y"], entry["cx"], entry["cy"]) == (
            k[0, 0],
            k[1, 1],
            k[0, 2],
            k[1, 2],
        )
        assert (entry["w"], entry["h"]) == (frame["width"], frame["height"])
        matrix = np.array(entry["transform_matrix"])
        assert matrix.shape == (4, 4)
        np.testing.assert_allclose(matrix[3], [0, 0, 0, 1])
        np.testing.assert_allclose(opencv_to_opengl(matrix), c2w, atol=1e-12)  # back to OpenCV axes
        # OpenGL camera looks along -z: the OpenCV viewing direction (+z) is the matrix's -z column
        np.testing.assert_allclose(-matrix[:3, 2], c2w[:3, 2], atol=1e-12)
        assert (out / entry["file_path"]).is_file()
    xyz, _ = read_ply(out / transforms["ply_file_path"])
    np.testing.assert_array_equal(xyz, read_ply(run_dir / "map.ply")[0])


def test_colmap_export_of_a_session_poses_its_anchor_frames(run_dir: Path, tmp_path: Path) -> None:
    pycolmap = pytest.importorskip("pycolmap")
    session = run_dir.parent / "session"
    out = tmp_path / "colmap"
    assert cli.main(["export", str(session), "--format", "colmap", "-o", str(out)]) == 0
    model = pycolmap.Reconstruction(str(out / "sparse" / "0"))
    stamps, poses = _trajectory(run_dir)
    s0 = json.loads((session / "manifest.json").read_text())["compat"]["scale_frames"]
    assert len(model.images) == s0 and len(model.cameras) == 1
    camera = next(iter(model.cameras.values()))
    assert camera.focal_length_x == pytest.approx(1.2 * max(camera.width, camera.height))
    for image in model.images.values():
        stamp = float(Path(image.name).stem.replace("_", "."))
        index = int(np.argmin(np.abs(stamps - stamp)))
        assert abs(stamps[index] - stamp) < 1e-6
        np.testing.assert_allclose(
            image.cam_from_world().matrix(), np.linalg.inv(poses[index])[:3], atol=1e-6
        )
        assert (out / "images" / image.name).is_file()
    assert "no intrinsics" in (out / "EXPORT_NOTE.txt").read_text()


def test_a_run_without_frames_exports_poses_and_a_note(run_dir: Path, tmp_path: Path) -> None:
    bare = tmp_path / "bare"
    bare.mkdir()
    for name in ("trajectory.tum", "map.ply"):
        (bare / name).write_bytes((run_dir / name).read_bytes())
    out = tmp_path / "ns"
    assert (
        cli.main(
            [
                "export",
                str(bare),
                "--format",
                "nerfstudio",
                "-o",
                str(out),
                "--intrinsics",
                "100",
                "90",
                "80",
                "60",
            ]
        )
        == 0
    )
    transforms = json.loads((out / "transforms.json").read_text())
    assert (transforms["fl_x"], transforms["fl_y"], transforms["cx"], transforms["cy"]) == (100, 90, 80, 60)
    assert len(transforms["frames"]) == FRAMES and not (out / "images").exists()
    assert "no frames.json" in (out / "EXPORT_NOTE.txt").read_text()


def test_keep_frames_needs_one_camera_topic(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    images = [np.full((48, 64, 3), 10 * i, np.uint8) for i in range(24)]  # refused before any frame is read
    bag = write_two_camera_bag(tmp_path / "two", images, START_NS)
    assert cli.main(["run", str(bag), "-o", str(tmp_path / "out"), "--width", "56", "--keep-frames"]) == 2
    assert "--keep-frames keeps one camera's frames" in capsys.readouterr().err


def test_export_refuses_a_folder_that_is_no_source_and_a_non_empty_output(
    run_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["export", str(tmp_path), "--format", "colmap", "-o", str(tmp_path / "x")]) == 2
    assert "neither a `run` output folder" in capsys.readouterr().err
    assert cli.main(["export", str(run_dir), "--format", "colmap", "-o", str(run_dir)]) == 2
    assert "is not empty" in capsys.readouterr().err
