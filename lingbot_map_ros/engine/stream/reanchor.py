"""Long-stream re-anchoring: carry the trajectory across a restart of the model's stream.

The reference's 3D-RoPE table ends at 1,024 cached frames (it crashes there) and its quality degrades past the
~320 views it was trained on. A `StreamingSession` therefore restarts the model stream once
``max_stored_frames`` frames are cached: it re-runs the anchor phase on the most recent ``scale_frames``
keyframes (whose poses and depths were already published) and maps the new stream's world frame onto the
session's map frame with the Sim(3) below, as the reference's windowed mode aligns overlapping windows:

* rotation R = R_old · R_newᵀ of the anchor = the most recent re-anchored keyframe (best continuity for the
  frames that follow it);
* scale s = median over the re-anchored frames' pixels of depth_old / depth_new (pixels confident in both
  predictions), clamped to [1e-3, 1e3];
* translation t = c_old − s · R · c_new of the anchor's camera centre.

Every later pose of the new stream is published as ``align.apply_pose(c2w_new)`` with depth × s, so the
anchor keyframe lands exactly on its published pose and the map stays consistent.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..geometry import Sim3

SCALE_CLAMP = (1e-3, 1e3)
MIN_SCALE_PIXELS = 64


@dataclass
class KeyframeRecord:
    """What a re-anchor needs of one stored keyframe (bounded: the session keeps the last ``scale_frames``).

    Attributes:
        image_net: [h, w, 3] uint8 network input before /255 (re-feeding it reproduces the input exactly).
        pose_c2w: [4, 4] float64 published camera → map pose.
        depth_net: [h, w] float32 published depth (map scale) on the network grid; None for a keyframe
            whose step skipped the depth head (`SessionConfig.depth_every_n`).
        conf_net: [h, w] float32 confidence on the network grid (None with ``depth_net``).
        meta: the frame's ``push`` meta (e.g. the ROS header), kept for a saved session's anchor stamps.
    """

    image_net: np.ndarray
    pose_c2w: np.ndarray
    depth_net: np.ndarray | None
    conf_net: np.ndarray | None
    meta: object = None


def estimate_alignment(
    records: list[KeyframeRecord],
    new_c2w: np.ndarray,
    new_depth: np.ndarray,
    new_conf: np.ndarray,
    conf_threshold: float = 1.5,
) -> Sim3:
    """Sim(3) from a restarted stream's world frame to the session's map frame.

    Args:
        records: the re-anchored keyframes, oldest first (their published poses/depths; the scale comes
            from those with a depth, 1 when none has one).
        new_c2w: [S0, 4, 4] their poses predicted by the restarted stream (its own world frame).
        new_depth: [S0, h, w] their depths predicted by the restarted stream.
        new_conf: [S0, h, w] the matching confidences.
        conf_threshold: pixels for the scale need confidence above this in both predictions.
    Returns:
        ``align``: ``align.apply_pose(new_c2w[-1]) == records[-1].pose_c2w``, depth_map = s · depth_new.
    """
    if not records or new_c2w.shape[0] != len(records) or new_depth.shape[0] != len(records):
        raise ValueError(
            f"expected one new pose and depth per record ({len(records)}), got {new_c2w.shape[0]} poses "
            f"and {new_depth.shape[0]} depths"
        )
    scale = alignment_scale(
        records,
        torch.from_numpy(np.asarray(new_depth)),
        torch.from_numpy(np.asarray(new_conf)),
        conf_threshold,
    )
    return alignment_at_anchor(records, new_c2w, float(scale))


def alignment_scale(
    records: list[KeyframeRecord], new_depth: torch.Tensor, new_conf: torch.Tensor, conf_threshold: float
) -> torch.Tensor:
    """The scale of `estimate_alignment` (module doc), computed where ``new_depth`` / ``new_conf``
    ([S0, h, w] float) are (on the GPU for a prepared re-anchor: no host work, no synchronisation; the
    records' depths travel there). Returns a float64 scalar tensor, clamped, 1 without pixels."""
    device = new_depth.device
    with_depth = [i for i, r in enumerate(records) if r.depth_net is not None]  # the scale's pixels
    if not with_depth:
        return torch.ones((), dtype=torch.float64, device=device)

    def upload(arrays: list[np.ndarray]) -> torch.Tensor:
        host = torch.from_numpy(np.stack(arrays))
        if device.type == "cuda":
            host = host.pin_memory()
        return host.to(device, non_blocking=True)

    old_depth = upload([records[i].depth_net for i in with_depth]).double()
    old_conf = upload([records[i].conf_net for i in with_depth])
    new_depth = new_depth[with_depth].double()
    new_conf = new_conf[with_depth]
    valid = torch.isfinite(old_depth) & torch.isfinite(new_depth) & (old_depth > 0) & (new_depth > 0)
    confident = valid & (old_conf > conf_threshold) & (new_conf > conf_threshold)
    use = torch.where(confident.sum() >= MIN_SCALE_PIXELS, confident, valid)
    ratios = torch.where(use, old_depth / torch.where(use, new_depth, 1.0), torch.inf).flatten()
    count = use.sum()
    # the median of the used ratios (the unused sort to the end as inf); no host synchronisation
    ordered = torch.sort(ratios).values
    middle = torch.stack(((count - 1).clamp(min=0) // 2, (count // 2).clamp(max=ratios.numel() - 1)))
    low, high = ordered.index_select(0, middle)  # tensor indices: no host synchronisation
    median = torch.where(count > 0, (low + high) / 2, torch.ones_like(low))
    return median.clamp(*SCALE_CLAMP)


def alignment_at_anchor(records: list[KeyframeRecord], new_c2w: np.ndarray, scale: float) -> Sim3:
    """The Sim(3) of `estimate_alignment` with its ``scale``: the latest record's new pose ``new_c2w[-1]``
    ([S0, 4, 4], the restarted stream's frame) lands on its published pose."""
    anchor_old = records[-1].pose_c2w
    anchor_new = np.asarray(new_c2w[-1], dtype=np.float64)
    rotation = anchor_old[:3, :3] @ anchor_new[:3, :3].T
    # Re-orthonormalise (the model's rotations are exact up to float32 rounding).
    u, _, vt = np.linalg.svd(rotation)
    rotation = u @ np.diag([1.0, 1.0, np.linalg.det(u @ vt)]) @ vt
    translation = anchor_old[:3, 3] - scale * rotation @ anchor_new[:3, 3]
    return Sim3(rotation, translation, scale)
