"""`lingbot-map-ros run` in an install without gtsam (issue 29): a child process whose Python cannot import it
(test/without_module.py) maps a small synthetic bag to the end. (evo is a dependency of the CLI's evaluation
commands, listed in the install lines; the node imports neither: test/dds/test_node_without_gtsam.py.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
from without_module import hide_modules

from lingbot_map_ros.tools.bags.make_bag import MakeBagConfig, write_camera_bag

FRAMES = 8


def test_run_maps_a_bag_without_gtsam(tmp_path: Path) -> None:
    bag = tmp_path / "bag"
    frames = np.random.default_rng(0).integers(0, 256, (FRAMES, 48, 64, 3), dtype=np.uint8)
    write_camera_bag(
        MakeBagConfig(output=bag, storage="sqlite3", rate_hz=10.0, start_time_ns=10**18), list(frames)
    )
    env = {**os.environ, "PYTHONPATH": hide_modules(tmp_path / "hook", "gtsam")}
    out = tmp_path / "out"
    argv = ["-m", "lingbot_map_ros.tools.cli", "run", str(bag), "-o", str(out), "--width", "56"]
    done = subprocess.run([sys.executable, *argv], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["frames"] == FRAMES
    hidden = subprocess.run(
        [sys.executable, "-c", "import gtsam"], env=env, capture_output=True, text=True, timeout=120
    )
    assert "hidden by the test" in hidden.stderr  # the hook was in force for the child
