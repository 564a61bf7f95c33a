"""Frame intake: image callback → header budget → RGB conversion → size, frame id and stream checks →
rejection counting → hand-over to the queue.

`FrameIntake` creates the node's input subscriptions (`image` or `image/compressed`, and `camera_info`) and is
what they call. It never blocks and never raises (a raising subscription callback would end the executor's
spin): an image the node cannot use is counted by cause (`rejected_<cause>` in /diagnostics), logged once per
cause (then at most every 10 s; `CauseLog`) and skipped. Causes: those of `ImageConversionError`
(conversions.py: `malformed_image`, `oversized_image`, `unsupported_encoding`, `undecodable_image`),
`unsupported_size`, `invalid_frame_id`, `unconfirmed_stream_change` (this file, streams.py) and
`conversion_error` (any other exception of a converter, e.g. from cv_bridge). The pixel budget
(`max_input_pixels`, `max_aspect_ratio`) is checked from the message header before anything is decoded or
copied. The subscriptions are created once and kept (entities.py); while the node is not active a frame is
only counted (`frames_ignored_inactive`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection
from dataclasses import dataclass

import numpy as np
from rclpy.callback_groups import CallbackGroup
from rclpy.node import Node
from rclpy.qos import HistoryPolicy, QoSProfile, ReliabilityPolicy
from rclpy.subscription import Subscription
from sensor_msgs.msg import CameraInfo, CompressedImage, Image
from std_msgs.msg import Header

from ...engine.face import PATCH_SIZE, preprocess_geometry
from ..diagnostics.stats import CauseLog
from ..messages.conversions import (
    ImageConversionError,
    check_image_layout,
    check_pixel_budget,
    compressed_to_rgb,
    image_header_size,
    image_to_rgb,
)
from ..params.declare import NodeParams
from .qos_check import incompatible_qos_warning
from .streams import (
    DEFAULT_CAMERA_FRAME,
    CameraFrames,
    StreamGuard,
    StreamKey,
    frame_id_problem,
    reserved_frames,
)


@dataclass(frozen=True)
class InputFrame:
    """A converted camera frame waiting for inference.

    Attributes:
        header: the input image header (stamp and frame_id reused by every output of this frame).
        rgb: `[H, W, 3]` uint8 at the input resolution.
        received: `time.monotonic()` at the callback (latency origin).
        stream: the camera's stream token when it arrived (`CameraState.stream`, None before the camera's
            engine exists); a frame of a stream left since (a reset, a loaded session) is discarded.
    """

    header: Header
    rgb: np.ndarray
    received: float
    stream: int | None


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


def reserved_frame_ids(params: NodeParams) -> frozenset[str]:
    """Frame ids no camera may have (streams.py `reserved_frames`): map, odometry and base frames and the
    per-camera map frames."""
    return reserved_frames(params.map_frame, params.odom_frame, params.base_frame, params.cameras)


class FrameIntake:
    """The input subscriptions and their callbacks; `camera_info` holds the latest input CameraInfo (or None).

    Args:
        causes: counts and logs the rejections (`rejected_<cause>` in /diagnostics).
        params: returns the current parameter snapshot (image width, pixel budget, frames; live ones apply
            to the next frame).
        enqueue: takes an accepted frame's `(header, rgb [H, W, 3] uint8, received monotonic s)`; must not
            block (the node stamps the stream token and submits to the drop-oldest inference queue).
        active: whether the node is active; frames arriving otherwise are counted by `on_inactive`.
        on_inactive: called for each frame that arrives while not active (counted, nothing else).
        reserved_frames: the frame ids a camera must not have (default: `reserved_frame_ids`).
        topic_prefix: prepended to the input topics (`<camera>/` with several cameras, else "").
        frames: the node's frame ids by camera (one frame id, one camera); None: this intake alone.
        camera: this camera's name in `frames`.
    """

    def __init__(
        self,
        causes: CauseLog,
        params: Callable[[], NodeParams],
        enqueue: Callable[[Header, np.ndarray, float], None],
        active: Callable[[], bool] = lambda: True,
        on_inactive: Callable[[], None] = lambda: None,
        reserved_frames: Callable[[NodeParams], Collection[str]] = reserved_frame_ids,
        topic_prefix: str = "",
        frames: CameraFrames | None = None,
        camera: str = "",
    ) -> None:
        self._frames = frames if frames is not None else CameraFrames()
        self._camera = camera
        self._prefix = topic_prefix
        self._causes = causes
        self._params = params
        self._enqueue = enqueue
        self._active = active
        self._on_inactive = on_inactive
        self._reserved_frames = reserved_frames
        self._subscribed: tuple | None = None  # (transport, reliability, depth) of the subscriptions in use
        self.guard = StreamGuard(params().stream_change_confirm_frames)
        self.camera_info: CameraInfo | None = None

    def subscribe(self, node: Node, params: NodeParams, group: CallbackGroup) -> list[Subscription]:
        """Create (or, through a `NodeFacade`, reuse) the image subscription (`image_transport`: raw `image`
        or `image/compressed`; first in the list) and the `camera_info` one, in `group` (mutually exclusive:
        frames in order). Only the subscriptions of the latest call deliver frames: kept ones of an earlier
        transport or QoS are gated off."""
        qos = image_qos(params)
        key = (params.image_transport, params.qos_reliability, params.qos_depth)
        self._subscribed = key

        def gated(callback: Callable[[object], None]) -> Callable[[object], None]:
            def deliver(msg: object) -> None:
                if self._subscribed == key:
                    callback(msg)

            return deliver

        def subscribe(msg_type: type, topic: str, callback: Callable[[object], None]) -> object:
            events = incompatible_qos_warning(node, self._prefix + topic, qos)  # names topic, QoS, the fix
            return node.create_subscription(
                msg_type,
                self._prefix + topic,
                gated(callback),
                qos,
                callback_group=group,
                event_callbacks=events,
            )

        if params.image_transport == "compressed":
            image = subscribe(CompressedImage, "image/compressed", self.on_compressed)
        else:
            image = subscribe(Image, "image", self.on_image)
        info = subscribe(CameraInfo, "camera_info", self.on_camera_info)
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
        """Never raises (a raising subscription callback would end the executor's spin)."""
        received = time.monotonic()
        try:
            if not self._active():
                self._on_inactive()
                return
            params = self._params()
            rgb = self._accept(msg, convert, params)
            if rgb is None:
                return
            self._enqueue(msg.header, rgb, received)
        except ImageConversionError as exc:
            self._causes.rejected(exc.cause, str(exc))
        except Exception as exc:  # noqa: BLE001 - a raising subscription callback would end the executor's spin
            reason = f"unexpected {type(exc).__name__} while converting: {exc}"
            self._causes.rejected("conversion_error", reason)

    def _accept(
        self,
        msg: Image | CompressedImage,
        convert: Callable[[Image | CompressedImage], np.ndarray],
        params: NodeParams,
    ) -> np.ndarray | None:
        """The frame's RGB pixels, or None when the stream guard rejected it (counted here).

        Raises:
            ImageConversionError: any other rejection, with its cause.
        """
        if isinstance(msg, Image):
            check_image_layout(msg)  # malformed before oversized: the header must match the data first
        check_pixel_budget(image_header_size(msg), params.max_input_pixels, params.max_aspect_ratio)
        child = params.camera_frame or msg.header.frame_id or DEFAULT_CAMERA_FRAME
        problem = frame_id_problem(child, self._reserved_frames(params))
        problem = problem or self._frames.claim(self._camera, child)
        if problem is not None:
            raise ImageConversionError("invalid_frame_id", f"{problem}; expected a camera optical frame")
        rgb = convert(msg)
        check_size(rgb, params.model_image_width)
        self.guard.confirm_frames = params.stream_change_confirm_frames
        verdict = self.guard.check(StreamKey(rgb.shape[0], rgb.shape[1], msg.header.frame_id))
        if not verdict.accept:
            self._causes.rejected("unconfirmed_stream_change", verdict.reason)
            return None
        return rgb
