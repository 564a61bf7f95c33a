"""Message <-> numpy conversions for images, depth and point clouds (no cv_bridge needed).

`cv_bridge` is used when importable (a ROS install ships it); otherwise the numpy views below do the same job
for the encodings the node accepts. Every function raises `ValueError` naming what was expected when a
message is malformed, so the node can count the rejection by cause and keep running.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

import cv2
import numpy as np
from sensor_msgs.msg import CompressedImage, Image, PointCloud2, PointField
from std_msgs.msg import Header

from ..input.image_checks import ImageConversionError, jpeg_structure_problem
from ..input.image_checks import check_pixel_budget as check_pixel_budget  # re-exported (intake, tests)

try:  # pragma: no cover - only on a real ROS install
    from cv_bridge import CvBridge

    _BRIDGE: CvBridge | None = CvBridge()
except ImportError:
    _BRIDGE = None


#: Accepted input encodings -> (channels, channel order of the source relative to RGB(A)).
IMAGE_ENCODINGS: dict[str, int] = {"rgb8": 3, "bgr8": 3, "rgba8": 4, "bgra8": 4, "mono8": 1}
#: Largest accepted side of a compressed image, pixels. Checked from the PNG/JPEG header BEFORE decoding, so
#: a decompression bomb (a few hundred kB claiming 20000 x 20000 px) never allocates gigabytes.
MAX_COMPRESSED_SIDE = 8192
_PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
_JPEG_SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}  # start-of-frame markers (not DHT/JPG/DAC)
#: Cloud layout RViz expects for xyz + colour: float32 x, y, z and the rgb bytes packed into a float32.
CLOUD_POINT_STEP = 16


def _message_bytes(data: object) -> np.ndarray:
    """View a message `data` field (array.array('B'), bytes, list) as a flat uint8 array without copying."""
    if isinstance(data, (bytes, bytearray, memoryview)) or hasattr(data, "buffer_info"):
        return np.frombuffer(data, dtype=np.uint8)
    return np.asarray(data, dtype=np.uint8)


def image_to_rgb(msg: Image) -> np.ndarray:
    """Convert a `sensor_msgs/Image` to an RGB array.

    Accepts rgb8, bgr8, rgba8, bgra8 and mono8 (alpha dropped, mono replicated), rows padded to `msg.step`
    bytes. `is_bigendian` does not matter for these 8-bit-per-channel encodings.

    Returns:
        `[H, W, 3]` uint8, C-contiguous, a copy independent of the message buffer.

    Raises:
        ImageConversionError (a ValueError): unknown encoding, zero size, `step` smaller than a
            row, or too few data bytes.
    """
    encoding, channels, data = check_image_layout(msg)
    height, width, step = int(msg.height), int(msg.width), int(msg.step)
    row_bytes = width * channels
    if _BRIDGE is not None:  # a real ROS install
        return _bridged(lambda: _BRIDGE.imgmsg_to_cv2(msg, desired_encoding="rgb8"), "malformed_image")
    rows = np.lib.stride_tricks.as_strided(data, shape=(height, row_bytes), strides=(step, 1))
    pixels = rows.reshape(height, width, channels)
    if encoding == "mono8":
        return np.repeat(pixels, 3, axis=2)
    if encoding in ("bgr8", "bgra8"):
        return np.ascontiguousarray(pixels[:, :, 2::-1])
    return np.ascontiguousarray(pixels[:, :, :3])


def check_image_layout(msg: Image) -> tuple[str, int, np.ndarray]:
    """Check an Image's encoding, size, step and data length without touching its pixels.

    Returns:
        (encoding lower-cased, channels, the data as a flat uint8 view).

    Raises:
        ImageConversionError: `unsupported_encoding` or `malformed_image`.
    """
    encoding = msg.encoding.lower()
    if encoding not in IMAGE_ENCODINGS:
        raise ImageConversionError(
            "unsupported_encoding",
            f"unsupported image encoding '{msg.encoding}': expected one of {sorted(IMAGE_ENCODINGS)}",
        )
    channels = IMAGE_ENCODINGS[encoding]
    height, width, step = int(msg.height), int(msg.width), int(msg.step)
    if height <= 0 or width <= 0:
        raise ImageConversionError("malformed_image", f"image size must be positive, got {width}x{height}")
    row_bytes = width * channels
    if step < row_bytes:
        raise ImageConversionError(
            "malformed_image",
            f"image step {step} is smaller than a row ({width} px x {channels} B = {row_bytes} B)",
        )
    data = _message_bytes(msg.data)
    needed = step * (height - 1) + row_bytes
    if data.size < needed:
        raise ImageConversionError(
            "malformed_image",
            f"image data has {data.size} bytes, expected at least {needed} ({height} rows of step {step})",
        )
    return encoding, channels, data


def compressed_to_rgb(msg: CompressedImage) -> np.ndarray:
    """Decode a `sensor_msgs/CompressedImage` (jpeg or png, as image_transport's `compressed` plugin sends).

    Returns:
        `[H, W, 3]` uint8 RGB.

    Raises:
        ImageConversionError (a ValueError): empty payload, neither PNG nor JPEG, no size in the header or
            bytes OpenCV cannot decode (`undecodable_image`); a side over `MAX_COMPRESSED_SIDE` in the header
            (`oversized_image`, rejected without decoding).
    """
    data = _message_bytes(msg.data)
    if data.size == 0:
        raise ImageConversionError(
            "undecodable_image", "compressed image has no data: expected jpeg or png bytes"
        )
    raw = data.tobytes()
    size = compressed_image_size(raw)
    if size is None:
        raise ImageConversionError(
            "undecodable_image",
            f"compressed image (format '{msg.format}') has no PNG or JPEG header with a size: "
            "expected jpeg or png",
        )
    if max(size) > MAX_COMPRESSED_SIDE:
        raise ImageConversionError(
            "oversized_image",
            f"compressed image header claims {size[1]}x{size[0]} px: expected at most "
            f"{MAX_COMPRESSED_SIDE} px a side (not decoded)",
        )
    if _BRIDGE is not None:  # a real ROS install
        return _bridged(
            lambda: _BRIDGE.compressed_imgmsg_to_cv2(msg, desired_encoding="rgb8"), "undecodable_image"
        )
    if raw.startswith(b"\xff\xd8") and (problem := jpeg_structure_problem(raw)) is not None:
        # libjpeg would only print "Corrupt JPEG data" to stderr and return garbage pixels
        raise ImageConversionError("undecodable_image", f"corrupt JPEG data: {problem}")
    # EXIF orientation is ignored: the pixels keep the sensor's (and CameraInfo's, and the header's) layout,
    # as a raw Image of the same camera would; OpenCV would otherwise rotate a JPEG with orientation 6.
    bgr = cv2.imdecode(data, cv2.IMREAD_COLOR | cv2.IMREAD_IGNORE_ORIENTATION)
    if bgr is None:
        raise ImageConversionError(
            "undecodable_image",
            f"cannot decode compressed image (format '{msg.format}'): expected jpeg or png",
        )
    if bgr.shape[:2] != tuple(size):
        raise ImageConversionError(
            "undecodable_image",
            f"decoded {bgr.shape[1]}x{bgr.shape[0]} px but the header says {size[1]}x{size[0]}",
        )
    return cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)


def image_header_size(msg: Image | CompressedImage) -> tuple[int, int] | None:
    """(height, width) an image message claims, without decoding or copying pixels (None: unknown)."""
    if isinstance(msg, CompressedImage):
        data = _message_bytes(msg.data)
        return compressed_image_size(data.tobytes()) if data.size else None
    return int(msg.height), int(msg.width)


def _bridged(convert: Callable[[], np.ndarray], cause: str) -> np.ndarray:
    """Run a cv_bridge conversion; whatever it raises (CvBridgeError, cv2.error, AttributeError on a failed
    decode) or a result that is not `[H, W, 3]` becomes an `ImageConversionError` with `cause`, so the node's
    callback never raises (an exception in a subscription callback ends the executor's spin)."""
    try:
        out = convert()
    except Exception as exc:  # noqa: BLE001 - cv_bridge's failure types differ between ROS distributions
        raise ImageConversionError(
            cause, f"cv_bridge cannot convert the image: {type(exc).__name__}: {exc}"
        ) from exc
    if not isinstance(out, np.ndarray) or out.ndim != 3 or out.shape[2] != 3:
        shape = getattr(out, "shape", None)
        raise ImageConversionError(cause, f"cv_bridge returned {shape}: expected an [H, W, 3] rgb8 image")
    return np.ascontiguousarray(out)


def compressed_image_size(data: bytes) -> tuple[int, int] | None:
    """(height, width) from a PNG IHDR or the first JPEG start-of-frame segment, without decoding.

    Returns None for bytes that are neither, or whose header ends before the size.
    """
    if data.startswith(_PNG_MAGIC):
        if len(data) < 24 or data[12:16] != b"IHDR":
            return None
        width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
        return height, width
    if not data.startswith(b"\xff\xd8"):
        return None
    i = 2
    while i + 4 <= len(data):  # walk the marker segments up to the frame header
        if data[i] != 0xFF:
            return None
        marker = data[i + 1]
        if marker == 0xFF:  # fill byte
            i += 1
            continue
        if marker in _JPEG_SOF:
            if i + 9 > len(data):
                return None
            return int.from_bytes(data[i + 5 : i + 7], "big"), int.from_bytes(data[i + 7 : i + 9], "big")
        if marker == 0xDA:  # start of scan before any frame header
            return None
        i += 2 if 0xD0 <= marker <= 0xD7 or marker == 0x01 else 2 + int.from_bytes(data[i + 2 : i + 4], "big")
    return None


def rgb_to_image(rgb: np.ndarray, header: Header, encoding: str = "rgb8", row_padding: int = 0) -> Image:
    """Build a `sensor_msgs/Image` from `[H, W, 3]` uint8 RGB in any accepted encoding.

    `row_padding` extra zero bytes per row exercise `step` handling (cameras pad rows to alignment).
    """
    rgb = _check_rgb(rgb)
    if encoding not in IMAGE_ENCODINGS:
        raise ValueError(f"unsupported encoding '{encoding}': expected one of {sorted(IMAGE_ENCODINGS)}")
    if encoding == "mono8":
        pixels = cv2.cvtColor(rgb, cv2.COLOR_RGB2GRAY)[:, :, None]
    else:
        pixels = rgb[:, :, ::-1] if encoding.startswith("bgr") else rgb
        if encoding.endswith("a8"):
            alpha = np.full(rgb.shape[:2] + (1,), 255, np.uint8)
            pixels = np.concatenate([pixels, alpha], axis=2)
    height, width, channels = pixels.shape
    rows = np.zeros((height, width * channels + row_padding), np.uint8)
    rows[:, : width * channels] = pixels.reshape(height, -1)
    return Image(
        header=header,
        height=height,
        width=width,
        encoding=encoding,
        is_bigendian=0,
        step=width * channels + row_padding,
        data=rows.tobytes(),
    )


def depth_to_image(depth: np.ndarray, header: Header) -> Image:
    """Build a 32FC1 `sensor_msgs/Image` from `[H, W]` float32 depth (z along the optical axis, model units).

    The header (stamp and frame_id) is the input image's, so depth aligns with the camera it came from.
    """
    if depth.ndim != 2:
        raise ValueError(f"depth must be [H, W], got shape {depth.shape}")
    depth = np.ascontiguousarray(depth, dtype=np.float32)
    height, width = depth.shape
    return Image(
        header=header,
        height=height,
        width=width,
        encoding="32FC1",
        is_bigendian=int(sys.byteorder == "big"),
        step=width * 4,
        data=depth.tobytes(),
    )


def points_to_cloud(xyz: np.ndarray, rgb: np.ndarray, header: Header) -> PointCloud2:
    """Pack points into an unorganised `PointCloud2` with fields x, y, z (float32) and rgb (float32-packed).

    Args:
        xyz: `[N, 3]` float32, metres-like model units, in `header.frame_id`.
        rgb: `[N, 3]` uint8 colours; packed as 0x00RRGGBB into the 4 bytes of a float32, as RViz expects.
    """
    xyz = np.asarray(xyz)
    rgb = np.asarray(rgb)
    if xyz.ndim != 2 or xyz.shape[1] != 3 or rgb.shape != xyz.shape:
        raise ValueError(f"expected xyz [N, 3] and rgb [N, 3], got {xyz.shape} and {rgb.shape}")
    count = xyz.shape[0]
    packed = np.empty((count, 4), np.float32)
    packed[:, :3] = xyz
    channels = rgb.astype(np.uint32)
    colour = (channels[:, 0] << 16) | (channels[:, 1] << 8) | channels[:, 2]
    packed[:, 3] = colour.view(np.float32)
    fields = [
        PointField(name=name, offset=4 * i, datatype=PointField.FLOAT32, count=1)
        for i, name in enumerate(("x", "y", "z", "rgb"))
    ]
    return PointCloud2(
        header=header,
        height=1,
        width=count,
        fields=fields,
        is_bigendian=sys.byteorder == "big",
        point_step=CLOUD_POINT_STEP,
        row_step=CLOUD_POINT_STEP * count,
        is_dense=True,
        data=packed.tobytes(),
    )


def _check_rgb(rgb: np.ndarray) -> np.ndarray:
    if rgb.ndim != 3 or rgb.shape[2] != 3 or rgb.dtype != np.uint8:
        raise ValueError(f"expected RGB [H, W, 3] uint8, got shape {rgb.shape} dtype {rgb.dtype}")
    return np.ascontiguousarray(rgb)
