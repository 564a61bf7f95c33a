"""`run BAG`: the engine on a bag without DDS (tiny preset, synthetic weights, CPU): outputs, determinism."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from run_bags import write_two_camera_bag

from lingbot_map_ros.engine.mapping.writers import read_ply, read_tum
from lingbot_map_ros.tools import cli
from lingbot_map_ros.tools.bags.make_bag import MakeBagConfig, image_files, read_images, write_camera_bag

SHARED = Path(__file__).resolve().parents[2].parent / "shared"
LOOP = SHARED / "data" / "loop"
FRAMES = 30
START_NS = 1_700_000_000_000_000_000

pytestmark = pytest.mark.skipif(not LOOP.is_dir(), reason="../shared/data/loop is missing")


@pytest.fixture(scope="module")
def bag(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("run") / "loop"
    write_camera_bag(
        MakeBagConfig(output=path, storage="sqlite3", rate_hz=10.0, start_time_ns=START_NS, compressed="png"),
        read_images(image_files(LOOP)[:FRAMES], 160),
        total=FRAMES,
    )
    return path


def _run(bag: Path, out: Path, *extra: str) -> dict[str, object]:
    assert cli.main(["run", str(bag), "-o", str(out), "--width", "112", *extra]) == 0
    return json.loads((out / "summary.json").read_text())


def test_run_twice_gives_identical_trajectories_and_complete_outputs(bag: Path, tmp_path: Path) -> None:
    first = _run(bag, tmp_path / "a")
    second = _run(bag, tmp_path / "b")
    for name in ("trajectory.tum", "map.ply"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()

    assert first["frames"] == first["posed"] == FRAMES and first["dropped"] == 0
    assert first["keyframes"] == FRAMES and second["posed"] == FRAMES
    assert first["session"]["cache"]["kv_cache"]["frames_stored"] == FRAMES
    assert first["fps"] > 0 and first["latency_ms"]["max"] >= first["latency_ms"]["p50"] > 0

    stamps, rows = read_tum(tmp_path / "a" / "trajectory.tum")
    np.testing.assert_allclose(stamps, START_NS / 1e9 + 0.1 * np.arange(FRAMES), atol=1e-6)
    np.testing.assert_allclose(np.linalg.norm(rows[:, 3:], axis=1), 1.0, atol=1e-6)
    xyz, rgb = read_ply(tmp_path / "a" / "map.ply")
    assert len(xyz) == first["map_points"] > 100 and np.isfinite(xyz).all() and rgb.dtype == np.uint8
    assert (tmp_path / "a" / "run.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_different_seed_changes_the_synthetic_weights_and_the_trajectory(bag: Path, tmp_path: Path) -> None:
    _run(bag, tmp_path / "a", "--max-frames", "10")
    _run(bag, tmp_path / "b", "--max-frames", "10", "--seed", "1")
    _, rows_a = read_tum(tmp_path / "a" / "trajectory.tum")
    _, rows_b = read_tum(tmp_path / "b" / "trajectory.tum")
    assert rows_a.shape == rows_b.shape == (10, 7) and not np.allclose(rows_a, rows_b)


def test_frames_left_waiting_for_the_anchor_phase_count_as_dropped(bag: Path, tmp_path: Path) -> None:
    summary = _run(bag, tmp_path / "short", "--max-frames", "5")
    assert (summary["frames"], summary["posed"], summary["dropped"]) == (5, 0, 5)
    assert summary["session"]["pending_anchor_frames"] == 5
    assert not (tmp_path / "short" / "run.png").exists()


def test_run_rejects_a_missing_topic(bag: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["run", str(bag), "-o", str(tmp_path / "x"), "--topic", "/front/image"]) == 2
    assert "topic /front/image not in bag" in capsys.readouterr().err


def test_keyframe_interval_stores_every_other_streaming_frame(bag: Path, tmp_path: Path) -> None:
    summary = _run(bag, tmp_path / "kf", "--max-frames", "12", "--keyframe-interval", "2")
    assert (summary["posed"], summary["keyframes"]) == (12, 8 + 2)  # anchors + streaming frames 0 and 2
    assert summary["session"]["frames_stored"] == 10


def test_save_then_load_continues_in_the_saved_map_frame(bag: Path, tmp_path: Path) -> None:
    """run A saves after 12 frames; run B loads it and gets frame 8 (the first after A's anchor phase, in a
    bag that starts there) with exactly A's pose, and starts from A's map."""
    first = _run(bag, tmp_path / "a", "--max-frames", "12", "--save", str(tmp_path / "sessions" / "a"))
    assert (tmp_path / "sessions" / "a" / "manifest.json").is_file()
    tail = tmp_path / "tail"
    write_camera_bag(
        MakeBagConfig(
            output=tail,
            storage="sqlite3",
            rate_hz=10.0,
            start_time_ns=START_NS + 800_000_000,
            compressed="png",
        ),
        read_images(image_files(LOOP)[8:FRAMES], 160),
        total=FRAMES - 8,
    )
    second = _run(tail, tmp_path / "b", "--max-frames", "1", "--load", str(tmp_path / "sessions" / "a"))
    assert second["posed"] == 1 and second["map_points"] >= first["map_points"]
    stamps_a, rows_a = read_tum(tmp_path / "a" / "trajectory.tum")
    stamps_b, rows_b = read_tum(tmp_path / "b" / "trajectory.tum")
    assert stamps_b[0] == stamps_a[8]
    np.testing.assert_array_equal(rows_b[0], rows_a[8])


def test_load_refuses_a_session_of_another_width(
    bag: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _run(bag, tmp_path / "a", "--max-frames", "9", "--save", str(tmp_path / "s"))
    argv = ["run", str(bag), "-o", str(tmp_path / "b"), "--width", "56", "--load", str(tmp_path / "s")]
    assert cli.main(argv) == 2
    assert "incompatible: image_width is 112 in the session, 56 here" in capsys.readouterr().err
    assert not (tmp_path / "b" / "trajectory.tum").exists()


@pytest.fixture(scope="module")
def two_camera_bag(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`/front/image` at 10 Hz (16 frames) and `/rear/image` at 5 Hz (8 frames), interleaved by log time."""
    images = list(read_images(image_files(LOOP)[:24], 160))
    return write_two_camera_bag(tmp_path_factory.mktemp("run_cameras") / "two", images, START_NS)


def test_run_maps_several_camera_topics_as_separate_single_runs(two_camera_bag: Path, tmp_path: Path) -> None:
    both = _run(two_camera_bag, tmp_path / "both", "--scale-frames", "4")  # every camera topic of the bag
    assert both["topics"] == ["/front/image", "/rear/image"] and both["frames"] == 24
    front, rear = both["cameras"]["front"], both["cameras"]["rear"]
    assert (front["frames"], front["posed"], rear["frames"], rear["posed"]) == (16, 16, 8, 8)
    stamps, _ = read_tum(tmp_path / "both" / "rear" / "trajectory.tum")
    np.testing.assert_allclose(stamps, START_NS / 1e9 + 0.2 * np.arange(8) + 1e-3, atol=1e-6)
    explicit = _run(
        two_camera_bag,
        tmp_path / "explicit",
        "--scale-frames",
        "4",
        "--topics",
        "/rear/image",
        "/front/image",
    )
    assert list(explicit["cameras"]) == ["rear", "front"]
    for camera in ("front", "rear"):  # one model, a session each: as if each camera ran alone
        alone = _run(two_camera_bag, tmp_path / camera, "--scale-frames", "4", "--topic", f"/{camera}/image")
        assert alone["posed"] == both["cameras"][camera]["posed"]
        for name in ("trajectory.tum", "map.ply"):
            expected = (tmp_path / camera / name).read_bytes()
            assert (tmp_path / "both" / camera / name).read_bytes() == expected, (camera, name)
            assert (tmp_path / "explicit" / camera / name).read_bytes() == expected, (camera, name)


@pytest.mark.parametrize("window", ["0", "1025", "2.5"])
def test_run_rejects_a_sliding_window_out_of_range_at_the_flag(
    bag: Path, tmp_path: Path, window: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["run", str(bag), "-o", str(tmp_path / "x"), "--sliding-window", window])
    assert exit_info.value.code == 2 and "--sliding-window" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()
