"""rosbag2 reading and writing for camera streams, through `rosbags` (no ROS install needed).

Messages are serialised with the ROS 2 typestore that matches the ROS release this package targets
(`Stores.ROS2_KILTED`, falling back to the newest older store), so the type hashes (RIHS01) written to
the bag's metadata equal those of the installed rclpy message packages and `ros2 bag` accepts the bag.

Images handed around here are `np.ndarray[H, W, 3]` uint8 in RGB order; stamps are int nanoseconds.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np
from rosbags.interfaces import Connection
from rosbags.rosbag2 import Reader, ReaderError, StoragePlugin, Writer
from rosbags.typesys import Stores, get_typestore
from rosbags.typesys.store import Typestore

IMAGE = "sensor_msgs/msg/Image"
COMPRESSED_IMAGE = "sensor_msgs/msg/CompressedImage"
CAMERA_INFO = "sensor_msgs/msg/CameraInfo"
CAMERA_TYPES = (IMAGE, COMPRESSED_IMAGE)
STORAGE_PLUGINS = {"mcap": StoragePlugin.MCAP, "sqlite3": StoragePlugin.SQLITE3}
BAG_VERSION = 9  # rosbag2 metadata version written by Jazzy and later
_STORE_PREFERENCE = ("ROS2_KILTED", "ROS2_JAZZY", "ROS2_IRON", "ROS2_HUMBLE")
_CHANNELS = {"rgb8": 3, "bgr8": 3, "rgba8": 4, "bgra8": 4, "mono8": 1}


class BagError(ValueError):
    """A bag that cannot be read or does not hold what was asked for (missing topic, wrong type)."""


def ros2_typestore() -> Typestore:
    """The typestore of the newest ROS 2 release known to both rosbags and this package."""
    for name in _STORE_PREFERENCE:
        store = getattr(Stores, name, None)
        if store is not None:
            return get_typestore(store)
    raise RuntimeError(f"rosbags has none of the ROS 2 typestores {_STORE_PREFERENCE}")


def _header(ts: Typestore, stamp_ns: int, frame_id: str) -> object:
    time_cls = ts.types["builtin_interfaces/msg/Time"]
    header_cls = ts.types["std_msgs/msg/Header"]
    return header_cls(
        stamp=time_cls(sec=stamp_ns // 1_000_000_000, nanosec=stamp_ns % 1_000_000_000), frame_id=frame_id
    )


def image_message(ts: Typestore, rgb: np.ndarray, stamp_ns: int, frame_id: str) -> object:
    """sensor_msgs/Image, encoding rgb8, unpadded rows (step = 3 * width), from `rgb` [H, W, 3] uint8."""
    _check_rgb(rgb)
    height, width = rgb.shape[:2]
    return ts.types[IMAGE](
        header=_header(ts, stamp_ns, frame_id),
        height=height,
        width=width,
        encoding="rgb8",
        is_bigendian=0,
        step=3 * width,
        data=np.ascontiguousarray(rgb).reshape(-1),
    )


def compressed_message(
    ts: Typestore, rgb: np.ndarray, stamp_ns: int, frame_id: str, fmt: str = "jpeg", jpeg_quality: int = 90
) -> object:
    """sensor_msgs/CompressedImage (format "jpeg" or "png", as image_transport writes it) from RGB uint8."""
    _check_rgb(rgb)
    if fmt not in ("jpeg", "png"):
        raise ValueError(f"compressed format must be 'jpeg' or 'png', got {fmt!r}")
    params = [cv2.IMWRITE_JPEG_QUALITY, jpeg_quality] if fmt == "jpeg" else []
    ok, buf = cv2.imencode(".jpg" if fmt == "jpeg" else ".png", rgb[..., ::-1], params)
    if not ok:
        raise ValueError(f"OpenCV could not encode a {rgb.shape} image as {fmt}")
    return ts.types[COMPRESSED_IMAGE](
        header=_header(ts, stamp_ns, frame_id), format=f"rgb8; {fmt} compressed bgr8", data=buf.reshape(-1)
    )


def camera_info_message(
    ts: Typestore, width: int, height: int, k: np.ndarray | None, stamp_ns: int, frame_id: str
) -> object:
    """sensor_msgs/CameraInfo, plumb_bob with zero distortion; `k` [3, 3] in pixels, or None for an
    uncalibrated camera (K all zeros, the ROS convention)."""
    k = np.zeros((3, 3)) if k is None else np.asarray(k, dtype=np.float64)
    if k.shape != (3, 3):
        raise ValueError(f"camera matrix must be 3x3, got shape {k.shape}")
    p = np.zeros((3, 4))
    p[:, :3] = k
    roi = ts.types["sensor_msgs/msg/RegionOfInterest"](
        x_offset=0, y_offset=0, height=0, width=0, do_rectify=False
    )
    return ts.types[CAMERA_INFO](
        header=_header(ts, stamp_ns, frame_id),
        height=height,
        width=width,
        distortion_model="plumb_bob",
        d=np.zeros(5),
        k=k.reshape(-1),
        r=np.eye(3).reshape(-1),
        p=p.reshape(-1),
        binning_x=0,
        binning_y=0,
        roi=roi,
    )


def decode_image(msg: object) -> np.ndarray:
    """RGB uint8 [H, W, 3] from a deserialised Image (rgb8, bgr8, rgba8, bgra8, mono8; rows may be
    padded) or CompressedImage (jpeg/png). Raises ValueError for anything else."""
    if hasattr(msg, "format"):
        buf = np.frombuffer(bytes(msg.data), dtype=np.uint8)
        bgr = cv2.imdecode(buf, cv2.IMREAD_COLOR) if buf.size else None
        if bgr is None:
            raise ValueError(f"CompressedImage with format {msg.format!r} could not be decoded as jpeg/png")
        return bgr[..., ::-1].copy()
    channels = _CHANNELS.get(msg.encoding)
    if channels is None:
        raise ValueError(
            f"image encoding {msg.encoding!r} not supported; expected one of {sorted(_CHANNELS)}"
        )
    row = msg.width * channels
    if msg.step < row or len(msg.data) < msg.step * msg.height:
        raise ValueError(
            f"image data ({len(msg.data)} B, step {msg.step}) too short for "
            f"{msg.width}x{msg.height} {msg.encoding}"
        )
    rows = np.asarray(msg.data, dtype=np.uint8)[: msg.step * msg.height].reshape(msg.height, msg.step)
    pixels = rows[:, :row].reshape(msg.height, msg.width, channels)
    if msg.encoding == "mono8":
        return np.repeat(pixels, 3, axis=2)
    if msg.encoding.startswith("bgr"):
        pixels = pixels[..., 2::-1]
    return np.ascontiguousarray(pixels[..., :3])


def _check_rgb(rgb: np.ndarray) -> None:
    if rgb.dtype != np.uint8 or rgb.ndim != 3 or rgb.shape[2] != 3:
        raise ValueError(f"expected an RGB image uint8 [H, W, 3], got {rgb.dtype} {rgb.shape}")


class BagWriter:
    """Writes camera frames (Image or CompressedImage, plus CameraInfo) to a new rosbag2 bag.

    Use as a context manager; `path` must not exist yet (rosbag2 creates the folder). When the block
    raises, the half-written bag folder is removed, so a failed conversion leaves nothing behind."""

    def __init__(self, path: Path, storage: str = "mcap") -> None:
        if storage not in STORAGE_PLUGINS:
            raise ValueError(f"storage must be one of {sorted(STORAGE_PLUGINS)}, got {storage!r}")
        if Path(path).exists():
            raise ValueError(f"bag output {path} exists already; rosbag2 needs a new folder")
        self.path = Path(path)
        self.typestore = ros2_typestore()
        self._writer = Writer(self.path, version=BAG_VERSION, storage_plugin=STORAGE_PLUGINS[storage])
        self._connections: dict[str, Connection] = {}

    def __enter__(self) -> BagWriter:
        self._writer.open()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        self._writer.close()
        if exc_type is not None:
            shutil.rmtree(self.path, ignore_errors=True)

    def write(self, topic: str, msgtype: str, msg: object, stamp_ns: int) -> None:
        """Serialise `msg` (a typestore message of `msgtype`) and store it at receive time `stamp_ns`."""
        self.write_raw(topic, msgtype, bytes(self.typestore.serialize_cdr(msg, msgtype)), stamp_ns)

    def write_raw(self, topic: str, msgtype: str, data: bytes, stamp_ns: int) -> None:
        """Store already CDR-serialised bytes (e.g. from an rclpy raw subscription)."""
        connection = self._connections.get(topic)
        if connection is None:
            if msgtype not in self.typestore.types:
                raise BagError(f"message type {msgtype} of topic {topic} is unknown to the rosbags typestore")
            connection = self._writer.add_connection(topic, msgtype, typestore=self.typestore)
            self._connections[topic] = connection
        elif connection.msgtype != msgtype:
            raise BagError(f"topic {topic} carries {connection.msgtype}, not {msgtype}")
        self._writer.write(connection, stamp_ns, data)


@dataclass(frozen=True)
class BagFrame:
    """One camera frame read from a bag: `rgb` [H, W, 3] uint8; `stamp_ns` the header stamp;
    `log_time_ns` when the bag recorded it."""

    index: int
    topic: str
    stamp_ns: int
    log_time_ns: int
    frame_id: str
    rgb: np.ndarray


def open_bag(path: Path) -> Reader:
    """An opened rosbags Reader, or BagError naming what is wrong with `path`."""
    path = Path(path)
    if not path.exists():
        raise BagError(f"bag {path} does not exist")
    storage = sorted(f.name for f in path.glob("*") if f.suffix in (".mcap", ".db3")) if path.is_dir() else []
    if storage and not (path / "metadata.yaml").is_file():
        raise BagError(
            f"bag {path} has {', '.join(storage)} but no metadata.yaml (a recording that was killed?): "
            f"recover it with `ros2 bag reindex {path}`, then map it"
        )
    try:
        reader = Reader(path)
        reader.open()
    except (ReaderError, OSError, KeyError, ValueError) as err:
        raise BagError(
            f"bag {path} is not a readable rosbag2 bag (folder with metadata.yaml and "
            f"a .mcap or .db3 file): {err}"
        ) from err
    return reader


def camera_connection(reader: Reader, topic: str | None) -> Connection:
    """The connection of `topic`, or of the only camera topic when `topic` is None."""
    cameras = [c for c in reader.connections if c.msgtype in CAMERA_TYPES]
    if topic is not None:
        matches = [c for c in reader.connections if c.topic == topic]
        if not matches:
            raise BagError(
                f"topic {topic} not in bag {reader.path}; its camera topics: "
                f"{sorted({c.topic for c in cameras}) or 'none'}"
            )
        if matches[0].msgtype not in CAMERA_TYPES:
            raise BagError(f"topic {topic} carries {matches[0].msgtype}, expected one of {CAMERA_TYPES}")
        return matches[0]
    if len({c.topic for c in cameras}) != 1:
        raise BagError(
            f"bag {reader.path} has camera topics {sorted({c.topic for c in cameras}) or 'none'}; "
            "pick exactly one with --topic"
        )
    return cameras[0]


def camera_connections(reader: Reader, topics: list[str] | None) -> list[Connection]:
    """The connections of `topics` (each a camera topic of the bag), or of every camera topic when None."""
    if topics is None:
        topics = sorted({c.topic for c in reader.connections if c.msgtype in CAMERA_TYPES})
        if not topics:
            raise BagError(f"bag {reader.path} has no camera topics")
    if len(set(topics)) != len(topics):
        raise BagError(f"camera topics {topics} name a topic more than once")
    return [camera_connection(reader, topic) for topic in topics]


def count_messages(reader: Reader, topic: str) -> int:
    """Messages stored on `topic` (from the bag's metadata, no decoding)."""
    return sum(c.msgcount for c in reader.connections if c.topic == topic)


def iter_frames(
    path: Path, topic: str | None = None, max_frames: int | None = None, skipped: list[str] | None = None
) -> Iterator[BagFrame]:
    """Decoded camera frames of one topic in log-time order. `skipped`: a frame that cannot be decoded is
    left out and its reason appended there (without it, the error is raised)."""
    reader = open_bag(path)
    try:
        yield from _decoded(reader, [camera_connection(reader, topic)], max_frames, skipped)
    finally:
        reader.close()


def iter_camera_frames(path: Path, topics: list[str], max_frames: int | None = None) -> Iterator[BagFrame]:
    """Decoded camera frames of several topics, interleaved in log-time order (`max_frames`: in all)."""
    reader = open_bag(path)
    try:
        yield from _decoded(reader, camera_connections(reader, topics), max_frames)
    finally:
        reader.close()


def _decoded(
    reader: Reader, connections: list[Connection], max_frames: int | None, skipped: list[str] | None = None
) -> Iterator[BagFrame]:
    """The frames of `connections` in log-time order, decoded (`index` counts all of them). A message that
    cannot be decoded raises, or with `skipped` is left out and its reason appended there."""
    ts = ros2_typestore()
    for index, (conn, log_time, raw) in enumerate(reader.messages(connections=connections)):
        if max_frames is not None and index >= max_frames:
            break
        try:
            msg = ts.deserialize_cdr(raw, conn.msgtype)
            stamp = msg.header.stamp.sec * 1_000_000_000 + msg.header.stamp.nanosec
            frame = BagFrame(
                index=index,
                topic=conn.topic,
                stamp_ns=stamp,
                log_time_ns=log_time,
                frame_id=msg.header.frame_id,
                rgb=decode_image(msg),
            )
        except Exception as err:  # noqa: BLE001 - any undecodable message (bad CDR, bad image) is one frame
            if skipped is None:
                raise
            skipped.append(
                f"message {index} of {conn.topic} (log time {log_time} ns): {type(err).__name__}: {err}"
            )
            continue
        yield frame
