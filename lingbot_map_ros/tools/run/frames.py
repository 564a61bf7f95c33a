"""`run --keep-frames`: the posed frames' images and intrinsics beside the trajectory, for `export`.

Writes into the run's output folder, one entry per line of `trajectory.tum` and in its order:

    frames/000000.png ...   the original RGB image of each posed frame (lossless PNG)
    frames.json             {"frames": [{"file": "frames/000000.png", "stamp_s": 1.7e9, "width": W,
                              "height": H, "intrinsics": [[fx, 0, cx], [0, fy, cy], [0, 0, 1]]}, ...]}

`intrinsics` is the model's pinhole estimate for that frame in pixels of the image as written
(`FrameResult.intrinsics`); it changes a little from frame to frame.
"""

from __future__ import annotations

import json
from pathlib import Path

import cv2
import numpy as np

from lingbot_map_ros.tools.run.report import write_json

FRAMES_JSON = "frames.json"
FRAMES_DIR = "frames"


class FrameKeeper:
    """Writes the posed frames of one run (module doc); `add` once per trajectory line, `close` at the end."""

    def __init__(self, output_dir: Path) -> None:
        self.output_dir = output_dir
        self.entries: list[dict[str, object]] = []
        (output_dir / FRAMES_DIR).mkdir(parents=True, exist_ok=True)

    def add(self, stamp_s: float, rgb: np.ndarray, intrinsics: np.ndarray) -> None:
        """One posed frame: `rgb` [H, W, 3] uint8, `intrinsics` [3, 3] pixels of `rgb`."""
        name = f"{FRAMES_DIR}/{len(self.entries):06d}.png"
        if not cv2.imwrite(str(self.output_dir / name), cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR)):
            raise RuntimeError(f"could not write {self.output_dir / name}")
        self.entries.append(
            {
                "file": name,
                "stamp_s": float(stamp_s),
                "width": int(rgb.shape[1]),
                "height": int(rgb.shape[0]),
                "intrinsics": np.asarray(intrinsics, np.float64).tolist(),
            }
        )

    def close(self) -> Path:
        """Write `frames.json`; returns its path."""
        return write_json(self.output_dir / FRAMES_JSON, {"frames": self.entries})


def read_frames(output_dir: Path) -> list[dict[str, object]] | None:
    """The entries of a run's `frames.json` (None: the run kept no frames). ValueError for an entry without
    a file, size or [3, 3] intrinsics."""
    path = output_dir / FRAMES_JSON
    if not path.is_file():
        return None
    entries = json.loads(path.read_text())["frames"]
    for i, entry in enumerate(entries):
        if not {"file", "stamp_s", "width", "height", "intrinsics"} <= set(entry):
            raise ValueError(f"{path}: frame {i} lacks file, stamp_s, width, height or intrinsics")
        if np.asarray(entry["intrinsics"], np.float64).shape != (3, 3):
            raise ValueError(f"{path}: frame {i}'s intrinsics are not 3x3")
    return entries
