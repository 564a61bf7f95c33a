"""`StreamAnchors`: the anchors of one epoch's model stream and where they put it in the map frame.

An epoch starts in the anchor phase: the first ``scale_frames`` (S0) frames are buffered (``pending``) and run
together. From then on the stream has S0 anchors (``anchors``), its streaming frames follow the keyframe
policy (`next_keyframe`), and the last S0 keyframes are kept (``records``, publish-and-drop) so that the
stream can be restarted on them (`reanchor`: after ``max_stored_frames`` cached frames, or after a failed
step) and re-aligned onto the map frame (``align``, `reanchor.py`). At the cache bound the restart is
prepared over the frames before it (``prepared``, `prepared_reanchor.py`) where the model can
(``reanchor_work`` runs each frame's share). The session makes a new `StreamAnchors` per epoch.
"""

from __future__ import annotations

import logging
from collections import deque

import numpy as np

from ..config import SessionConfig
from ..contracts import AnchorState
from ..geometry import Sim3
from .decode import pose_encoding_to_c2w
from .model_steps import ModelSteps
from .prepared_reanchor import PreparedReanchor
from .reanchor import KeyframeRecord, estimate_alignment

_LOG = logging.getLogger(__name__)


class StreamAnchors:
    """Anchor phase, anchors, kept keyframes and map-frame alignment of one epoch (module doc)."""

    def __init__(self, config: SessionConfig, prepare_groups: int = 0) -> None:
        self.config = config
        self.prepare_groups = prepare_groups  # frames of a prepared re-anchor's model work (0: none)
        self.prepared: PreparedReanchor | None = None
        self.anchoring = True  # the anchor phase collects ``pending``
        self.pending: list[tuple[np.ndarray, object, np.ndarray]] = []  # (rgb, meta, image_net)
        self.anchors: list[tuple[np.ndarray, object]] = []  # the model stream's anchors: (image_net, meta)
        self.records: deque[KeyframeRecord] = deque(maxlen=config.scale_frames)
        self.align = Sim3.identity()  # model stream's world frame -> map frame
        self.segment = 0  # re-anchors in the epoch
        self.streaming_count = 0  # streaming frames since the last (re-)anchor: keyframe policy
        self.needs_reanchor = False  # a failed step reset the caches; the next frame re-anchors

    def add_pending(
        self, rgb: np.ndarray, meta: object, image_net: np.ndarray
    ) -> list[tuple[np.ndarray, object, np.ndarray]]:
        """Buffer an anchor-phase frame; all S0 of them once complete (the buffer is then empty), else []."""
        self.pending.append((rgb, meta, image_net))
        if len(self.pending) < self.config.scale_frames:
            return []
        pending, self.pending = self.pending, []
        return pending

    def anchored(self, anchors: list[tuple[np.ndarray, object]], align: Sim3 | None = None) -> None:
        """The model stream was anchored on ``anchors`` ((image_net, meta) each); ``align`` places a restarted
        or restored stream in the map frame (None: the epoch's first stream, identity)."""
        self.anchoring = False
        self.anchors = anchors
        if align is not None:
            self.align = align

    def next_keyframe(self) -> bool:
        """Whether the next streaming frame is a keyframe (``j % keyframe_interval == 0``); counts it."""
        keyframe = self.streaming_count % self.config.keyframe_interval == 0
        self.streaming_count += 1
        return keyframe

    def reanchor_due(self, frames_stored: int) -> bool:
        """A re-anchor step that needs the frame in flight completed runs before the next step: a restart
        after a failed step or with the cache full, or a prepared re-anchor that starts (it takes the kept
        keyframes) or takes over (later frames decode in the new alignment)."""
        if self.needs_reanchor or frames_stored >= self.config.max_stored_frames:
            return True
        if self.prepared is None:
            return self._prepare_due(frames_stored)
        return self.prepared.ready

    def reanchor_busy(self, frames_stored: int) -> bool:
        """`reanchor_work` has work before the next step (due, or a prepared re-anchor under way)."""
        return self.prepared is not None or self.reanchor_due(frames_stored)

    def reanchor_work(self, steps: ModelSteps) -> bool:
        """Before a streaming step: this frame's re-anchor work; True when the stream was restarted.

        A failed step's recovery, or a full cache with nothing prepared, re-anchors at once (`reanchor`);
        from about ``reanchor_steps + 1`` frames before the bound on (`_prepare_due`), a `PreparedReanchor`
        advances by one group per frame and takes over when ready (finished at once if the bound comes
        first)."""
        frames = steps.state.frames_stored
        full = frames >= self.config.max_stored_frames
        if self.needs_reanchor:
            self.prepared = None
            self.reanchor(steps)
            return True
        if self.prepared is None:
            if not self._prepare_due(frames):
                if full:
                    self.reanchor(steps)
                    return True
                return False
            self.prepared = PreparedReanchor(
                steps, list(self.records), self.prepare_groups, self.config.realign_conf_threshold
            )
        prepared = self.prepared
        if full and not prepared.ready:
            prepared.finish(steps)
        if not prepared.ready:
            prepared.advance(steps)
            return False
        self.prepared = None
        align = prepared.take_over()
        self._restarted(prepared.records, align, f"prepared beside the stream, at {frames} stored frames")
        return True

    def _prepare_due(self, frames_stored: int) -> bool:
        """Whether a prepared re-anchor starts now: its model work and alignment take ``groups + 1`` frames,
        which store about ``(groups + 1) / keyframe_interval`` frames: they end at the bound (``groups`` 0:
        the model has no anchor pass, or ``reanchor_steps`` is 0)."""
        if self.anchoring or self.needs_reanchor or len(self.records) < self.config.scale_frames:
            return False
        groups = self.prepare_groups
        lead = -(-(groups + 1) // self.config.keyframe_interval)
        return groups > 0 and frames_stored >= self.config.max_stored_frames - lead

    def to_map(
        self, pose_enc: np.ndarray, depth_net: np.ndarray | None
    ) -> tuple[np.ndarray, np.ndarray | None]:
        """A frame's pose encoding [9] and depth [h, w] (stream frame; None without the depth head) → its
        [4, 4] float64 camera → map pose and its depth in map scale."""
        pose = self.align.apply_pose(pose_encoding_to_c2w(pose_enc))
        return pose, None if depth_net is None else depth_net * np.float32(self.align.scale)

    def keep(self, record: KeyframeRecord) -> None:
        """Keep a decoded keyframe for a later re-anchor (the last S0 only)."""
        self.records.append(record)

    def recover_on_keyframes(self, error: str) -> bool:
        """After a failed step (``error``), whose caches the session resets: True when the next frame
        re-anchors on the kept keyframes (the epoch, its map frame and trajectory carry on); False in the
        anchor phase, when this recovery itself failed, or short of S0 kept keyframes (the session resets)."""
        self.prepared = None  # its pass read the failed stream's keyframes only, but is dropped with it
        if self.anchoring or self.needs_reanchor or len(self.records) < self.config.scale_frames:
            return False
        self.needs_reanchor = True
        _LOG.error(
            "StreamingSession caches reset after a model error (%s); the next frame re-anchors on the "
            "last %d keyframes, the map frame is kept",
            error,
            len(self.records),
        )
        return True

    def state(self, source_hw: tuple[int, int] | None) -> AnchorState | None:
        """The model stream's anchors and alignment; None during the anchor phase or before a re-anchor."""
        if self.anchoring or self.needs_reanchor or source_hw is None:
            return None
        return AnchorState(
            np.stack([image for image, _ in self.anchors]),
            tuple(meta for _, meta in self.anchors),
            source_hw,
            self.align,
        )

    def reanchor(self, steps: ModelSteps) -> None:
        """Restart the model stream on the last S0 keyframes in one step and re-align its world frame
        (docs/engine.md)."""
        records = list(self.records)
        cause = (
            "after a model error"
            if self.needs_reanchor
            else f"after {self.config.max_stored_frames} stored frames"
        )
        steps.state.reset()
        pose_enc, depth, conf, _ = steps.step([r.image_net for r in records], keyframe=True)
        align = estimate_alignment(
            records, pose_encoding_to_c2w(pose_enc), depth, conf, self.config.realign_conf_threshold
        )
        self._restarted(records, align, cause)

    def _restarted(self, records: list[KeyframeRecord], align: Sim3, cause: str) -> None:
        """The model stream was restarted on ``records`` and its world frame maps by ``align``."""
        self.anchored([(r.image_net, r.meta) for r in records], align)
        self.segment += 1
        self.streaming_count = 0
        self.needs_reanchor = False
        _LOG.info(
            "StreamingSession re-anchored on %d keyframes %s (segment %d, scale %.4g)",
            len(records),
            cause,
            self.segment,
            align.scale,
        )
