"""`FrameResult`: what the engine reports for one input frame (docs/architecture.md, engine/ contract)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

PHASE_ANCHOR = 1
PHASE_STREAMING = 2


@dataclass
class FrameResult:
    """Decoded outputs of one frame, in the map frame = the model's world frame (OpenCV optical axes).

    Attributes:
        index: frames pushed since the last reset (0-based; the anchor frames are 0..S0-1).
        meta: whatever the caller passed to ``push`` (e.g. the ROS header), untouched.
        is_keyframe: the frame was stored in the model's caches (anchor frames are keyframes).
        phase: 1 = anchor phase, 2 = streaming.
        pose_c2w: [4, 4] float64, camera (OpenCV optical) → map.
        intrinsics: [3, 3] float64 pinhole matrix in pixels of the ORIGINAL image.
        depth: [H, W] float32 z-depth at the original resolution (NaN where the centre crop removed rows).
            Up to scale; consistent with ``pose_c2w``. None when the step skipped the depth head
            (``SessionConfig.depth_every_n``, engine/stream/depth_schedule.py; then ``depth_conf`` is None
            too).
        depth_conf: [H, W] float32 confidence ≥ 1 (0 where the crop removed rows).
        rgb: [H, W, 3] uint8, the original image.
        pose_enc: [9] float32, the pose encoding as the model returned it (before long-stream alignment).
        epoch: number of resets before this frame (a new epoch starts a new map frame).
        segment: long-stream re-anchors in this epoch before this frame (the trajectory stays continuous).
        reset_reason: set on the first result(s) of an epoch that started with an automatic reset
            (e.g. a change of resolution), else None.
        timings_ms: per-stage wall time of the step that produced this frame (shared by the anchor frames).
        place_descriptor: [C] float32 unit vector, the frame's DINOv2 patch tokens pooled inside its model
            step (the loop closer's place descriptor; None when the model returned none, e.g. a test double).
    """

    index: int
    meta: object
    is_keyframe: bool
    phase: int
    pose_c2w: np.ndarray
    intrinsics: np.ndarray
    depth: np.ndarray | None
    depth_conf: np.ndarray | None
    rgb: np.ndarray
    pose_enc: np.ndarray
    epoch: int = 0
    segment: int = 0
    reset_reason: str | None = None
    timings_ms: dict[str, float] = field(default_factory=dict)
    place_descriptor: np.ndarray | None = None

    @property
    def image_hw(self) -> tuple[int, int]:
        """(H, W) of the original image."""
        return self.rgb.shape[0], self.rgb.shape[1]
