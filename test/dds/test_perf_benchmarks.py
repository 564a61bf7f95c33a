"""The benchmark scripts of issue 7 run end to end on the CPU (tiny preset / synthetic frames), so they cannot
rot between GPU sessions: `benchmarks/e2e.py` (check, stage split, session runs, JSON and PNGs) and
`benchmarks/node_overhead.py` (real rclpy publishers, DDS environment from conftest)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]


def run(args: list[str], env: dict[str, str] | None = None) -> str:
    environment = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1", **(env or {}))
    done = subprocess.run(
        [sys.executable, *args], cwd=REPO, env=environment, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


def test_e2e_smoke_on_cpu(tmp_path: Path) -> None:
    out = run(
        [
            "benchmarks/e2e.py",
            "--device",
            "cpu",
            "--preset",
            "tiny",
            "--height",
            "28",
            "--width",
            "56",
            "--frames",
            "10",
            "--plain-frames",
            "6",
            "--check-frames",
            "3",
            "--split-frames",
            "2",
            "--window",
            "3",
            "--max-window",
            "6",
            "--anchors",
            "3",
            "--keyframe-interval",
            "2",
            "--out",
            str(tmp_path),
        ]
    )
    summary = json.loads((tmp_path / "e2e.json").read_text())
    assert summary["check"]["fast"] == {"pose_enc": 0.0, "depth": 0.0, "depth_conf": 0.0}
    assert {"patch embed", "frame blocks", "global blocks", "attention", "depth head", "camera head"} <= set(
        summary["split"]["plain"]
    )
    runs = {r["mode"]: r for r in summary["stream"]}
    assert runs["fast"]["frames"] == 10 and runs["plain"]["frames"] == 6
    assert runs["fast"]["keyframe_interval"] == 2
    latency = np.load(tmp_path / "e2e_runs.npz")["fast_latency_ms"]
    assert latency.shape == (10 - 3,) and (latency > 0).all()  # one sample per streaming frame
    for png in ("latency.png", "memory.png", "stages.png"):
        assert (tmp_path / png).stat().st_size > 1000
    assert "| fast | 10 | 2 |" in out


@pytest.mark.dds
def test_node_overhead_runs(dds_env: dict[str, str]) -> None:
    out = run(
        ["benchmarks/node_overhead.py", "--frames", "8", "--warmup", "2", "--set", "map_stride=4"], dds_env
    )
    assert "map_stride 4" in out
    for stage in (
        "image_to_rgb",
        "queue handoff x2",
        "publish: pose outputs",
        "pose path per frame",
        "map thread per keyframe",
        "timer: ~/path publish",
    ):
        assert stage in out
    assert "8 works queued, 0 dropped" in out and "drained at the end: True" in out  # every timed keyframe


@pytest.mark.dds
def test_node_e2e_with_two_cameras_reports_each_camera(dds_env: dict[str, str], tmp_path: Path) -> None:
    """benchmarks/node_e2e.py --cameras front,rear (issue 33's node check): the node's `cameras`, a publisher
    per camera, and per camera its frames, % posed, latencies and its /diagnostics FPS and latency."""
    run(
        [
            "benchmarks/node_e2e.py", "--set", "model.preset=tiny", "--set", "model.device=cpu",
            "--set", "model.image_width=56", "--width", "74", "--height", "42", "--rates", "4",
            "--seconds", "3", "--settle-s", "3", "--cameras", "front,rear", "--out", str(tmp_path),
        ],
        dds_env,
    )  # fmt: skip
    report = json.loads((tmp_path / "node_e2e.json").read_text())
    assert report["params"]["cameras"] == ["front", "rear"] and report["node_exit_code"] == 0
    rate = report["rates"]["4"]
    cameras = rate["cameras"]
    assert list(cameras) == ["front", "rear"]
    for row in cameras.values():
        assert row["published"] >= 8 and 0 < row["posed_pct"] <= 100
        assert row["odometry_latency_ms"]["count"] > 0 and float(row["diagnostics_fps"]) > 0
        assert float(row["diagnostics_latency_ms_p99"]) >= float(row["diagnostics_latency_ms_mean"]) > 0
    assert rate["published"] == sum(row["published"] for row in cameras.values())
    assert rate["posed_pct_min"] == min(row["posed_pct"] for row in cameras.values())
    assert {"/lingbot_map/front: mapping", "/lingbot_map/rear: mapping"} <= set(report["diagnostics"])


def test_multi_camera_smoke_on_cpu(tmp_path: Path) -> None:
    """benchmarks/multi_camera.py: 1 and 2 tiny cameras, unpipelined and pipelined rounds (issue 33), a table
    row each, batches of 2 for 2 cameras (one camera: the single-stream path), and both single-stream rows
    (`push`, `push_overlapped`) of the same process."""
    out = run(
        [
            "benchmarks/multi_camera.py", "--device", "cpu", "--preset", "tiny", "--height", "28", "--width",
            "56", "--frames", "3", "--cameras", "1,2", "--anchors", "2", "--window", "2", "--max-window", "4",
            "--warmup", "1", "--max-stored-frames", "4", "--overlap", "both",
            "--json", str(tmp_path / "runs.json"), "--record", str(tmp_path / "multi_camera_cpu.json"),
        ]
    )  # fmt: skip
    runs = json.loads((tmp_path / "runs.json").read_text())
    assert [(r["cameras"], r["overlap"]) for r in runs] == [(1, False), (1, True), (2, False), (2, True)]
    assert runs[2]["batches"] == runs[3]["batches"] == {"2": 4}  # warm-up + timed rounds
    assert runs[0]["batches"] == {}  # a set of one camera runs the single-stream path (no batched step)
    assert all(r["aggregate_fps"] > 0 and r["p99_ms"] >= r["p50_ms"] > 0 for r in runs)
    assert all(r["single_stream_fps"] > 0 and r["single_overlapped_fps"] > 0 for r in runs)
    assert runs[2]["pool_gib"] > runs[0]["pool_gib"] > 0
    assert "| 2 | auto | graphs | pipelined |" in out and "| 2 | auto | graphs | sync |" in out
    table = run(["benchmarks/render_results.py", str(tmp_path / "multi_camera_cpu.json")])
    assert "| auto | 2 | 8 | graphs, pipelined |" in table and "| cpu |" in table


def test_results_are_recorded_and_rendered(tmp_path: Path) -> None:
    """Issue 22: startup.py appends its runs (date, commit, command, device) to a results file, and
    render_results.py makes the docs' tables from it."""
    results = tmp_path / "startup_cpu.json"
    args = [
        "benchmarks/startup.py", "--device", "cpu", "--preset", "tiny", "--height", "28", "--width", "56",
        "--image-width", "56", "--window", "2", "--max-window", "4", "--no-compile", "--no-warmup",
        "--frames", "6", "--steady-from", "1", "--window-frames", "2", "--depth-every-n", "2",
        "--record", str(results),
    ]  # fmt: skip
    run(args)
    run(args)  # appended, not overwritten
    runs = json.loads(results.read_text())["runs"]
    assert len(runs) == 2 and runs[0]["device"] == "cpu" and runs[0]["commit"]
    assert runs[0]["command"].startswith("python3 benchmarks/startup.py --device cpu")
    windows = runs[0]["result"]["latency_windows"]
    assert windows["first"]["frames"] == "1-2" and windows["last"]["frames"] == "4-5"
    table = run(["benchmarks/render_results.py", str(results)])
    rows = [line for line in table.splitlines() if line.startswith("| 20")]
    assert len(rows) == 2 and all("| overlapped | 2 | 6 |" in row for row in rows), table
