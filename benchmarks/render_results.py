"""Render docs/benchmarks.md's tables from the results files under `benchmarks/results/` (issue 22).

Each file is written by a benchmark's `--record` (benchmarks/results.py): `startup_*.json` by startup.py,
`node_e2e_*.json` by node_e2e.py, `multi_camera_*.json` by multi_camera.py. Prints Markdown, one table per
file, one row per run (rate or camera count), with the date, commit and device of each run:

    python benchmarks/render_results.py [benchmarks/results/*.json]
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path

from results import RESULTS_DIR


def _f(value: object, digits: int = 1) -> str:
    return "–" if value is None else f"{value:.{digits}f}" if isinstance(value, float) else str(value)


def _run_cells(run: dict) -> list[str]:
    return [run["date"][:16].replace("T", " "), f"`{run['commit']}`", run["device"]]


def startup_rows(run: dict) -> list[list[str]]:
    r = run["result"]
    a = r["args"]
    windows = r.get("latency_windows", {})
    first, last = windows.get("first", {}), windows.get("last", {})
    ratio = windows.get("p99_last_over_first", {}).get("ratio")
    return [
        _run_cells(run)
        + [
            a["push"],
            str(a.get("depth_every_n", 1)),
            str(r["frames"]),
            f"{_f(r['ms_per_frame_steady'], 2)} ({_f(r['fps_steady'])})",
            f"{_f(r['latency_ms_p50'])} / {_f(r['latency_ms_p99'])}",
            f"{_f(first.get('p99'))} / {_f(last.get('p99'))} ({_f(ratio, 3)})",
            str(r.get("reanchors", "–")),
            _f(r.get("first_pose_since_process_start_s")),
            _f(r.get("process_peak_gib"), 2),
        ]
    ]


def node_rows(run: dict) -> list[list[str]]:
    r = run["result"]
    common = ("model.compile_cache_dir", "model.warmup_image_size")  # the benchmark's own settings
    settings = ", ".join(f"{k}={v}" for k, v in r.get("params", {}).items() if k not in common) or "defaults"
    rows = []
    for hz, rate in r["rates"].items():
        lat = rate["odometry_latency_ms"]
        rows.append(
            _run_cells(run)
            + [
                settings,
                hz,
                _f(rate["fps_posed"], 2),
                f"{rate['dropped']} / {rate['published']}",
                f"{_f(lat.get('p50'))} / {_f(lat.get('p90'))} / {_f(lat.get('p99'))}",
                _f(rate["gpu_memory_gib"].get("peak_allocated"), 2),
                _f(r.get("process_start_to_first_pose_s")),
            ]
        )
    return rows


def multi_camera_rows(run: dict) -> list[list[str]]:
    rows = []
    for row in run["result"]["rows"]:
        rows.append(
            _run_cells(run)
            + [
                row["backend"],
                str(row["cameras"]),
                str(row.get("max_batch", "–")),
                _batched_steps(row),
                _f(row["aggregate_fps"], 2),
                _vs_single(row),
                _f(row["camera_fps"], 2),
                f"{_f(row['p50_ms'])} / {_f(row['p99_ms'])}",
                _f(row["peak_gib"], 2),
            ]
        )
    return rows


def _batched_steps(row: dict) -> str:
    """How the batched steps of a multi_camera row ran: CUDA graphs (issue 33), eager, or – (one camera, or a
    run recorded before the column existed); ", pipelined" for rounds pipelined one deep (issue 33)."""
    pipelined = ", pipelined" if row.get("overlap") else ""
    if row["cameras"] == 1 or "batch_graphs" not in row:
        return "–" + pipelined
    return ("graphs" if row["batch_graphs"] else "eager") + pipelined


def _vs_single(row: dict) -> str:
    """Aggregate / one camera's `push` (and / its `push_overlapped`, where measured)."""
    overlapped = row.get("vs_single_overlapped")
    push = _f(row.get("vs_single"), 2)
    return push if overlapped is None else f"{push} / {_f(overlapped, 2)}"


RUN_HEAD = ["date (UTC)", "commit", "device"]
TABLES: dict[str, tuple[list[str], Callable[[dict], list[list[str]]]]] = {
    "startup": (
        RUN_HEAD
        + [
            "push",
            "depth every n",
            "frames",
            "steady ms/frame (FPS)",
            "latency p50 / p99 ms",
            "p99 first / last window ms (ratio)",
            "re-anchors",
            "process start → first pose s",
            "peak GiB",
        ],
        startup_rows,
    ),
    "node_e2e": (
        RUN_HEAD
        + [
            "parameters",
            "camera Hz",
            "FPS posed",
            "dropped / published",
            "odometry latency p50 / p90 / p99 ms",
            "peak GiB",
            "first pose s",
        ],
        node_rows,
    ),
    "multi_camera": (
        RUN_HEAD
        + [
            "backend",
            "cameras",
            "max batch",
            "batched steps",
            "aggregate FPS",
            "x single-stream (push / overlapped)",
            "FPS per camera",
            "p50 / p99 ms",
            "peak GiB",
        ],
        multi_camera_rows,
    ),
}


def render(path: Path) -> str:
    """One results file as a Markdown table (its kind from the file name's prefix)."""
    kind = next((k for k in TABLES if path.name.startswith(k)), None)
    if kind is None:
        raise ValueError(f"{path.name}: not a results file of {sorted(TABLES)}")
    head, rows_of = TABLES[kind]
    lines = [f"**{path.name}**", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for run in json.loads(path.read_text())["runs"]:
        lines += ["| " + " | ".join(row) + " |" for row in rows_of(run)]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("files", nargs="*", type=Path)
    args = parser.parse_args()
    for path in args.files or sorted(RESULTS_DIR.glob("*.json")):
        print(render(path))


if __name__ == "__main__":
    main()
