"""Image pre-processing as the reference (`load_and_preprocess_images`, mode "crop") and its inverse mapping.

The reference resizes an RGB image with PIL bicubic to width ``image_width`` (518) and height
``round(h * image_width / w / PATCH_SIZE) * PATCH_SIZE`` (14), centre-crops the rows to ``image_width`` when
that height is larger (portrait images become square), and divides by 255. :class:`PreprocessGeometry`
records that resize and crop so that everything the network predicts in pre-processed pixels (intrinsics,
depth) maps back to the pixel grid of the ORIGINAL image.

Pixel convention (as ROS ``CameraInfo`` and OpenCV): integer pixel index ``u`` is the centre of column ``u``;
a resize by factor ``s`` maps ``u_src + 0.5 = (u_dst + 0.5) / s`` (the half-pixel-centre rule PIL and
``cv2.resize`` use).
"""

from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np
from PIL import Image

from lingbot_map_ros.model.config import PATCH_SIZE, check_image_width


@dataclass(frozen=True)
class PreprocessGeometry:
    """Resize + crop that turns an original image into the network input.

    Attributes:
        source_hw: (H, W) of the original image, pixels.
        resized_hw: (h, w) after the bicubic resize, before the crop.
        crop_top: rows removed at the top of the resized image (0 unless the image was portrait).
        out_hw: (h, w) of the network input; both multiples of ``PATCH_SIZE``.
    """

    source_hw: tuple[int, int]
    resized_hw: tuple[int, int]
    crop_top: int
    out_hw: tuple[int, int]

    @property
    def scale_xy(self) -> tuple[float, float]:
        """Resize factors (resized / source) along x (columns) and y (rows)."""
        return (self.resized_hw[1] / self.source_hw[1], self.resized_hw[0] / self.source_hw[0])

    def intrinsics_to_source(self, k_net: np.ndarray) -> np.ndarray:
        """Map a pinhole matrix from network-input pixels to original-image pixels.

        Args:
            k_net: [3, 3] (or [..., 3, 3]) intrinsics in pixels of the network input.
        Returns:
            [..., 3, 3] float64 intrinsics in pixels of the original image (crop undone, resize undone).
        """
        k = np.array(k_net, dtype=np.float64, copy=True)
        sx, sy = self.scale_xy
        fx, fy = k[..., 0, 0], k[..., 1, 1]
        cx, cy = k[..., 0, 2], k[..., 1, 2] + self.crop_top
        k[..., 0, 0] = fx / sx
        k[..., 1, 1] = fy / sy
        k[..., 0, 1] = k[..., 0, 1] / sx
        k[..., 0, 2] = (cx + 0.5) / sx - 0.5
        k[..., 1, 2] = (cy + 0.5) / sy - 0.5
        return k

    def map_to_source(self, image_net: np.ndarray, fill: float = np.nan) -> np.ndarray:
        """Resample a per-pixel map (depth, confidence) from the network grid to the original image grid.

        Bilinear (half-pixel centres). Rows of the original image that the centre crop removed get ``fill``.

        Args:
            image_net: [h, w] float32 map on the network input grid (``out_hw``).
            fill: value for original pixels outside the crop.
        Returns:
            [H, W] float32 on the original grid (``source_hw``).
        """
        if image_net.shape != self.out_hw:
            raise ValueError(f"expected a map of shape {self.out_hw}, got {image_net.shape}")
        src_h, src_w = self.source_hw
        net = np.ascontiguousarray(image_net, dtype=np.float32)
        if self.crop_top == 0 and self.resized_hw == self.out_hw:
            return cv2.resize(net, (src_w, src_h), interpolation=cv2.INTER_LINEAR)
        # Crop undone: place the map in the resized frame, then scale only the covered rows.
        sy = self.resized_hw[0] / src_h
        out = np.full((src_h, src_w), fill, dtype=np.float32)
        # Original rows whose centres fall inside the kept band [crop_top, crop_top + h) of the resized image.
        row_lo = int(np.ceil(self.crop_top / sy - 0.5))
        row_hi = int(np.floor((self.crop_top + self.out_hw[0]) / sy - 0.5))
        rows = np.arange(max(row_lo, 0), min(row_hi, src_h - 1) + 1)
        y_net = (rows + 0.5) * sy - 0.5 - self.crop_top
        map_y = np.repeat(y_net[:, None], src_w, axis=1).astype(np.float32)
        x_net = (np.arange(src_w) + 0.5) * self.scale_xy[0] - 0.5
        map_x = np.repeat(x_net[None, :], rows.size, axis=0).astype(np.float32)
        out[rows] = cv2.remap(net, map_x, map_y, cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE)
        return out


def preprocess_geometry(source_hw: tuple[int, int], image_width: int = 518) -> PreprocessGeometry:
    """The reference's resize/crop for an image of ``source_hw`` = (H, W).

    Raises:
        ValueError: ``image_width`` not a positive multiple of ``PATCH_SIZE``, or an image too small / too
            flat for one patch row.
    """
    check_image_width(image_width)
    src_h, src_w = int(source_hw[0]), int(source_hw[1])
    if src_h <= 0 or src_w <= 0:
        raise ValueError(f"expected a non-empty image, got H×W = {src_h}×{src_w}")
    new_h = round(src_h * image_width / src_w / PATCH_SIZE) * PATCH_SIZE
    if new_h < PATCH_SIZE:
        raise ValueError(
            f"image of H×W = {src_h}×{src_w} resized to width {image_width} has height {new_h} < {PATCH_SIZE}"
        )
    crop_top = (new_h - image_width) // 2 if new_h > image_width else 0
    out_h = min(new_h, image_width)
    return PreprocessGeometry((src_h, src_w), (new_h, image_width), crop_top, (out_h, image_width))


def resize_uint8(rgb: np.ndarray, geometry: PreprocessGeometry) -> np.ndarray:
    """PIL-bicubic resize and centre crop of an RGB image; the network input before /255.

    Args:
        rgb: [H, W, 3] uint8 RGB with (H, W) = ``geometry.source_hw``.
    Returns:
        [h, w, 3] uint8 with (h, w) = ``geometry.out_hw``, its own memory: a copy when rows were cropped,
        so no view keeps the (for a tall image, much larger) resized intermediate alive while the frame waits
        in a queue (issue 16: a 14x20000 frame's crop pinned a 1.15 GB intermediate). Cropping before the
        resize (PIL's ``box``) would avoid the intermediate too but is not bit-identical to the reference;
        the node bounds it instead with ``max_aspect_ratio`` before pre-processing.
    """
    h, w = geometry.resized_hw
    if (h, w) == tuple(rgb.shape[:2]) and geometry.out_hw == (h, w):
        return rgb  # already at the network size: PIL's resize to the same size is a copy, nothing to do
    resized = np.asarray(Image.fromarray(rgb, mode="RGB").resize((w, h), Image.Resampling.BICUBIC))
    top = geometry.crop_top
    if top == 0 and geometry.out_hw[0] == h:
        return resized
    return resized[top : top + geometry.out_hw[0]].copy()


def to_chw_float(rgb_net: np.ndarray) -> np.ndarray:
    """[h, w, 3] uint8 → [3, h, w] float32 in [0, 1] (the model input before its mean/std normalisation)."""
    return np.ascontiguousarray(rgb_net.transpose(2, 0, 1), dtype=np.float32) / np.float32(255.0)


def validate_rgb(rgb: object) -> np.ndarray:
    """Check that ``rgb`` is an [H, W, 3] uint8 array; return it (C-contiguous).

    Raises:
        ValueError: naming the expected type/shape/dtype and what was given.
    """
    if not isinstance(rgb, np.ndarray):
        raise ValueError(f"expected an RGB image as numpy.ndarray [H, W, 3] uint8, got {type(rgb).__name__}")
    if rgb.ndim != 3 or rgb.shape[2] != 3:
        raise ValueError(f"expected an RGB image of shape [H, W, 3], got shape {tuple(rgb.shape)}")
    if rgb.dtype != np.uint8:
        raise ValueError(f"expected an RGB image of dtype uint8, got {rgb.dtype}")
    return np.ascontiguousarray(rgb)


def preprocess(rgb: np.ndarray, image_width: int = 518) -> tuple[np.ndarray, PreprocessGeometry]:
    """Pre-process one original RGB image as the reference does.

    Args:
        rgb: [H, W, 3] uint8 RGB.
        image_width: network input width (multiple of ``PATCH_SIZE``; 518 for the released model).
    Returns:
        (image [3, h, w] float32 in [0, 1], geometry) with (h, w) = ``geometry.out_hw``.
    """
    rgb = validate_rgb(rgb)
    geometry = preprocess_geometry(rgb.shape[:2], image_width)
    return to_chw_float(resize_uint8(rgb, geometry)), geometry
