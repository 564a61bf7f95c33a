"""The depth input of `scale.source: depth`: 16UC1 millimetres and 32FC1 metres (REP-118), padded rows, byte
order, bad encodings (no DDS)."""

from __future__ import annotations

import numpy as np
import pytest
from sensor_msgs.msg import Image
from std_msgs.msg import Header

from lingbot_map_ros.ros.input.depth import depth_image_metres


def _image(values: np.ndarray, encoding: str, pad: int = 0, big: bool = False) -> Image:
    h, w = values.shape
    raw = values.astype(values.dtype.newbyteorder(">" if big else "<")).tobytes()
    row = w * values.dtype.itemsize
    rows = [raw[i * row : (i + 1) * row] + b"\0" * pad for i in range(h)]
    return Image(
        header=Header(frame_id="cam"),
        height=h,
        width=w,
        encoding=encoding,
        is_bigendian=big,
        step=row + pad,
        data=b"".join(rows),
    )


def test_16uc1_is_millimetres_and_32fc1_metres() -> None:
    mm = np.array([[1000, 2500], [0, 65535]], np.uint16)
    np.testing.assert_allclose(depth_image_metres(_image(mm, "16UC1")), mm / 1000.0, rtol=1e-6)
    padded_big_endian = _image(mm, "16UC1", pad=4, big=True)
    np.testing.assert_allclose(depth_image_metres(padded_big_endian), mm / 1000.0, rtol=1e-6)
    m = np.array([[1.5, np.nan], [0.0, 7.25]], np.float32)
    np.testing.assert_array_equal(depth_image_metres(_image(m, "32FC1", pad=8)), m)


def test_other_encodings_and_short_buffers_are_refused() -> None:
    with pytest.raises(ValueError, match="16UC1 or 32FC1"):
        depth_image_metres(_image(np.zeros((2, 2), np.uint8), "mono8"))
    short = _image(np.zeros((2, 2), np.float32), "32FC1")
    short.data = short.data[:-1]
    with pytest.raises(ValueError, match="too short"):
        depth_image_metres(short)
