"""`depth_image` subscription for `scale.source: depth`: metric depth of an RGB-D camera registered to the
colour image (16UC1 millimetres or 32FC1 metres, REP-118), kept by stamp for the mapper.

The last `KEEP` images are kept; `take(stamp_s)` returns the one with the same stamp (within 1 ms) as the
colour image, as float32 metres [H, W] (0 / NaN = no measurement), or None.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

import numpy as np
from rclpy.node import Node
from rclpy.qos import qos_profile_sensor_data
from sensor_msgs.msg import Image

KEEP = 30


def depth_image_metres(msg: Image) -> np.ndarray:
    """[H, W] float32 metres of a 16UC1 (mm) or 32FC1 (m) image.

    Raises:
        ValueError: another encoding or a short buffer.
    """
    dtypes = {"16UC1": np.uint16, "mono16": np.uint16, "32FC1": np.float32}
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
    """Subscription to `depth_image` of `node` (remap it to the camera's aligned depth topic)."""

    def __init__(self, node: Node) -> None:
        self._node = node
        self._lock = threading.Lock()
        self._images: OrderedDict[int, Image] = OrderedDict()
        self.rejected = 0
        self._sub = node.create_subscription(Image, "depth_image", self._on_image, qos_profile_sensor_data)

    def _on_image(self, msg: Image) -> None:
        key = msg.header.stamp.sec * 1_000_000_000 + msg.header.stamp.nanosec
        with self._lock:
            self._images[key] = msg
            while len(self._images) > KEEP:
                self._images.popitem(last=False)

    def take(self, stamp_s: float, shape: tuple[int, int]) -> np.ndarray | None:
        """The depth image stamped `stamp_s` (±1 ms) as metres, resized (nearest) to `shape` if needed."""
        key = round(stamp_s * 1e9)
        with self._lock:
            match = min(self._images, key=lambda k: abs(k - key), default=None)
            msg = self._images.get(match) if match is not None and abs(match - key) <= 1_000_000 else None
        if msg is None:
            return None
        try:
            depth = depth_image_metres(msg)
        except ValueError:
            self.rejected += 1
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
