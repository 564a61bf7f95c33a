"""Checks of an input image before it is decoded or converted: the pixel budget from the header and the
structure of a JPEG (issue 16). `ImageConversionError` carries the rejection cause (`rejected_<cause>` in
/diagnostics); conversions.py re-exports all three.
"""

from __future__ import annotations

import numpy as np

from ...engine.face import PATCH_SIZE


class ImageConversionError(ValueError):
    """An input image the node cannot use; `cause` names the rejection counter in /diagnostics."""

    def __init__(self, cause: str, message: str) -> None:
        super().__init__(message)
        self.cause = cause


#: Images with a side under this (one patch) skip the aspect-ratio check: they are rejected as
#: `unsupported_size` after decoding, which the pixel budget keeps cheap.
MIN_BUDGET_SIDE = PATCH_SIZE


def check_pixel_budget(size: tuple[int, int] | None, max_pixels: int, max_aspect_ratio: float) -> None:
    """Reject an image by its header size before it is decoded, converted or resized.

    Args:
        size: (height, width) from the header; None or a non-positive side is left to the converter.
        max_pixels: largest accepted width x height (`max_input_pixels`).
        max_aspect_ratio: largest accepted long side / short side (`max_aspect_ratio`).

    Raises:
        ImageConversionError: `oversized_image` (pixels) or `unsupported_aspect_ratio`.
    """
    if size is None or min(size) <= 0:
        return
    height, width = size
    if min(size) < MIN_BUDGET_SIDE:  # under one patch: rejected as unsupported_size once decoded (cheap:
        max_aspect_ratio = float("inf")  # its pixels are within max_pixels)
    if height * width > max_pixels:
        raise ImageConversionError(
            "oversized_image",
            f"image of {width}x{height} = {height * width} px exceeds max_input_pixels = {max_pixels} "
            "(not decoded)",
        )
    ratio = max(height, width) / min(height, width)
    if ratio > max_aspect_ratio:
        raise ImageConversionError(
            "unsupported_aspect_ratio",
            f"image of {width}x{height} px has an aspect ratio of {ratio:.1f}, over max_aspect_ratio = "
            f"{max_aspect_ratio:g}",
        )


#: Markers that may follow a scan's entropy-coded data (EOI, DHT, SOS, DQT, DNL, DRI, COM, APPn).
_JPEG_AFTER_SCAN = frozenset({0xD9, 0xC4, 0xDA, 0xDB, 0xDC, 0xDD, 0xFE, *range(0xE0, 0xF0)})


def jpeg_structure_problem(data: bytes) -> str | None:
    """What is wrong with a JPEG's marker structure, or None when it is sound.

    Walks the marker segments to EOI; in each scan's entropy-coded data every 0xFF must be a stuffed 0xFF00,
    a fill byte or a restart marker (RSTn only with a restart interval, in sequence), and the scan must end in
    a marker that may follow a scan. This is what libjpeg reports only as a "Corrupt JPEG data: extraneous
    bytes" warning on stderr while it returns an image: random scan data almost surely has a 0xFF followed by
    a byte no valid stream has. (Entropy data without any 0xFF byte cannot be checked this way.)
    """
    n, i, restart_interval = len(data), 2, 0
    while True:
        if i + 2 > n:
            return "premature end of the data: no EOI marker"
        if data[i] != 0xFF:
            return f"extraneous bytes before a marker at offset {i}"
        marker = data[i + 1]
        if marker == 0xFF:  # fill byte
            i += 1
            continue
        if marker == 0xD9:
            return None
        if 0xD0 <= marker <= 0xD7 or marker == 0x01:
            i += 2
            continue
        if i + 4 > n:
            return "premature end of the data in a marker segment"
        end = i + 2 + int.from_bytes(data[i + 2 : i + 4], "big")
        if end <= i + 3 or end > n:
            return f"marker 0x{marker:02X} at offset {i} has an impossible length"
        if marker == 0xDD and end >= i + 6:
            restart_interval = int.from_bytes(data[i + 4 : i + 6], "big")
        if marker != 0xDA:
            i = end
            continue
        i, problem = _scan_end(data, end, restart_interval)
        if problem is not None:
            return problem


def _scan_end(data: bytes, start: int, restart_interval: int) -> tuple[int, str | None]:
    """Offset of the marker that ends the entropy-coded data starting at `start`, or a problem."""
    scan = np.frombuffer(data, np.uint8, offset=start)
    ff = np.flatnonzero(scan[:-1] == 0xFF)
    following = scan[ff + 1]
    restarts = (following >= 0xD0) & (following <= 0xD7)
    data_bytes = (following == 0x00) | (following == 0xFF) | restarts
    ends = ff[~data_bytes]
    if ends.size == 0:
        return len(data), "premature end of the data inside a scan"
    end = int(ends[0])
    rst = following[restarts & (ff < end)]
    if rst.size:
        if not restart_interval:
            return start + end, "restart marker in a scan without a restart interval"
        expected = (0xD0 + np.arange(rst.size) % 8).astype(np.uint8)
        if not np.array_equal(rst, expected):
            return start + end, "restart markers out of sequence"
    marker = int(following[~data_bytes][0])
    if marker not in _JPEG_AFTER_SCAN:
        return start + end, f"invalid marker 0x{marker:02X} inside a scan at offset {start + end}"
    return start + end, None
