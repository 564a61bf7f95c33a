"""`lingbot-map-ros make-bag`: a folder of images or a video file -> a rosbag2 camera bag.

Frames are stamped at a fixed rate from `start_time`; header stamp and bag log time are equal, as if the
bag had been recorded live. Images go out as sensor_msgs/Image rgb8 or sensor_msgs/CompressedImage
(jpeg/png) with a sensor_msgs/CameraInfo per frame.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np
from tqdm import tqdm

from lingbot_map_ros.tools.bags.bag_io import (
    CAMERA_INFO,
    COMPRESSED_IMAGE,
    IMAGE,
    STORAGE_PLUGINS,
    BagWriter,
    camera_info_message,
    compressed_message,
    image_message,
)

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".tif", ".tiff", ".webp")


@dataclass(frozen=True)
class MakeBagConfig:
    """How frames become messages. `compressed` is None (raw rgb8 Image), "jpeg" or "png"."""

    output: Path
    storage: str = "mcap"
    rate_hz: float = 10.0
    frame_id: str = "camera_optical_frame"
    topic: str = "/camera/image_raw"
    info_topic: str | None = "/camera/camera_info"
    compressed: str | None = None
    start_time_ns: int | None = None  # None: now

    def __post_init__(self) -> None:
        if self.rate_hz <= 0:
            raise ValueError(f"rate must be > 0 Hz, got {self.rate_hz}")
        if self.compressed not in (None, "jpeg", "png"):
            raise ValueError(f"compressed must be None, 'jpeg' or 'png', got {self.compressed!r}")
        if self.storage not in STORAGE_PLUGINS:
            raise ValueError(f"storage must be one of {sorted(STORAGE_PLUGINS)}, got {self.storage!r}")


@dataclass(frozen=True)
class MakeBagResult:
    """What was written: the bag folder, frame count, image size (width, height) and first/last stamps."""

    path: Path
    frames: int
    width: int
    height: int
    first_stamp_ns: int
    last_stamp_ns: int


def image_files(folder: Path) -> list[Path]:
    """Image files of `folder` in name order; ValueError if it is missing or holds none."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ValueError(f"image folder {folder} does not exist or is not a folder")
    files = sorted(p for p in folder.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
    if not files:
        raise ValueError(f"image folder {folder} holds no images (expected files ending in {IMAGE_SUFFIXES})")
    return files


def read_images(files: Iterable[Path], width: int | None = None) -> Iterator[np.ndarray]:
    """RGB uint8 [H, W, 3] per file, resized to `width` (aspect kept) when given."""
    for path in files:
        bgr = cv2.imread(str(path), cv2.IMREAD_COLOR)
        if bgr is None:
            raise ValueError(f"cannot read image {path} (not an image OpenCV can decode)")
        yield resize_to_width(bgr[..., ::-1], width)


def read_video(path: Path, width: int | None = None, every: int = 1) -> Iterator[np.ndarray]:
    """RGB uint8 frames of a video file (every `every`-th frame), resized to `width` when given."""
    if not Path(path).is_file():
        raise ValueError(f"video {path} does not exist")
    capture = cv2.VideoCapture(str(path))
    try:
        if not capture.isOpened():
            raise ValueError(f"cannot open video {path} (not a video, or a codec OpenCV lacks)")
        index, produced = 0, 0
        while True:
            ok, bgr = capture.read()
            if not ok:
                break
            if index % every == 0:
                produced += 1
                yield resize_to_width(bgr[..., ::-1], width)
            index += 1
        if produced == 0:
            raise ValueError(f"video {path} has no decodable frames")
    finally:
        capture.release()


def video_rate(path: Path) -> float | None:
    """Frames per second the container declares, or None when it declares none.
    ValueError when OpenCV cannot open `path` as a video."""
    capture = cv2.VideoCapture(str(path))
    try:
        if not capture.isOpened():
            raise ValueError(f"cannot open video {path} (not a video, or a codec OpenCV lacks)")
        fps = capture.get(cv2.CAP_PROP_FPS)
    finally:
        capture.release()
    return fps if fps and fps > 0 else None


def resize_to_width(rgb: np.ndarray, width: int | None) -> np.ndarray:
    """`rgb` scaled (area filter) to `width` pixels, height rounded to keep the aspect ratio."""
    if width is None or width == rgb.shape[1]:
        return np.ascontiguousarray(rgb)
    if width < 16:
        raise ValueError(f"width must be >= 16 pixels, got {width}")
    height = max(1, round(rgb.shape[0] * width / rgb.shape[1]))
    return cv2.resize(np.ascontiguousarray(rgb), (width, height), interpolation=cv2.INTER_AREA)


def write_camera_bag(
    config: MakeBagConfig, frames: Iterable[np.ndarray], k: np.ndarray | None = None, total: int | None = None
) -> MakeBagResult:
    """Write `frames` (RGB uint8, all one size) to a new bag; `k` [3, 3] pixels or None (uncalibrated)."""
    period_ns = round(1e9 / config.rate_hz)
    start = time.time_ns() if config.start_time_ns is None else config.start_time_ns
    msgtype = IMAGE if config.compressed is None else COMPRESSED_IMAGE
    count, size, stamp = 0, None, start
    with BagWriter(config.output, config.storage) as bag:
        for rgb in tqdm(frames, total=total, desc="make-bag", unit="frame", file=sys.stderr):
            if size is None:
                size = rgb.shape[:2]
            elif rgb.shape[:2] != size:
                raise ValueError(
                    f"frame {count} is {rgb.shape[1]}x{rgb.shape[0]}, the first was "
                    f"{size[1]}x{size[0]}; pass --width to resize all frames"
                )
            stamp = start + count * period_ns
            if config.compressed is None:
                msg = image_message(bag.typestore, rgb, stamp, config.frame_id)
            else:
                msg = compressed_message(bag.typestore, rgb, stamp, config.frame_id, config.compressed)
            bag.write(config.topic, msgtype, msg, stamp)
            if config.info_topic:
                height, width = rgb.shape[:2]
                info = camera_info_message(bag.typestore, width, height, k, stamp, config.frame_id)
                bag.write(config.info_topic, CAMERA_INFO, info, stamp)
            count += 1
    if size is None:
        raise ValueError("no frames to write")
    return MakeBagResult(config.output, count, size[1], size[0], start, stamp)


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Register `make-bag`."""
    p = subparsers.add_parser(
        "make-bag",
        help="folder of images or a video file -> rosbag2 camera bag",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("source", type=Path, help="folder of images (name order) or a video file")
    p.add_argument("-o", "--output", type=Path, required=True, help="bag folder to create (must not exist)")
    p.add_argument("--storage", choices=sorted(STORAGE_PLUGINS), default="mcap")
    p.add_argument("--rate", type=float, default=None, help="frames per second (default: video's rate or 10)")
    p.add_argument("--frame-id", default="camera_optical_frame")
    p.add_argument(
        "--topic", default="/camera/image_raw", help="image topic (compressed: '/compressed' appended)"
    )
    p.add_argument("--info-topic", default="/camera/camera_info")
    p.add_argument("--no-camera-info", action="store_true", help="write no CameraInfo messages")
    p.add_argument(
        "--compressed",
        choices=("jpeg", "png"),
        default=None,
        help="write sensor_msgs/CompressedImage instead of raw rgb8 Image",
    )
    p.add_argument("--width", type=int, default=None, help="resize frames to this width (aspect kept)")
    p.add_argument("--every", type=int, default=1, help="keep every N-th input frame")
    p.add_argument("--max-frames", type=int, default=None, help="stop after this many frames")
    p.add_argument(
        "--start-time", type=float, default=None, help="first stamp, seconds since epoch (default now)"
    )
    p.add_argument(
        "--intrinsics",
        type=float,
        nargs=4,
        metavar=("FX", "FY", "CX", "CY"),
        default=None,
        help="camera matrix in pixels of the written frames (default: uncalibrated, K = 0)",
    )
    p.set_defaults(func=main_args)


def main_args(args: argparse.Namespace) -> int:
    """Run `make-bag` from parsed arguments."""
    if args.every < 1:
        raise ValueError(f"--every must be >= 1, got {args.every}")
    source: Path = args.source
    rate = args.rate
    if source.is_dir():
        files = image_files(source)[:: args.every][: args.max_frames]
        frames: Iterable[np.ndarray] = read_images(files, args.width)
        total = len(files)
    elif source.is_file():
        declared = video_rate(source)  # also fails early on a file OpenCV cannot open
        rate = rate or declared
        frames = _take(read_video(source, args.width, args.every), args.max_frames)
        total = args.max_frames
    else:
        raise ValueError(f"source {source} is neither a folder of images nor a video file")
    topic = args.topic + "/compressed" if args.compressed else args.topic
    config = MakeBagConfig(
        output=args.output,
        storage=args.storage,
        rate_hz=rate or 10.0,
        frame_id=args.frame_id,
        topic=topic,
        info_topic=None if args.no_camera_info else args.info_topic,
        compressed=args.compressed,
        start_time_ns=None if args.start_time is None else round(args.start_time * 1e9),
    )
    k = None
    if args.intrinsics is not None:
        fx, fy, cx, cy = args.intrinsics
        k = np.array([[fx, 0.0, cx], [0.0, fy, cy], [0.0, 0.0, 1.0]])
    result = write_camera_bag(config, frames, k, total)
    print(
        f"wrote {result.frames} frames {result.width}x{result.height} at {config.rate_hz:g} Hz to "
        f"{result.path} ({config.storage}, topic {config.topic})"
    )
    return 0


def _take(frames: Iterator[np.ndarray], limit: int | None) -> Iterator[np.ndarray]:
    for index, frame in enumerate(frames):
        if limit is not None and index >= limit:
            return
        yield frame
