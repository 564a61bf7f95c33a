"""Bags for `lingbot-map-ros run` with several cameras, shared by test/tools/test_tools_run.py and
scripts/run_digest.py (the refactor digest runs the very bag the tests run)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from lingbot_map_ros.tools.bags.bag_io import IMAGE, BagWriter, image_message


def write_two_camera_bag(path: Path, images: list[np.ndarray], start_ns: int) -> Path:
    """`/front/image` at 10 Hz (16 frames: images[0:16]) and `/rear/image` at 5 Hz (8 frames: images[23]
    down to images[16], 1 ms after each even front frame), interleaved by log time; `images` [>= 24] rgb8."""
    with BagWriter(path, storage="sqlite3") as writer:
        ts = writer.typestore
        for i in range(16):
            stamp = start_ns + i * 100_000_000
            writer.write("/front/image", IMAGE, image_message(ts, images[i], stamp, "front_optical"), stamp)
            if i % 2 == 0:
                rear = stamp + 1_000_000
                msg = image_message(ts, images[23 - i // 2], rear, "rear_optical")
                writer.write("/rear/image", IMAGE, msg, rear)
    return path
