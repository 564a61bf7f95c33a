"""Test-side decoders and encoders of the node's messages: the inverses of `ros/messages/conversions.py`'s
encoders (`depth_to_image`, `points_to_cloud`) and a CompressedImage encoder for input tests. Nothing in the
package needs them, so they live here."""

from __future__ import annotations

import cv2
import numpy as np
from sensor_msgs.msg import CompressedImage, Image, PointCloud2
from std_msgs.msg import Header

from lingbot_map_ros.ros.messages.conversions import CLOUD_POINT_STEP


def _message_bytes(data: object) -> np.ndarray:
    """A message `data` field as a flat uint8 array."""
    return np.frombuffer(bytes(data), dtype=np.uint8)


def rgb_to_compressed(
    rgb: np.ndarray, header: Header, fmt: str = "jpeg", quality: int = 90
) -> CompressedImage:
    """Encode `[H, W, 3]` uint8 RGB as a `sensor_msgs/CompressedImage` (`fmt` is 'jpeg' or 'png')."""
    if rgb.ndim != 3 or rgb.shape[2] != 3 or rgb.dtype != np.uint8:
        raise ValueError(f"expected RGB [H, W, 3] uint8, got shape {rgb.shape} dtype {rgb.dtype}")
    rgb = np.ascontiguousarray(rgb)
    if fmt not in ("jpeg", "png"):
        raise ValueError(f"compressed format must be 'jpeg' or 'png', got '{fmt}'")
    params = [cv2.IMWRITE_JPEG_QUALITY, quality] if fmt == "jpeg" else []
    ok, buf = cv2.imencode(".jpg" if fmt == "jpeg" else ".png", cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR), params)
    if not ok:
        raise ValueError(f"OpenCV could not encode the image as {fmt}")
    return CompressedImage(header=header, format=fmt, data=buf.tobytes())


def image_to_depth(msg: Image) -> np.ndarray:
    """Inverse of `depth_to_image`: `[H, W]` float32 (honours `step` and `is_bigendian`)."""
    if msg.encoding != "32FC1":
        raise ValueError(f"depth image encoding must be '32FC1', got '{msg.encoding}'")
    dtype = np.dtype(">f4" if msg.is_bigendian else "<f4")
    data = _message_bytes(msg.data)
    if msg.step < msg.width * 4 or data.size < msg.step * msg.height:
        raise ValueError(f"depth step {msg.step} / {data.size} bytes too small for {msg.width}x{msg.height}")
    rows = data[: msg.step * msg.height].reshape(msg.height, msg.step)[:, : msg.width * 4]
    return np.ascontiguousarray(rows).view(dtype).astype(np.float32)


def cloud_to_points(msg: PointCloud2) -> tuple[np.ndarray, np.ndarray]:
    """Inverse of `points_to_cloud`: `(xyz [N, 3] float32, rgb [N, 3] uint8)`."""
    names = [f.name for f in msg.fields]
    if names[:4] != ["x", "y", "z", "rgb"] or msg.point_step != CLOUD_POINT_STEP:
        raise ValueError(f"expected fields x, y, z, rgb with point_step 16, got {names} / {msg.point_step}")
    packed = _message_bytes(msg.data).view(np.float32).reshape(-1, 4)
    colour = packed[:, 3].copy().view(np.uint32)
    rgb = np.stack([(colour >> 16) & 255, (colour >> 8) & 255, colour & 255], axis=1).astype(np.uint8)
    return packed[:, :3].copy(), rgb
