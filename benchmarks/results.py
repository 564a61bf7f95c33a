"""Benchmark results as data (issue 22): each run appended to a JSON file under `benchmarks/results/`.

A file is `{"runs": [run, ...]}`; a run is `{"date", "commit", "command", "device", "result"}` (UTC date of
the run, the git commit of the code measured, the command line, the device's name, and what the benchmark
reported). `benchmarks/render_results.py` renders docs/benchmarks.md's tables from these files. On the device
machine the code travels without `.git`: the commit comes from `$LINGBOT_COMMIT` or a `COMMIT` file at the
repository root (the device script writes it), else `git rev-parse`.
"""

from __future__ import annotations

import datetime
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS_DIR = REPO / "benchmarks" / "results"


def commit() -> str:
    """The commit of the code that runs (see the module doc); "unknown" when none can be found."""
    if os.environ.get("LINGBOT_COMMIT"):
        return os.environ["LINGBOT_COMMIT"]
    stamp = REPO / "COMMIT"
    if stamp.is_file():
        return stamp.read_text().strip()
    try:
        out = subprocess.run(
            ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        )
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return out.stdout.strip() or "unknown"


def device_name(device: str) -> str:
    """`torch.cuda.get_device_name` for a CUDA device, else the device string."""
    if device.startswith("cuda"):
        import torch

        if torch.cuda.is_available():
            return torch.cuda.get_device_name(torch.device(device))
    return device


def record(path: Path, result: object, device: str, argv: list[str] | None = None) -> dict:
    """Append one run (`result`, JSON-able) to `path` (created with its folder); returns the run."""
    run = {
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "commit": commit(),
        "command": shlex.join(["python3", *(sys.argv if argv is None else argv)]),
        "device": device_name(device),
        "result": result,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    runs = json.loads(path.read_text())["runs"] if path.is_file() else []
    path.write_text(json.dumps({"runs": [*runs, run]}, indent=1) + "\n")
    return run
