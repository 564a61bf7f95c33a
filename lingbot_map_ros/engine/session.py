"""`StreamingSession`: RGB frames in, decoded per-frame results out (docs/architecture.md, docs/engine.md).

Stream policy (spec §3.2–3.3): the first ``scale_frames`` (S0) frames after a reset are buffered and run
together (anchor phase, bidirectional attention) and their S0 results are returned at once; every later frame
is one ``model.step`` with S = 1. Streaming frame j (0-based since the last (re-)anchor) is a keyframe iff
``j % keyframe_interval == 0``; non-keyframes attend and are rolled back. A change of input resolution resets
the session (logged, reported in the results and ``stats()``); once ``max_stored_frames`` are cached the
stream is re-anchored (`reanchor.py`). A failed step (an exception from the model, e.g. CUDA out-of-memory,
or non-finite outputs) drops that frame and resets the caches; while streaming, the next frame re-anchors on
the kept keyframes so the map frame and the trajectory carry on (docs/reliability.md); a failure during the
anchor phase or during that recovery starts a new epoch. Publish-and-drop: the session keeps only the S0
frames of a pending anchor phase and the last S0 keyframes for a re-anchor, never per-frame history.

Thread safety: every public method takes one lock, so a ROS worker can ``push`` while a timer reads
``stats()``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from dataclasses import dataclass

import numpy as np
import torch

from lingbot_map_ros.cache.shared_pool import SharedKVPool
from lingbot_map_ros.model import StreamConfig, StreamState

from .config import SessionConfig
from .contracts import AnchorState, NonFiniteOutputError, SessionStats, StreamingModel
from .decode import fov_to_intrinsics, pose_encoding_to_c2w
from .geometry import Sim3
from .preprocess import PreprocessGeometry, preprocess_geometry, resize_uint8, validate_rgb
from .reanchor import KeyframeRecord, estimate_alignment
from .result import PHASE_ANCHOR, PHASE_STREAMING, FrameResult
from .timing import StageTimer

_LOG = logging.getLogger(__name__)


@dataclass(frozen=True)
class StreamingFrame:
    """A plain streaming frame taken in by `StreamingSession.begin_frame`, waiting for its model step.

    A caller that batches the steps of several sessions (engine/multi_stream.py) runs ``images``
    ([1, 3, h, w] on the model device) through the model with ``state`` (the session's ``StreamState``) and
    ``keyframe``, then hands the output to `StreamingSession.finish_frame`.
    """

    rgb: np.ndarray
    meta: object
    image_net: np.ndarray
    keyframe: bool
    images: torch.Tensor
    state: StreamState


class StreamingSession:
    """One live stream through a `LingBotMap` model (the model owns its caches through a ``StreamState``).

    ``kv_pool``: keep the stream's KV cache in this shared pool (``model.new_pool()``), so that several
    sessions' streaming steps can run as one batch (engine/multi_stream.py).
    """

    def __init__(
        self, model: StreamingModel, config: SessionConfig | None = None, kv_pool: SharedKVPool | None = None
    ) -> None:
        self.config = config or SessionConfig()
        cfg = self.config
        max_frame_num = model.config.max_frame_num
        if cfg.max_stored_frames > max_frame_num:
            raise ValueError(
                f"SessionConfig.max_stored_frames={cfg.max_stored_frames} exceeds the model's RoPE table "
                f"(max_frame_num={max_frame_num})"
            )
        self.model = model
        self.device = torch.device(cfg.device) if cfg.device else model.device
        self._state = model.new_stream(
            StreamConfig(
                scale_frames=cfg.scale_frames,
                sliding_window=cfg.sliding_window,
                max_window=cfg.max_window,
                max_special_frames=max(cfg.max_stored_frames, cfg.scale_frames + cfg.max_window),
                camera_history=cfg.effective_camera_history,
                backend=cfg.backend,
                cuda_graphs=cfg.cuda_graphs,
                compile_blocks=cfg.compile_blocks,
            ),
            kv_pool,
        )
        self._lock = threading.Lock()
        self._timer = StageTimer(cfg.timing_window)
        self._epoch = -1
        self._frames_total = 0
        self._reanchors_total = 0
        self._resets_total = 0
        self._recoveries_total = 0
        self._last_reset_reason: str | None = None
        self._last_error: str | None = None
        self._clear(reason=None)

    # ------------------------------------------------------------------ public API

    def push(self, rgb: np.ndarray, meta: object = None) -> list[FrameResult]:
        """Feed one frame.

        Args:
            rgb: [H, W, 3] uint8 RGB image (original resolution).
            meta: passed through to the frame's ``FrameResult.meta`` (e.g. the ROS header).
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
            done, _, image_net = self._admit(rgb)
            try:
                return done + self._run(rgb, meta, image_net)
            except Exception as exc:
                self._recover(exc)
                raise

    def push_overlapped(self, rgb: np.ndarray, meta: object = None) -> list[FrameResult]:
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
        (its step ran on the failed frame's caches) and recovers as :meth:`push` does.
        """
        rgb = validate_rgb(rgb)
        with self._lock:
            done, geometry, image_net = self._admit(rgb, sync=self._needs_sync(rgb))
            try:
                if self._anchoring or self._reanchor_due():
                    return done + self._run(rgb, meta, image_net)
                keyframe = self._next_keyframe()
                with self._timer.stage("model"):
                    launched = self._launch([image_net], keyframe)
                previous = self._in_flight
                self._in_flight = (rgb, meta, image_net, keyframe, launched)
                if previous is not None:
                    done.append(self._finish(*previous))
                return done
            except Exception as exc:
                self._in_flight = None
                self._recover(exc)
                raise

    def begin_frame(
        self, rgb: np.ndarray, meta: object = None
    ) -> tuple[list[FrameResult], StreamingFrame | None]:
        """:meth:`push` up to the model step, for a caller that batches several sessions' steps.

        Anchor-phase frames run here as in :meth:`push` (their results come back, frame None); a due
        re-anchor runs here too; a plain streaming frame comes back as a `StreamingFrame` whose model step
        the caller runs and hands to :meth:`finish_frame` (or its error to :meth:`fail_frame`).
        Raises as :meth:`push`.
        """
        rgb = validate_rgb(rgb)
        with self._lock:
            done, _, image_net = self._admit(rgb)
            try:
                if self._anchoring:
                    return done + self._run(rgb, meta, image_net), None
                if self._reanchor_due():
                    with self._timer.stage("reanchor"):
                        self._reanchor()
                keyframe = self._next_keyframe()
                images = self._to_model([image_net])
                return done, StreamingFrame(rgb, meta, image_net, keyframe, images, self._state)
            except Exception as exc:
                self._recover(exc)
                raise

    def finish_frame(self, frame: StreamingFrame, output: object, model_ms: float) -> FrameResult:
        """Decode the model step of a `begin_frame` frame (``output``: its ``StepOutput``, one frame);
        ``model_ms`` is the batched step's time (the frame's "model" stage). Raises as :meth:`push`."""
        with self._lock:
            self._timer.add("model", model_ms)
            try:
                launched = self._to_host(output)
                return self._finish(frame.rgb, frame.meta, frame.image_net, frame.keyframe, launched)
            except Exception as exc:
                self._recover(exc)
                raise

    def fail_frame(self, exc: Exception) -> None:
        """The model step of a `begin_frame` frame raised ``exc``: drop the frame, recover as :meth:`push`."""
        with self._lock:
            self._recover(exc)

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
            if self._anchoring or self._needs_reanchor or self._geometry is None:
                return None
            return AnchorState(
                np.stack([image for image, _ in self._anchors]),
                tuple(meta for _, meta in self._anchors),
                self._geometry.source_hw,
                self._align,
            )

    def restore_anchors(self, anchors: AnchorState, reason: str = "session loaded") -> list[FrameResult]:
        """Start a new epoch whose model stream is anchored on saved anchors, in the saved map frame.

        Re-runs ``anchors.images`` as the anchor phase and publishes every later pose through
        ``anchors.alignment``, so new frames come out in the map frame of the session that saved them (their
        sliding window starts empty). Returns the anchors' results (phase 1, keyframes; ``rgb`` is the
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
            self._geometry = geometry
            frames = [np.ascontiguousarray(image) for image in images]
            try:
                with self._timer.stage("model"):
                    pose_enc, depth, conf = self._step(frames, keyframe=True)
            except Exception as exc:
                self._recover(exc)
                raise
            self._anchoring = False
            self._align = anchors.alignment
            self._anchors = list(zip(frames, anchors.metas, strict=True))
            results = []
            for i, (image, meta) in enumerate(self._anchors):
                rgb = np.stack(
                    [geometry.map_to_source(image[..., c].astype(np.float32), 0.0) for c in range(3)], -1
                )
                rgb = np.clip(np.rint(rgb), 0, 255).astype(np.uint8)
                results.append(
                    self._decode(rgb, meta, image, pose_enc[i], depth[i], conf[i], True, PHASE_ANCHOR)
                )
            self._timer.end_step()
            return results

    def set_sliding_window(self, n: int) -> None:
        """Resize the live window of the global-attention cache (1..max_window), from the next step on; it
        outlives resets (the stream's cache holds it: ``stats().sliding_window``)."""
        with self._lock:
            self._state.set_sliding_window(n)

    def warm_up(self, image_hw: tuple[int, int], streaming_frames: int = 3) -> float:
        """Run random frames of ``image_hw`` (H, W of the camera images) through the model, then forget them.

        The anchor step and ``streaming_frames`` streaming steps (keyframes and a non-keyframe) at the network
        resolution these images map to: this captures the CUDA graphs and, with ``compile_blocks``, compiles
        the blocks (or loads them from the compile cache), so that the first real frame waits for neither.
        The stream is reset afterwards; counters, epoch and the trajectory are untouched. Returns seconds.
        """
        if type(streaming_frames) is not int or streaming_frames < 0:
            raise ValueError(f"streaming_frames must be an int >= 0, got {streaming_frames!r}")
        if not self._anchoring or self._pending or self._index:
            raise RuntimeError("warm_up() is for a fresh stream, before the first frame (e.g. at configure)")
        geometry = preprocess_geometry(tuple(image_hw), self.config.image_width)
        rng = np.random.default_rng(0)
        height, width = geometry.source_hw
        start = time.perf_counter()
        with self._lock:
            frames = [
                resize_uint8(rng.integers(0, 256, (height, width, 3), dtype=np.uint8), geometry)
                for _ in range(self.config.scale_frames + streaming_frames)
            ]
            try:
                self._step(frames[: self.config.scale_frames], keyframe=True)
                for i, frame in enumerate(frames[self.config.scale_frames :]):
                    self._step([frame], keyframe=i % 2 == 0)
            finally:
                self._state.reset()
                if self.device.type == "cuda":
                    torch.cuda.synchronize(self.device)
                    torch.cuda.empty_cache()  # the capture's side-stream blocks: not needed again
        return time.perf_counter() - start

    def stats(self) -> SessionStats:
        """Counters, cache state and per-stage timings (ms) for diagnostics."""
        with self._lock:
            return SessionStats(
                epoch=self._epoch,
                frames=self._index,
                frames_total=self._frames_total,
                keyframes=self._keyframes,
                phase=PHASE_ANCHOR if self._anchoring else PHASE_STREAMING,
                pending_anchor_frames=len(self._pending),
                segment=self._segment,
                reanchors_total=self._reanchors_total,
                resets_total=self._resets_total,
                last_reset_reason=self._last_reset_reason,
                recoveries_total=self._recoveries_total,
                last_error=self._last_error,
                frames_stored=self._state.frames_stored,
                max_stored_frames=self.config.max_stored_frames,
                sliding_window=self._state.sliding_window,
                keyframe_interval=self.config.keyframe_interval,
                input_hw=self._geometry.source_hw if self._geometry else None,
                network_hw=self._geometry.out_hw if self._geometry else None,
                alignment_scale=self._align.scale,
                cache=self._state.stats(),
                timings_ms=self._timer.summary(),
                gpu_memory_gib=self._gpu_memory(),
            )

    def _gpu_memory(self) -> dict[str, float] | None:
        """GPU memory of this process in GiB (allocated now, peak allocated, reserved) on CUDA."""
        if self.device.type != "cuda":
            return None
        gib = 2**30
        return {
            "allocated": round(torch.cuda.memory_allocated(self.device) / gib, 3),
            "peak_allocated": round(torch.cuda.max_memory_allocated(self.device) / gib, 3),
            "reserved": round(torch.cuda.memory_reserved(self.device) / gib, 3),
        }

    # ------------------------------------------------------------------ internals

    def _admit(
        self, rgb: np.ndarray, sync: bool = True
    ) -> tuple[list[FrameResult], PreprocessGeometry, np.ndarray]:
        """A new frame, under the lock: the frame in flight completed first (when ``sync``), then ``rgb``'s
        geometry and network input (`_prepare`), counted in ``frames_total``."""
        done = self._complete_in_flight() if sync else []
        geometry, image_net = self._prepare(rgb)
        self._frames_total += 1
        return done, geometry, image_net

    def _prepare(self, rgb: np.ndarray) -> tuple[PreprocessGeometry, np.ndarray]:
        """Geometry of ``rgb`` (a new resolution resets the stream) and its network input."""
        geometry = self._geometry
        if geometry is None or rgb.shape[:2] != geometry.source_hw:
            # Validated (ValueError for an unusable size) before the stream is touched.
            geometry = preprocess_geometry(rgb.shape[:2], self.config.image_width)
        if self._geometry is not None and geometry is not self._geometry:
            old, new = self._geometry.source_hw, rgb.shape[:2]
            reason = f"input resolution changed from {old[0]}x{old[1]} to {new[0]}x{new[1]}"
            _LOG.warning("StreamingSession reset: %s; restarting the anchor phase", reason)
            self._clear(reason)
        self._geometry = geometry
        with self._timer.stage("preprocess"):
            image_net = resize_uint8(rgb, geometry)
        return geometry, image_net

    def _run(self, rgb: np.ndarray, meta: object, image_net: np.ndarray) -> list[FrameResult]:
        """One frame, synchronously (anchor phase, re-anchor, or a plain streaming frame)."""
        if self._anchoring:
            self._pending.append((rgb, meta, image_net))
            if len(self._pending) < self.config.scale_frames:
                return []
            return self._run_anchor_phase()
        return [self._run_streaming_frame(rgb, meta, image_net)]

    def _needs_sync(self, rgb: np.ndarray) -> bool:
        """Whether the frame in flight must be completed before ``rgb`` is taken in."""
        if self._in_flight is None:
            return False
        return self._geometry is None or rgb.shape[:2] != self._geometry.source_hw or self._reanchor_due()

    def _reanchor_due(self) -> bool:
        return self._needs_reanchor or self._state.frames_stored >= self.config.max_stored_frames

    def _next_keyframe(self) -> bool:
        keyframe = self._streaming_count % self.config.keyframe_interval == 0
        self._streaming_count += 1
        return keyframe

    def _complete_in_flight(self) -> list[FrameResult]:
        """Collect and decode the frame in flight, if any (recovering as ``push`` does when it failed)."""
        if self._in_flight is None:
            return []
        in_flight, self._in_flight = self._in_flight, None
        try:
            return [self._finish(*in_flight)]
        except Exception as exc:
            self._recover(exc)
            raise

    def _finish(
        self, rgb: np.ndarray, meta: object, image_net: np.ndarray, keyframe: bool, launched: tuple
    ) -> FrameResult:
        with self._timer.stage("wait"):
            outputs = self._collect(launched, 1)
        return self._streaming_result(rgb, meta, image_net, keyframe, outputs)

    def _clear(self, reason: str | None) -> None:
        """Return to the start of a stream (new epoch)."""
        self._state.reset()
        self._epoch += 1
        if reason is not None:
            self._resets_total += 1
            self._last_reset_reason = reason
        self._epoch_reason = reason
        self._geometry: PreprocessGeometry | None = None
        self._anchoring = True
        self._pending: list[tuple[np.ndarray, object, np.ndarray]] = []
        self._anchors: list[tuple[np.ndarray, object]] = []  # the model stream's anchors: (image_net, meta)
        self._records: deque[KeyframeRecord] = deque(maxlen=self.config.scale_frames)
        self._align = Sim3.identity()
        self._index = 0
        self._keyframes = 0
        self._segment = 0
        self._streaming_count = 0  # streaming frames since the last (re-)anchor: keyframe policy
        self._needs_reanchor = False  # a failed step reset the caches; the next frame re-anchors
        self._in_flight: tuple | None = None  # push_overlapped: (rgb, meta, image_net, keyframe, launched)

    def _recover(self, exc: Exception) -> None:
        """After a failed step (the caches may be between begin and end of a step): drop them.

        Streaming with a full set of kept keyframes: reset only the model's caches and re-anchor on those
        keyframes at the next frame (same epoch: map frame and trajectory continue). During the anchor phase,
        or when the recovery itself failed: a clean reset (new epoch).
        """
        error = f"{type(exc).__name__}: {exc}"
        self._last_error = error
        if self._anchoring or self._needs_reanchor or len(self._records) < self.config.scale_frames:
            _LOG.error("StreamingSession reset after a model error: %s", error)
            self._clear(f"model error: {error}")
        else:
            self._state.reset()
            self._needs_reanchor = True
            self._recoveries_total += 1
            _LOG.error(
                "StreamingSession caches reset after a model error (%s); the next frame re-anchors on the "
                "last %d keyframes, the map frame is kept",
                error,
                len(self._records),
            )
        if self.device.type == "cuda":
            torch.cuda.empty_cache()  # return what the failed step allocated (out-of-memory recovery)

    def _geometry_or_raise(self) -> PreprocessGeometry:
        if self._geometry is None:
            raise RuntimeError("StreamingSession: decoding before the input geometry is known")
        return self._geometry

    def _to_model(self, images_net: list[np.ndarray]) -> torch.Tensor:
        """[S] × [h, w, 3] uint8 → [S, 3, h, w] tensor in [0, 1] on the model's device.

        The uint8 pixels travel (a quarter of the float32 bytes; pinned and asynchronous on CUDA) and are
        converted on the device: x / 255 in float32, the same correctly rounded values as ``to_chw_float``.
        """
        batch = torch.from_numpy(np.stack(images_net))
        if self.device.type == "cuda":
            batch = batch.pin_memory().to(self.device, non_blocking=True)
        images = batch.permute(0, 3, 1, 2).to(torch.float32).div_(255.0).contiguous()
        return images.to(self.config.dtype)

    def _step(self, images_net: list[np.ndarray], keyframe: bool) -> tuple[np.ndarray, ...]:
        """Run ``model.step``; return (pose_enc [S, 9], depth [S, h, w], conf [S, h, w]) float32 numpy."""
        return self._collect(self._launch(images_net, keyframe), len(images_net))

    def _launch(self, images_net: list[np.ndarray], keyframe: bool) -> tuple[torch.Tensor, ...]:
        """Upload the frames and queue ``model.step`` and the copies of its outputs to the host.

        On CUDA this returns once the work is queued: the three outputs come back through pinned host memory
        with asynchronous copies, and :meth:`_collect` waits for them (one synchronisation instead of one
        blocking copy each through pageable memory; the values are the same). Elsewhere it is synchronous.
        """
        images = self._to_model(images_net)
        with torch.inference_mode():
            return self._to_host(self.model.step(images, self._state, keyframe=keyframe))

    def _to_host(self, out: object) -> tuple:
        """Queue the copies of a ``StepOutput``'s pose_enc, depth and conf to the host (see `_launch`)."""
        with torch.inference_mode():
            outputs = [t.detach().float() for t in (out.pose_enc, out.depth, out.depth_conf)]
            if self.device.type != "cuda":
                return tuple(outputs)
            hosts = [torch.empty(t.shape, dtype=t.dtype, pin_memory=True) for t in outputs]
            for host, t in zip(hosts, outputs, strict=True):
                host.copy_(t, non_blocking=True)
            done = torch.cuda.Event()
            done.record(torch.cuda.current_stream(self.device))
            return (*hosts, done)

    def _collect(self, launched: tuple, frames: int) -> tuple[np.ndarray, ...]:
        """Wait for a launched step's outputs; (pose_enc, depth, conf) float32 numpy, checked finite."""
        if len(launched) == 4:
            launched[3].synchronize()
        arrays = tuple(t.numpy() for t in launched[:3])
        bad = [
            name
            for name, a in zip(("pose", "depth", "depth_conf"), arrays, strict=True)
            if not np.isfinite(a).all()
        ]
        if bad:
            raise NonFiniteOutputError(
                f"the model returned non-finite {', '.join(bad)} for {frames} frame(s)"
            )
        return arrays

    def _run_anchor_phase(self) -> list[FrameResult]:
        pending, self._pending = self._pending, []
        with self._timer.stage("model"):
            pose_enc, depth, conf = self._step([p[2] for p in pending], keyframe=True)
        self._anchoring = False
        self._anchors = [(image_net, meta) for _, meta, image_net in pending]
        results = []
        with self._timer.stage("decode"):
            for i, (rgb, meta, image_net) in enumerate(pending):
                results.append(
                    self._decode(rgb, meta, image_net, pose_enc[i], depth[i], conf[i], True, PHASE_ANCHOR)
                )
        self._timer.end_step()
        for r in results:
            r.timings_ms = self._timer.last()
        return results

    def _run_streaming_frame(self, rgb: np.ndarray, meta: object, image_net: np.ndarray) -> FrameResult:
        if self._reanchor_due():
            with self._timer.stage("reanchor"):
                self._reanchor()
        keyframe = self._next_keyframe()
        with self._timer.stage("model"):
            outputs = self._step([image_net], keyframe=keyframe)
        return self._streaming_result(rgb, meta, image_net, keyframe, outputs)

    def _streaming_result(
        self, rgb: np.ndarray, meta: object, image_net: np.ndarray, keyframe: bool, outputs: tuple
    ) -> FrameResult:
        """Decode one streaming step (pose_enc [1, 9], depth and conf [1, h, w]) and close its timing."""
        pose_enc, depth, conf = outputs
        with self._timer.stage("decode"):
            result = self._decode(
                rgb, meta, image_net, pose_enc[0], depth[0], conf[0], keyframe, PHASE_STREAMING
            )
        self._timer.end_step()
        result.timings_ms = self._timer.last()
        return result

    def _reanchor(self) -> None:
        """Restart the model stream on the last S0 keyframes and re-align its world frame (docs/engine.md)."""
        records = list(self._records)
        cause = (
            "after a model error"
            if self._needs_reanchor
            else f"after {self.config.max_stored_frames} stored frames"
        )
        self._state.reset()
        pose_enc, depth, conf = self._step([r.image_net for r in records], keyframe=True)
        align = estimate_alignment(
            records, pose_encoding_to_c2w(pose_enc), depth, conf, self.config.realign_conf_threshold
        )
        self._align = align
        self._anchors = [(r.image_net, r.meta) for r in records]
        self._segment += 1
        self._reanchors_total += 1
        self._streaming_count = 0
        self._needs_reanchor = False
        _LOG.info(
            "StreamingSession re-anchored on %d keyframes %s (segment %d, scale %.4g)",
            len(records),
            cause,
            self._segment,
            align.scale,
        )

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
        """One frame's outputs (network grid, stream frame) → FrameResult (original grid, map frame)."""
        geometry = self._geometry_or_raise()
        pose = self._align.apply_pose(pose_encoding_to_c2w(pose_enc))
        depth_net = depth_net * np.float32(self._align.scale)
        k_net = fov_to_intrinsics(pose_enc, geometry.out_hw)
        if keyframe:
            self._keyframes += 1
            self._records.append(KeyframeRecord(image_net, pose, depth_net, conf_net, meta))
        result = FrameResult(
            index=self._index,
            meta=meta,
            is_keyframe=keyframe,
            phase=phase,
            pose_c2w=pose,
            intrinsics=geometry.intrinsics_to_source(k_net),
            depth=geometry.map_to_source(depth_net),
            depth_conf=geometry.map_to_source(conf_net, fill=0.0),
            rgb=rgb,
            pose_enc=pose_enc.astype(np.float32),
            epoch=self._epoch,
            segment=self._segment,
            reset_reason=self._epoch_reason if phase == PHASE_ANCHOR else None,
        )
        self._index += 1
        return result
