"""A loop keyframe made from one posed `FrameResult` (engine/loop/keyframes.py `Keyframe`): its pose in the
map (the closer's correction ∘ its stream pose), its points decimated in its own camera frame, its place
descriptor (the live step's, else one described now), and what verification needs at the network size (the
image, a decimated depth and confidence). The closer makes its keyframes, and the relocaliser its queries,
through `LoopCloser.keyframe_of`.
"""

from __future__ import annotations

import cv2
import numpy as np

from ..geometry import Sim3
from ..mapping.frames import camera_points
from ..result import FrameResult
from ..stream.preprocess import preprocess_geometry, resize_uint8
from .config import LoopClosureConfig
from .descriptor import Describe
from .keyframes import Keyframe
from .similarity import compose, from_pose


def build_keyframe(
    result: FrameResult,
    stamp_s: float,
    key: int,
    correction: Sim3,
    config: LoopClosureConfig,
    image_width: int,
    describe: Describe,
) -> Keyframe:
    """The keyframe of `result` (stream frame: `pose_c2w` [4, 4], `depth` / `depth_conf` [H, W], `rgb`
    [H, W, 3], `intrinsics` [3, 3]) at `stamp_s` s with key `key`, placed in the map by `correction`
    (T_map_stream); images resized to the network input of `image_width`."""
    geometry = preprocess_geometry(result.image_hw, image_width)
    image = resize_uint8(result.rgb, geometry)
    (resized_h, resized_w), top, out_h = geometry.resized_hw, geometry.crop_top, geometry.out_hw[0]

    def network(values: np.ndarray) -> np.ndarray:
        grid = cv2.resize(
            np.nan_to_num(values, nan=0.0).astype(np.float32),
            (resized_w, resized_h),
            interpolation=cv2.INTER_NEAREST,
        )
        return grid[top : top + out_h][:: config.depth_stride, :: config.depth_stride].copy()

    mask = result.depth_conf > config.conf_threshold
    cam_xyz, flat = camera_points(result.depth, result.intrinsics, mask, config.point_stride)
    stream_pose = from_pose(result.pose_c2w)
    return Keyframe(
        key=key,
        stamp_s=stamp_s,
        stream_pose=stream_pose,
        pose=compose(correction, stream_pose),
        points=cam_xyz.astype(np.float32),
        colors=result.rgb.reshape(-1, 3).take(flat, axis=0),
        descriptor=describe(image) if result.place_descriptor is None else result.place_descriptor,
        image=image,
        depth=network(result.depth),
        conf=network(result.depth_conf),
        depth_stride=config.depth_stride,
    )
