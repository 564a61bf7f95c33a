"""`depth_image` subscription for `scale.source: depth`: metric depth of an RGB-D camera registered to the
colour image (16UC1 millimetres or 32FC1 metres, REP-118), kept by stamp for the mapper.

The last `KEEP` images are kept, at most `KEEP_BYTES` of them; `take(stamp_s)` returns the one with the same
stamp (within 1 ms) as the colour image, as float32 metres [H, W] (0 / NaN = no measurement), or None.

Depth images are input like the colour images (issue 20): checked from the header before they are kept, under
the same pixel budget (`max_input_pixels`), and rejected with a counted cause (`rejected_depth_<cause>` on
/diagnostics): `depth_empty` (0 width or height), `depth_unsupported_encoding`, `depth_malformed` (data
shorter than the header promises), `depth_oversized` (over the pixel budget), `depth_size_mismatch` (another
aspect ratio than the colour image it is paired with: not registered to it). A rejected depth image never
fails the colour frame's outputs: that frame gets no depth sample.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable

import numpy as np
from rclpy.node import Node
from rclpy.qos import qos_profile_sensor_data
from sensor_msgs.msg import Image

KEEP = 30
#: Most bytes of depth messages kept (a 4096 x 4096 32FC1 image is 64 MiB: 30 of them were 2 GB).
KEEP_BYTES = 256 << 20
#: Relative difference of aspect ratio between a depth image and its colour image still taken as registered.
ASPECT_TOLERANCE = 0.02
DEPTH_DTYPES = {"16UC1": np.uint16, "mono16": np.uint16, "32FC1": np.float32}


def depth_problem(msg: Image, max_pixels: int) -> tuple[str, str] | None:
    """``(cause, reason)`` when the header of a depth image makes it unusable (module doc), else None."""
    if msg.width == 0 or msg.height == 0:
        return "depth_empty", f"depth_image of {msg.width}x{msg.height} px"
    if msg.encoding not in DEPTH_DTYPES:
        return (
            "depth_unsupported_encoding",
            f"depth_image encoding must be 16UC1 or 32FC1, got '{msg.encoding[:40]}'",
        )
    if msg.width * msg.height > max_pixels:
        return (
            "depth_oversized",
            f"depth_image of {msg.width}x{msg.height} px is over max_input_pixels {max_pixels}",
        )
    row = msg.width * np.dtype(DEPTH_DTYPES[msg.encoding]).itemsize
    if msg.step < row or len(msg.data) < msg.step * msg.height:
        return (
            "depth_malformed",
            f"depth_image data ({len(msg.data)} B) shorter than {msg.width}x{msg.height}",
        )
    return None


def depth_image_metres(msg: Image) -> np.ndarray:
    """[H, W] float32 metres of a 16UC1 (mm) or 32FC1 (m) image.

    Raises:
        ValueError: another encoding or a short buffer.
    """
    dtypes = DEPTH_DTYPES
    if msg.encoding not in dtypes:
        raise ValueError(f"depth_image encoding must be 16UC1 or 32FC1, got '{msg.encoding}'")
    dtype = np.dtype(dtypes[msg.encoding]).newbyteorder(">" if msg.is_bigendian else "<")
    row = msg.width * dtype.itemsize
    data = np.frombuffer(bytes(msg.data), np.uint8)
    if msg.step < row or data.size < msg.step * msg.height:
        raise ValueError(f"depth_image buffer too short for {msg.width}x{msg.height} {msg.encoding}")
    rows = data[: msg.step * msg.height].reshape(msg.height, msg.step)[:, :row]
    values = rows.copy().view(dtype).reshape(msg.height, msg.width).astype(np.float32)
    return values * np.float32(0.001) if dtype.kind == "u" else values


class DepthInput:
    """Subscription to `depth_image` of `node` (remap it to the camera's aligned depth topic).

    Args:
        max_pixels: the current pixel budget (`max_input_pixels`, live).
        on_reject: ``(cause, reason)`` of a rejected depth image (the node's `CauseLog.rejected`).
    """

    def __init__(
        self,
        node: Node,
        max_pixels: Callable[[], int] = lambda: 1 << 24,
        on_reject: Callable[[str, str], None] = lambda cause, reason: None,
    ) -> None:
        self._node = node
        self._max_pixels = max_pixels
        self._on_reject = on_reject
        self._lock = threading.Lock()
        self._images: OrderedDict[int, Image] = OrderedDict()
        self._bytes = 0
        self._sub = node.create_subscription(Image, "depth_image", self._on_image, qos_profile_sensor_data)

    def _on_image(self, msg: Image) -> None:
        problem = depth_problem(msg, self._max_pixels())
        if problem is not None:
            self._on_reject(*problem)
            return
        key = msg.header.stamp.sec * 1_000_000_000 + msg.header.stamp.nanosec
        with self._lock:
            old = self._images.pop(key, None)
            self._bytes += len(msg.data) - (len(old.data) if old is not None else 0)
            self._images[key] = msg
            while len(self._images) > KEEP or (self._bytes > KEEP_BYTES and len(self._images) > 1):
                self._bytes -= len(self._images.popitem(last=False)[1].data)

    def take(self, stamp_s: float, shape: tuple[int, int]) -> np.ndarray | None:
        """The depth image stamped `stamp_s` (±1 ms) as metres, resized (nearest) to `shape` if needed; None
        when there is none or it does not fit the colour image (counted)."""
        key = round(stamp_s * 1e9)
        with self._lock:
            match = min(self._images, key=lambda k: abs(k - key), default=None)
            msg = self._images.get(match) if match is not None and abs(match - key) <= 1_000_000 else None
        if msg is None:
            return None
        try:
            depth = depth_image_metres(msg)
        except ValueError as exc:
            self._on_reject("depth_malformed", str(exc))
            return None
        aspect, wanted = depth.shape[1] / depth.shape[0], shape[1] / shape[0]
        if abs(aspect / wanted - 1.0) > ASPECT_TOLERANCE:
            self._on_reject(
                "depth_size_mismatch",
                f"depth_image {depth.shape[1]}x{depth.shape[0]} is not "
                f"registered to the {shape[1]}x{shape[0]} colour image",
            )
            return None
        if depth.shape != shape:
            rows = np.arange(shape[0]) * depth.shape[0] // shape[0]
            cols = np.arange(shape[1]) * depth.shape[1] // shape[1]
            depth = depth[rows][:, cols]
        return depth

    def destroy(self) -> None:
        if self._sub is not None:
            self._node.destroy_subscription(self._sub)
            self._sub = None
