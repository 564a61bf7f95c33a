"""`run BAG`: the engine on a bag without DDS (tiny preset, synthetic weights, CPU): outputs, determinism."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from lingbot_map_ros.engine.writers import read_ply, read_tum
from lingbot_map_ros.tools import cli
from lingbot_map_ros.tools.make_bag import MakeBagConfig, image_files, read_images, write_camera_bag

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
LOOP = SHARED / "data" / "loop"
FRAMES = 30
START_NS = 1_700_000_000_000_000_000

pytestmark = pytest.mark.skipif(not LOOP.is_dir(), reason="../shared/data/loop is missing")


@pytest.fixture(scope="module")
def bag(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("run") / "loop"
    write_camera_bag(MakeBagConfig(output=path, storage="sqlite3", rate_hz=10.0, start_time_ns=START_NS,
                                   compressed="png"),
                     read_images(image_files(LOOP)[:FRAMES], 160), total=FRAMES)
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
