"""`FrameDecoder`: one epoch's model outputs → numbered `FrameResult`s on the original grid in the map frame.

The model's outputs come on the network grid in the model stream's world frame: the pose goes to the map frame
and the depth to map scale through the epoch's `StreamAnchors` alignment (which keeps the decoded keyframes
for a re-anchor), the intrinsics, depth and confidence back to the camera's own pixels through the epoch's
`PreprocessGeometry` (docs/engine.md, "Pre-processing").
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..result import PHASE_ANCHOR, FrameResult
from .anchors import StreamAnchors
from .decode import fov_to_intrinsics
from .preprocess import PreprocessGeometry
from .reanchor import KeyframeRecord


class FrameDecoder:
    """Decoding of epoch ``epoch`` (started by a reset for ``reason``; None for the first): its frame and
    keyframe counts, and ``geometry``, the pre-processing of its images (None until the first frame)."""

    def __init__(self, epoch: int, reason: str | None, anchors: StreamAnchors) -> None:
        self.epoch = epoch
        self.reason = reason
        self.anchors = anchors
        self.geometry: PreprocessGeometry | None = None
        self.index = 0  # frames decoded in the epoch (`FrameResult.index` of the next one)
        self.keyframes = 0

    def decode_step(
        self,
        rgbs: Sequence[np.ndarray],
        metas: Sequence[object],
        images_net: Sequence[np.ndarray],
        outputs: tuple[np.ndarray, ...],
        keyframe: bool,
        phase: int,
    ) -> list[FrameResult]:
        """The S frames of one model step → their `FrameResult`s, in order.

        Args:
            rgbs: S [H, W, 3] uint8 original images; ``metas`` their pass-through metas.
            images_net: S [h, w, 3] uint8 network inputs (kept with a keyframe for a re-anchor).
            outputs: the step's pose_enc [S, 9], depth and depth_conf [S, h, w] float32 (network grid; both
                None for a step without the depth head) and place descriptors [S, C] (None: none).
            keyframe, phase: the step's keyframe flag and phase (`PHASE_ANCHOR` / `PHASE_STREAMING`).
        """
        pose_encs, depths, confs, descriptors = outputs
        if depths is None:  # a step without the depth head (engine/stream/depth_schedule.py)
            depths = confs = [None] * len(pose_encs)
        if descriptors is None:
            descriptors = [None] * len(pose_encs)
        results = [
            self._decode(*frame, keyframe, phase)
            for frame in zip(rgbs, metas, images_net, pose_encs, depths, confs, strict=True)
        ]
        for result, descriptor in zip(results, descriptors, strict=True):
            result.place_descriptor = descriptor
        return results

    def _decode(
        self,
        rgb: np.ndarray,
        meta: object,
        image_net: np.ndarray,
        pose_enc: np.ndarray,
        depth_net: np.ndarray,
        conf_net: np.ndarray,
        keyframe: bool,
        phase: int,
    ) -> FrameResult:
        geometry = self._geometry()
        pose, depth_net = self.anchors.to_map(pose_enc, depth_net)
        k_net = fov_to_intrinsics(pose_enc, geometry.out_hw)
        if keyframe:
            self.keyframes += 1
            self.anchors.keep(KeyframeRecord(image_net, pose, depth_net, conf_net, meta))
        result = FrameResult(
            index=self.index,
            meta=meta,
            is_keyframe=keyframe,
            phase=phase,
            pose_c2w=pose,
            intrinsics=geometry.intrinsics_to_source(k_net),
            depth=None if depth_net is None else geometry.map_to_source(depth_net),
            depth_conf=None if conf_net is None else geometry.map_to_source(conf_net, fill=0.0),
            rgb=rgb,
            pose_enc=pose_enc.astype(np.float32),
            epoch=self.epoch,
            segment=self.anchors.segment,
            reset_reason=self.reason if phase == PHASE_ANCHOR else None,
        )
        self.index += 1
        return result

    def source_rgb(self, image_net: np.ndarray) -> np.ndarray:
        """A [h, w, 3] uint8 network image mapped back to the original grid: [H, W, 3] uint8 (rows removed by
        a centre crop are 0)."""
        geometry = self._geometry()
        channels = [geometry.map_to_source(image_net[..., c].astype(np.float32), 0.0) for c in range(3)]
        return np.clip(np.rint(np.stack(channels, -1)), 0, 255).astype(np.uint8)

    def _geometry(self) -> PreprocessGeometry:
        if self.geometry is None:
            raise RuntimeError("StreamingSession: decoding before the input geometry is known")
        return self.geometry
