"""Frame intake: image callback → RGB conversion → size check → rejection counting → hand-over to the queue.

`FrameIntake` creates the node's input subscriptions (`image` or `image/compressed`, and `camera_info`) and is
what they call. It never blocks and never raises (a raising subscription callback would end the executor's
spin): an image the node cannot use is counted by cause (`rejected_<cause>` in /diagnostics), logged once per
cause (then at most every 10 s; `CauseLog`) and skipped. Causes: those of `ImageConversionError`
(conversions.py: `malformed_image`, `oversized_image`, `unsupported_encoding`, `undecodable_image`),
`unsupported_size` (this file) and `conversion_error` (any other exception of a converter, e.g. from
cv_bridge).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from rclpy.callback_groups import CallbackGroup
from rclpy.node import Node
from rclpy.qos import HistoryPolicy, QoSProfile, ReliabilityPolicy
from rclpy.subscription import Subscription
from sensor_msgs.msg import CameraInfo, CompressedImage, Image
from std_msgs.msg import Header

from ..engine.preprocess import PATCH_SIZE, preprocess_geometry
from .conversions import ImageConversionError, compressed_to_rgb, image_to_rgb
from .diagnostics import CauseLog
from .params import NodeParams


@dataclass(frozen=True)
class InputFrame:
    """A converted camera frame waiting for inference.

    Attributes:
        header: the input image header (stamp and frame_id reused by every output of this frame).
        rgb: `[H, W, 3]` uint8 at the input resolution.
        received: `time.monotonic()` at the callback (latency origin).
        generation: reset counter when it arrived; frames from before a reset are discarded.
    """

    header: Header
    rgb: np.ndarray
    received: float
    generation: int


def check_size(rgb: np.ndarray, image_width: int) -> None:
    """Reject a decoded image the network cannot use (it would otherwise reset the stream as a new
    resolution): a side under one patch, or so flat that the resized input has no patch row.

    Args:
        rgb: `[H, W, 3]` uint8 decoded image.
        image_width: the network input width in pixels (`model.image_width`).

    Raises:
        ImageConversionError: cause `unsupported_size`.
    """
    height, width = rgb.shape[:2]
    try:
        if min(height, width) < PATCH_SIZE:
            raise ValueError(f"an image of {width}x{height} px has a side under one {PATCH_SIZE} px patch")
        preprocess_geometry((height, width), image_width)
    except ValueError as exc:
        raise ImageConversionError(
            "unsupported_size", f"{exc}; expected at least {PATCH_SIZE}x{PATCH_SIZE} px and one patch row"
        ) from exc


def image_qos(params: NodeParams) -> QoSProfile:
    """QoS of the input subscriptions: keep last `qos.depth`, `qos.reliability` (best effort: sensor data)."""
    reliable = params.qos_reliability == "reliable"
    return QoSProfile(
        depth=params.qos_depth,
        history=HistoryPolicy.KEEP_LAST,
        reliability=ReliabilityPolicy.RELIABLE if reliable else ReliabilityPolicy.BEST_EFFORT,
    )


class FrameIntake:
    """The input subscriptions and their callbacks; `camera_info` holds the latest input CameraInfo (or None).

    Args:
        causes: counts and logs the rejections (`rejected_<cause>` in /diagnostics).
        image_width: returns the current `model.image_width` (network input width, px).
        enqueue: takes an accepted frame's `(header, rgb [H, W, 3] uint8, received monotonic s)`; must not
            block (the node stamps the stream generation and submits to the drop-oldest inference queue).
    """

    def __init__(
        self,
        causes: CauseLog,
        image_width: Callable[[], int],
        enqueue: Callable[[Header, np.ndarray, float], None],
    ) -> None:
        self._causes = causes
        self._image_width = image_width
        self._enqueue = enqueue
        self.camera_info: CameraInfo | None = None

    def subscribe(self, node: Node, params: NodeParams, group: CallbackGroup) -> list[Subscription]:
        """Create the image subscription (`image_transport`: raw `image` or `image/compressed`; first in the
        list) and the optional `camera_info` one, in `group` (mutually exclusive: frames in order)."""
        qos = image_qos(params)
        if params.image_transport == "compressed":
            image = node.create_subscription(
                CompressedImage, "image/compressed", self.on_compressed, qos, callback_group=group
            )
        else:
            image = node.create_subscription(Image, "image", self.on_image, qos, callback_group=group)
        info = node.create_subscription(
            CameraInfo, "camera_info", self.on_camera_info, qos, callback_group=group
        )
        return [image, info]

    def on_image(self, msg: Image) -> None:
        """`image` subscription (sensor_msgs/Image)."""
        self._intake(msg, image_to_rgb)

    def on_compressed(self, msg: CompressedImage) -> None:
        """`image/compressed` subscription (sensor_msgs/CompressedImage, jpeg/png)."""
        self._intake(msg, compressed_to_rgb)

    def on_camera_info(self, msg: CameraInfo) -> None:
        """`camera_info` subscription: kept for the intrinsics comparison in /diagnostics."""
        self.camera_info = msg

    def _intake(
        self, msg: Image | CompressedImage, convert: Callable[[Image | CompressedImage], np.ndarray]
    ) -> None:
        received = time.monotonic()
        try:
            rgb = convert(msg)
            check_size(rgb, self._image_width())
        except ImageConversionError as exc:
            self._causes.rejected(exc.cause, str(exc))
            return
        except Exception as exc:  # noqa: BLE001 - a raising subscription callback would end the executor's spin
            reason = f"unexpected {type(exc).__name__} while converting: {exc}"
            self._causes.rejected("conversion_error", reason)
            return
        self._enqueue(msg.header, rgb, received)
