"""`lingbot-map-ros evaluate BAG REFERENCE`: a sequence's ATE with and without loop closure (issue 23). The
real (tiny, synthetic-weight) model on the CPU: the wiring only, no accuracy claim."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from lingbot_map_ros.engine.mapping.writers import read_tum
from lingbot_map_ros.tools import cli
from lingbot_map_ros.tools.bags.synthetic_scene import SceneConfig, write_scene_bag


def test_evaluate_reports_ate_with_and_without_loop_closure(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    scene = write_scene_bag(
        SceneConfig(width=96, height=72, frames=10, supersample=1),
        tmp_path / "scene",
        tmp_path / "gt.tum",
        storage="sqlite3",
        rate_hz=8.0,
    )
    out = tmp_path / "eval"
    argv = ["evaluate", str(scene.bag.path), str(scene.ground_truth), "-o", str(out), "--width", "56"]
    assert cli.main([*argv, "--scale-frames", "2", "--sliding-window", "8"]) == 0
    summary = json.loads((out / "evaluate.json").read_text())
    assert summary["matched"] == summary["posed"] >= 8
    assert math.isfinite(summary["ate_without"]) and math.isfinite(summary["ate_with"])
    assert summary["loop_closure"]["keyframes"] >= 1
    stream, closed = read_tum(out / "trajectory_stream.tum"), read_tum(out / "trajectory_loop_closed.tum")
    np.testing.assert_array_equal(stream[0], closed[0])  # the same stamps, one pose each
    assert "ATE without loop closure" in capsys.readouterr().out


def test_evaluate_refuses_a_bad_reference_before_running_the_sequence(
    tmp_path: Path,
    capsys,  # noqa: ANN001
    monkeypatch,  # noqa: ANN001
) -> None:
    """Issue 30: the reference was read only after the whole sequence had run."""
    from lingbot_map_ros.tools.evaluation import sequence as evaluate_sequence

    def no_model(config: object) -> None:
        raise AssertionError("evaluate built the model before checking its reference")

    monkeypatch.setattr(evaluate_sequence, "build_session", no_model)
    scene = write_scene_bag(
        SceneConfig(width=32, height=32, frames=3, supersample=1), tmp_path / "scene", tmp_path / "gt.tum"
    )
    (tmp_path / "empty.tum").write_text("")
    for reference, words in (
        (tmp_path / "empty.tum", "holds no poses"),
        (tmp_path / "nope", "does not exist"),
    ):
        argv = ["evaluate", str(scene.bag.path), str(reference), "-o", str(tmp_path / "eval")]
        assert cli.main(argv) == 2, reference
        assert words in capsys.readouterr().err
    assert not (tmp_path / "eval").exists()
