"""`StreamingSession`: RGB frames in, decoded per-frame results out (docs/architecture.md, docs/engine.md).

Stream policy (spec §3.2–3.3): the first ``scale_frames`` (S0) frames after a reset are buffered and run
together (anchor phase, bidirectional attention) and their S0 results are returned at once; every later frame
is one ``model.step`` with S = 1. Streaming frame j (0-based since the last (re-)anchor) is a keyframe iff
``j % keyframe_interval == 0``; non-keyframes attend and are rolled back. A change of input resolution resets
the session (logged, reported in the results and ``stats()``); once ``max_stored_frames`` are cached the
stream is re-anchored (`anchors.py`, `reanchor.py`). A failed step (an exception from the model, e.g. CUDA
out-of-memory, or non-finite outputs) drops that frame and resets the caches; while streaming, the next frame
re-anchors on the kept keyframes so the map frame and the trajectory carry on (docs/reliability.md); a failure
during the anchor phase or during that recovery starts a new epoch. Publish-and-drop: the session keeps only
the S0 frames of a pending anchor phase and the last S0 keyframes for a re-anchor, never per-frame history.

Thread safety: every public method takes one lock, so a ROS worker can ``push`` while a timer reads
``stats()``.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time

import numpy as np
import torch

from lingbot_map_ros.cache.shared_pool import SharedKVPool

from ..config import SessionConfig
from ..contracts import AnchorState, NonFiniteOutputError, SessionCounters, SessionStats, StreamingModel
from ..result import PHASE_ANCHOR, PHASE_STREAMING, FrameResult
from .anchors import StreamAnchors
from .batched_stepping import BatchedSteps, FrameFlow
from .depth_schedule import DepthSchedule
from .frame_decoder import FrameDecoder
from .model_steps import ModelSteps
from .preprocess import preprocess_geometry, resize_uint8, validate_rgb
from .step_frames import InFlightFrame, StreamingFrame
from .timing import StageTimer

# The contracts are imported from here too (engine/contracts.py owns them).
__all__ = ["AnchorState", "NonFiniteOutputError", "StreamingFrame", "StreamingModel", "StreamingSession"]

_LOG = logging.getLogger(__name__)


class StreamingSession:
    """One live stream through a `LingBotMap` model (the model owns its caches through a ``StreamState``).

    ``kv_pool``: keep the stream's KV cache in this shared pool (``model.new_pool()``), so that several
    sessions' streaming steps can run as one batch (engine/stream/multi_stream.py through `batched`, a
    `BatchedSteps` given the session's `FrameFlow`). What it owns: `ModelSteps` (the model steps and their
    device transfers), per epoch a `StreamAnchors` (anchor phase, kept keyframes, re-anchor, map-frame
    alignment) and a `FrameDecoder` (outputs → `FrameResult`s), a `StageTimer`.
    """

    def __init__(
        self, model: StreamingModel, config: SessionConfig | None = None, kv_pool: SharedKVPool | None = None
    ) -> None:
        self.config = cfg = config or SessionConfig()
        max_frame_num = model.config.max_frame_num
        if cfg.max_stored_frames > max_frame_num:
            raise ValueError(
                f"SessionConfig.max_stored_frames={cfg.max_stored_frames} exceeds the model's RoPE table "
                f"(max_frame_num={max_frame_num})"
            )
        self.device = torch.device(cfg.device) if cfg.device else model.device
        state = model.new_stream(cfg.stream_config(), kv_pool)
        self._steps = ModelSteps(model, state, self.device, cfg.dtype)
        self._lock = threading.Lock()
        self._timer = StageTimer(cfg.timing_window)
        self._epoch = -1
        self._counters = SessionCounters()
        self._clear(reason=None)
        flow = FrameFlow(
            self._lock, self._steps, self._timer, self._admit, self._needs_sync, self._swap_in_flight,
            self._run, self._streaming_keyframe, self._finish, self._recover,
        )  # fmt: skip
        self.batched = BatchedSteps(flow)  # the side of a caller that batches several sessions' steps

    @property
    def model(self) -> StreamingModel:
        """The model stepped (from the next step on when replaced, e.g. by test/fault_injection.py)."""
        return self._steps.model

    @model.setter
    def model(self, model: StreamingModel) -> None:
        self._steps.model = model

    # ------------------------------------------------------------------ public API

    def push(self, rgb: np.ndarray, meta: object = None, depth: bool = False) -> list[FrameResult]:
        """Feed one frame.

        Args:
            rgb: [H, W, 3] uint8 RGB image (original resolution).
            meta: passed through to the frame's ``FrameResult.meta`` (e.g. the ROS header).
            depth: run the depth head for this frame whatever ``depth_every_n`` says.
        Returns:
            ``[]`` while the anchor phase collects frames, the S0 anchor results when it completes, then one
            result per frame.
        Raises:
            ValueError: not an [H, W, 3] uint8 array, or an image too small for one patch row.
            Exception: whatever the model raised (e.g. ``torch.cuda.OutOfMemoryError``), or
                `NonFiniteOutputError`; the frame is dropped and the session recovered (module doc).
        """
        rgb = validate_rgb(rgb)
        with self._lock:
            done, image_net = self._admit(rgb)
            try:
                return done + self._run(rgb, meta, image_net, depth)
            except Exception as exc:
                self._recover(exc)
                raise

    def push_overlapped(self, rgb: np.ndarray, meta: object = None, depth: bool = False) -> list[FrameResult]:
        """Feed one frame through a one-deep pipeline: returns the results of the frame before it.

        The frame's pre-processing runs while the previous frame's step is still on the GPU; its step is
        queued right behind it; then the previous frame's outputs are collected and decoded while this
        frame's step runs. So with a camera faster than the model the GPU never waits for the host, and a
        result comes back as soon as its own step has finished (the next frame's step is not waited for).
        Call :meth:`flush` when no next frame is at hand (e.g. the input queue is empty): it returns the
        frame still in flight. The results are exactly those of :meth:`push` on the same frames (the same
        model calls in the same order), only returned one call later; the anchor phase, re-anchors and a
        resolution change first complete the frame in flight and then run as in :meth:`push`.

        Raises as :meth:`push`; a failed or non-finite step of the frame in flight also drops this frame
        (its step ran on the failed caches) and recovers as :meth:`push` does; when this frame's own step
        fails to launch, the frame in flight is kept (the next call or :meth:`flush` returns it).
        """
        rgb = validate_rgb(rgb)
        with self._lock:
            done, image_net = self._admit(rgb, sync=self._needs_sync(rgb))
            try:
                if self._anchors.anchoring or self._reanchor_due():
                    return done + self._run(rgb, meta, image_net, depth)
                self._reanchor_work()  # a prepared re-anchor's share of this frame (queued before its step)
                keyframe, depth = self._next_step(depth)
                with self._timer.stage("model"):
                    launched = self._steps.launch([image_net], keyframe, depth)
            except Exception as exc:  # this frame's step failed; the frame in flight ran before it: kept
                self._recover(exc)
                raise
            previous = self._in_flight
            self._in_flight = InFlightFrame(rgb, meta, image_net, keyframe, launched)
            try:
                return done + ([self._finish(previous)] if previous is not None else [])
            except Exception as exc:  # the frame in flight failed: this frame's step ran on its caches
                self._in_flight = None
                self._recover(exc)
                raise

    def flush(self) -> list[FrameResult]:
        """The result of the frame still in flight after :meth:`push_overlapped` (``[]`` if none)."""
        with self._lock:
            return self._complete_in_flight()

    def reset(self, reason: str = "reset requested") -> None:
        """Forget the stream: caches, anchor phase, trajectory alignment. The next frame starts a new anchor
        phase in a new map frame (``FrameResult.epoch`` increments); ``reason`` goes to ``stats()`` and the
        new epoch's first results (``reset_reason``)."""
        with self._lock:
            self._clear(reason=reason)

    def anchor_state(self) -> AnchorState | None:
        """The current model stream's anchors and alignment; None during the anchor phase."""
        with self._lock:
            geometry = self._decoder.geometry
            return self._anchors.state(geometry.source_hw if geometry else None)

    def restore_anchors(self, anchors: AnchorState, reason: str = "session loaded") -> list[FrameResult]:
        """Start a new epoch whose model stream is anchored on saved anchors, in the saved map frame.

        Re-runs ``anchors.images`` as the anchor phase and publishes every later pose through
        ``anchors.alignment``, so new frames come out in the map frame of the session that saved them (their
        sliding window starts empty). The first frame after it may come at another camera size of the same
        network size: it is adopted (no reset), e.g. a saved 300x600 stream continued from 84x148 images.
        Returns the anchors' results (phase 1, keyframes; ``rgb`` is the
        network image mapped back to the original grid), equal to the saving session's when it was in its
        first segment.
        Raises:
            ValueError: not ``scale_frames`` images of the network size of ``anchors.source_hw``; the
                session is untouched. Model errors as in `push` (the session is then reset).
        """
        geometry = preprocess_geometry(tuple(anchors.source_hw), self.config.image_width)
        images = np.asarray(anchors.images)
        expected = (self.config.scale_frames, *geometry.out_hw, 3)
        if images.dtype != np.uint8 or images.shape != expected or len(anchors.metas) != expected[0]:
            raise ValueError(
                f"restore_anchors needs {expected} uint8 images and metas, got {images.shape} {images.dtype}"
            )
        with self._lock:
            self._clear(reason)
            self._decoder.geometry = geometry
            frames = [np.ascontiguousarray(image) for image in images]
            try:
                with self._timer.stage("model"):
                    outputs = self._steps.step(frames, keyframe=True)
            except Exception as exc:
                self._recover(exc)
                raise
            self._anchors.anchored(list(zip(frames, anchors.metas, strict=True)), anchors.alignment)
            self._adopt_source_size = True  # another camera size of the same network size may follow
            rgbs = [self._decoder.source_rgb(image) for image in frames]
            results = self._decoder.decode_step(rgbs, anchors.metas, frames, outputs, True, PHASE_ANCHOR)
            self._timer.end_step()
            return results

    def set_sliding_window(self, n: int) -> None:
        """Resize the live window of the global-attention cache (1..max_window), from the next step on; it
        outlives resets (the stream's cache holds it: ``stats().sliding_window``)."""
        with self._lock:
            self._steps.state.set_sliding_window(n)

    def warm_up(self, image_hw: tuple[int, int], streaming_frames: int = 3) -> float:
        """Run random frames of ``image_hw`` (H, W of the camera images) through the model, then forget them.

        The anchor step and ``streaming_frames`` streaming steps (keyframes and a non-keyframe) at the network
        resolution these images map to: this captures the CUDA graphs and, with ``compile_blocks``, compiles
        the blocks (or loads them from the compile cache), so that the first real frame waits for neither.
        The stream is reset afterwards; counters, epoch and the trajectory are untouched. Returns seconds.
        """
        if type(streaming_frames) is not int or streaming_frames < 0:
            raise ValueError(f"streaming_frames must be an int >= 0, got {streaming_frames!r}")
        if not self._anchors.anchoring or self._anchors.pending or self._decoder.index:
            raise RuntimeError("warm_up() is for a fresh stream, before the first frame (e.g. at configure)")
        geometry = preprocess_geometry(tuple(image_hw), self.config.image_width)
        start = time.perf_counter()
        with self._lock:
            self._steps.warm_up(geometry, self.config.scale_frames, streaming_frames)
        return time.perf_counter() - start

    def stats(self) -> SessionStats:
        """Counters, cache state and per-stage timings (ms) for diagnostics."""
        with self._lock:
            state, geometry = self._steps.state, self._decoder.geometry
            return SessionStats(
                **dataclasses.asdict(self._counters),
                epoch=self._epoch,
                frames=self._decoder.index,
                keyframes=self._decoder.keyframes,
                phase=PHASE_ANCHOR if self._anchors.anchoring else PHASE_STREAMING,
                pending_anchor_frames=len(self._anchors.pending),
                segment=self._anchors.segment,
                frames_stored=state.frames_stored,
                max_stored_frames=self.config.max_stored_frames,
                sliding_window=state.sliding_window,
                keyframe_interval=self.config.keyframe_interval,
                input_hw=geometry.source_hw if geometry else None,
                network_hw=geometry.out_hw if geometry else None,
                alignment_scale=self._anchors.align.scale,
                cache=state.stats(),
                timings_ms=self._timer.summary(),
                gpu_memory_gib=self._steps.gpu_memory(),
            )

    # ------------------------------------------------------------------ internals

    def _admit(self, rgb: np.ndarray, sync: bool = True) -> tuple[list[FrameResult], np.ndarray]:
        """A new frame, under the lock: the frame in flight completed first (when ``sync``), then ``rgb``'s
        geometry (a new resolution resets the stream) and network input, counted in ``frames_total``."""
        done = self._complete_in_flight() if sync else []
        current = self._decoder.geometry
        geometry = current
        if current is None or rgb.shape[:2] != current.source_hw:
            # Validated (ValueError for an unusable size) before the stream is touched.
            geometry = preprocess_geometry(rgb.shape[:2], self.config.image_width)
        adopt, self._adopt_source_size = self._adopt_source_size, False
        if current is not None and geometry is not current and adopt and geometry.out_hw == current.out_hw:
            _LOG.info("restored stream continues at camera size %s (same network size)", rgb.shape[:2])
        elif current is not None and geometry is not current:
            old, new = current.source_hw, rgb.shape[:2]
            reason = f"input resolution changed from {old[0]}x{old[1]} to {new[0]}x{new[1]}"
            _LOG.warning("StreamingSession reset: %s; restarting the anchor phase", reason)
            self._clear(reason)
        self._decoder.geometry = geometry
        with self._timer.stage("preprocess"):
            image_net = resize_uint8(rgb, geometry)
        self._counters.frames_total += 1
        return done, image_net

    def _run(self, rgb: np.ndarray, meta: object, image_net: np.ndarray, depth: bool) -> list[FrameResult]:
        """One frame, synchronously (anchor phase, re-anchor, or a plain streaming frame)."""
        if self._anchors.anchoring:
            pending = self._anchors.add_pending(rgb, meta, image_net)
            return self._run_anchor_phase(pending) if pending else []
        self._reanchor_work()
        keyframe, depth = self._next_step(depth)
        with self._timer.stage("model"):
            outputs = self._steps.step([image_net], keyframe=keyframe, depth=depth)
        return [self._streaming_result(rgb, meta, image_net, keyframe, outputs)]

    def _next_step(self, demanded: bool) -> tuple[bool, bool]:
        """The next streaming step's (keyframe, depth head) decisions, counted."""
        keyframe = self._anchors.next_keyframe()
        index = self._anchors.streaming_count - 1
        return keyframe, self._depth.decide(index, keyframe, demanded)

    def _needs_sync(self, rgb: np.ndarray) -> bool:
        """Whether the frame in flight must be completed before ``rgb`` is taken in."""
        geometry = self._decoder.geometry
        stale = geometry is None or rgb.shape[:2] != geometry.source_hw or self._reanchor_due()
        return self._in_flight is not None and stale

    def _swap_in_flight(self, frame: InFlightFrame | None) -> InFlightFrame | None:
        """Under the lock: ``frame`` becomes the frame in flight; the one before is returned."""
        previous, self._in_flight = self._in_flight, frame
        return previous

    def _reanchor_due(self) -> bool:
        return self._anchors.reanchor_due(self._steps.state.frames_stored)

    def _streaming_keyframe(self) -> bool | None:
        """None in the anchor phase; else, after this frame's re-anchor work, the next streaming frame's
        keyframe flag."""
        if self._anchors.anchoring:
            return None
        self._reanchor_work()
        return self._anchors.next_keyframe()

    def _reanchor_work(self) -> None:
        """This frame's re-anchor work before its streaming step (`StreamAnchors.reanchor_work`), timed as
        the frame's "reanchor" stage."""
        if self._anchors.reanchor_busy(self._steps.state.frames_stored):
            with self._timer.stage("reanchor"):
                restarted = self._anchors.reanchor_work(self._steps)
            self._counters.reanchors_total += restarted

    def _complete_in_flight(self) -> list[FrameResult]:
        """Collect and decode the frame in flight, if any (recovering as ``push`` does when it failed)."""
        if self._in_flight is None:
            return []
        in_flight, self._in_flight = self._in_flight, None
        try:
            return [self._finish(in_flight)]
        except Exception as exc:
            self._recover(exc)
            raise

    def _finish(self, frame: InFlightFrame) -> FrameResult:
        with self._timer.stage("wait"):
            outputs = self._steps.collect(frame.launched)
        return self._streaming_result(frame.rgb, frame.meta, frame.image_net, frame.keyframe, outputs)

    def _clear(self, reason: str | None) -> None:
        """Return to the start of a stream (new epoch)."""
        self._steps.state.reset()
        self._epoch += 1
        if reason is not None:
            self._counters.resets_total += 1
            self._counters.last_reset_reason = reason
        self._anchors = StreamAnchors(self.config, self._steps.anchor_pass_groups(self.config.reanchor_steps))
        self._depth = DepthSchedule(self.config.depth_every_n, self.config.scale_frames)
        self._decoder = FrameDecoder(self._epoch, reason, self._anchors)
        self._in_flight: InFlightFrame | None = None  # push_overlapped's frame whose step runs
        self._adopt_source_size = False  # restored anchors: the first frame may bring another camera size

    def _recover(self, exc: Exception) -> None:
        """After a failed step (the caches may be between begin and end of a step): drop them.

        Streaming with a full set of kept keyframes: reset only the model's caches and re-anchor on those
        keyframes at the next frame (same epoch: map frame and trajectory continue). During the anchor phase,
        or when the recovery itself failed: a clean reset (new epoch).
        """
        error = f"{type(exc).__name__}: {exc}"
        self._counters.last_error = error
        if self._anchors.recover_on_keyframes(error):
            self._steps.state.reset()
            self._counters.recoveries_total += 1
        else:
            _LOG.error("StreamingSession reset after a model error: %s", error)
            self._clear(f"model error: {error}")
        self._steps.release_failed_step()

    def _run_anchor_phase(self, pending: list[tuple[np.ndarray, object, np.ndarray]]) -> list[FrameResult]:
        rgbs, metas, images_net = zip(*pending, strict=True)
        with self._timer.stage("model"):
            outputs = self._steps.step(list(images_net), keyframe=True)
        self._anchors.anchored(list(zip(images_net, metas, strict=True)))
        with self._timer.stage("decode"):
            results = self._decoder.decode_step(rgbs, metas, images_net, outputs, True, PHASE_ANCHOR)
        self._timer.end_step()
        for r in results:
            r.timings_ms = self._timer.last()
        return results

    def _streaming_result(
        self, rgb: np.ndarray, meta: object, image_net: np.ndarray, keyframe: bool, outputs: tuple
    ) -> FrameResult:
        """Decode one streaming step (pose_enc [1, 9], depth and conf [1, h, w]) and close its timing."""
        with self._timer.stage("decode"):
            [result] = self._decoder.decode_step(
                [rgb], [meta], [image_net], outputs, keyframe, PHASE_STREAMING
            )
        self._timer.end_step()
        result.timings_ms = self._timer.last()
        return result
