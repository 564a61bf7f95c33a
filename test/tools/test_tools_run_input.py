"""`run BAG` on damaged input (tiny preset, synthetic weights, CPU; no shared data needed)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from lingbot_map_ros.tools import cli
from lingbot_map_ros.tools.bags.bag_io import IMAGE, BagWriter, image_message
from lingbot_map_ros.tools.bags.synthetic_scene import SceneConfig, render

START_NS = 1_700_000_000_000_000_000


def test_a_corrupt_frame_is_skipped_and_counted(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 30: one undecodable message ended `run` with no output at all."""
    rgb = render(SceneConfig(width=64, height=48, frames=2), np.eye(4))[0]
    with BagWriter(tmp_path / "corrupt") as writer:
        for i in range(8):
            stamp = START_NS + i * 100_000_000
            if i == 2:
                writer.write_raw("/camera/image_raw", IMAGE, b"\x00\x01\x00\x00garbage", stamp)
            else:
                message = image_message(writer.typestore, rgb, stamp, "cam")
                writer.write("/camera/image_raw", IMAGE, message, stamp)
    out = tmp_path / "out"
    assert (
        cli.main(["run", str(tmp_path / "corrupt"), "-o", str(out), "--width", "56", "--scale-frames", "4"])
        == 0
    )
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["frames"], summary["skipped_frames"]) == (7, 1), summary
    assert summary["skipped"][0].startswith("message 2 of /camera/image_raw"), summary["skipped"]
    assert summary["posed"] + summary["dropped"] == 7 and (out / "trajectory.tum").is_file()
