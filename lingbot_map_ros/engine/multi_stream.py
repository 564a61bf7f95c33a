"""`MultiStreamSession`: several cameras through one model and one KV pool, their streaming steps batched.

One `StreamingSession` per camera (its own pre-processing, anchor phase, keyframe policy, re-anchors,
recovery, decoding, epoch and map frame) keeps its caches in one shared KV pool (``model.new_pool()``). A
round takes at most one frame per camera: each session takes its frame in (`StreamingSession.begin_frame`;
anchor phases and re-anchors run there, on their own), the plain streaming frames are grouped by network
resolution and run as ONE `LingBotMap.step_batch` per group (at most ``max_batch`` frames), and each
session decodes its own result (`finish_frame`). A lone streaming frame runs through ``model.step`` (the
single-stream path, with its CUDA graphs). So every camera's results equal those of its own
`StreamingSession` fed the same frames (docs/architecture.md, "Several cameras").

Threading: ``submit`` may be called from any thread (camera callbacks); ``step`` from one worker thread. A
round starts as soon as any camera has a frame and waits at most ``max_wait_ms`` for the other cameras, so a
slow or paused camera never stalls a fast one by more than that.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from .config import SessionConfig
from .contracts import SessionStats
from .result import FrameResult
from .session import StreamingSession
from .settings import setting
from .step_frames import StreamingFrame


@dataclass(frozen=True)
class BatchConfig:
    """Scheduling of a `MultiStreamSession` (``batch.*`` parameters).

    Attributes:
        max_wait_ms: once one camera has a frame, wait at most this long for the others before stepping.
        max_batch: most streaming frames in one batched model step.
        queue_depth: frames waiting per camera; a newer frame pushes out the oldest (counted as dropped).
    """

    max_wait_ms: float = setting(
        5.0,
        "Several cameras: once one camera has a frame, wait at most this long for the others' frames before "
        "stepping them together (one batched model step); a slow camera never stalls a fast one by more.",
        bounds=(0.0, 1000.0),
    )
    max_batch: int = setting(
        8, "Several cameras: most streaming frames in one batched model step.", bounds=(1, 64)
    )
    queue_depth: int = 1

    def __post_init__(self) -> None:
        if not self.max_wait_ms >= 0:
            raise ValueError(f"BatchConfig.max_wait_ms must be >= 0, got {self.max_wait_ms!r}")
        for name in ("max_batch", "queue_depth"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"BatchConfig.{name} must be an int >= 1, got {value!r}")


@dataclass(frozen=True)
class CameraStats:
    """`MultiStreamSession.stats(name)`: the camera's session statistics, frames waiting in its queue and
    frames dropped from it (the queue was full)."""

    session: SessionStats
    queued: int
    dropped: int


@dataclass
class RoundResults:
    """What one round produced: per camera its results (in order), and the cameras whose frame failed.

    A failed camera's frame is dropped and its session recovered (as `StreamingSession.push`); the error is
    also in that camera's ``stats(name).session.last_error``.
    """

    results: dict[str, list[FrameResult]] = field(default_factory=dict)
    errors: dict[str, Exception] = field(default_factory=dict)


class MultiStreamSession:
    """N named camera streams over one model and one shared KV pool.

    Args:
        model: the `LingBotMap` (one copy of the weights for every camera).
        config: the streaming policy of every camera (one `SessionConfig`).
        names: the cameras' names (distinct, non-empty).
        batch: scheduling (`BatchConfig`).
    """

    def __init__(
        self,
        model: torch.nn.Module,
        config: SessionConfig | None,
        names: Sequence[str],
        batch: BatchConfig | None = None,
    ) -> None:
        names = list(names)
        if not names or len(set(names)) != len(names) or not all(isinstance(n, str) for n in names):
            raise ValueError(f"names must be distinct strings, at least one, got {names!r}")
        self.config = config or SessionConfig()
        self.batch = batch or BatchConfig()
        self.model = model
        self.pool = model.new_pool(self.config.backend, streams=len(names))
        self.sessions = {name: StreamingSession(model, self.config, kv_pool=self.pool) for name in names}
        self._queues: dict[str, deque[tuple[np.ndarray, object]]] = {
            name: deque(maxlen=self.batch.queue_depth) for name in names
        }
        self._dropped = dict.fromkeys(names, 0)
        self._batches: dict[int, int] = {}  # batch size -> batched model steps
        self._ready = threading.Condition()
        self._step_lock = threading.Lock()

    @property
    def names(self) -> list[str]:
        return list(self.sessions)

    # ------------------------------------------------------------------ input

    def submit(self, name: str, rgb: np.ndarray, meta: object = None) -> None:
        """Queue a frame of camera ``name`` for the next round (thread-safe; never blocks on the model)."""
        queue = self._queue(name)
        with self._ready:
            if len(queue) == queue.maxlen:
                self._dropped[name] += 1
            queue.append((rgb, meta))
            self._ready.notify_all()

    def step(self, timeout_s: float | None = None) -> RoundResults:
        """Wait for a frame (at most ``timeout_s``; None: forever), then up to ``max_wait_ms`` for the other
        cameras, and run one round over every camera that has a frame. Empty results on timeout."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        with self._ready:
            if not self._ready.wait_for(self._any_ready, None if deadline is None else timeout_s):
                return RoundResults()
            gather_until = time.monotonic() + self.batch.max_wait_ms / 1e3
            while not self._all_ready():
                left = gather_until - time.monotonic()
                if left <= 0 or not self._ready.wait(left):
                    break
            frames = {name: q.popleft() for name, q in self._queues.items() if q}
        return self.run_round(frames)

    # ------------------------------------------------------------------ rounds

    def run_round(self, frames: dict[str, tuple[np.ndarray, object]]) -> RoundResults:
        """One frame of each camera in ``frames`` (name -> (rgb, meta)): anchor phases and re-anchors on
        their own, streaming frames batched per network resolution. Results per camera in frame order."""
        for name in frames:
            self._session(name)
        out = RoundResults({name: [] for name in frames})
        with self._step_lock:
            waiting: dict[str, StreamingFrame] = {}
            for name, (rgb, meta) in frames.items():
                try:
                    done, frame = self.sessions[name].begin_frame(rgb, meta)
                except Exception as exc:  # noqa: BLE001 - the session recovered; report per camera
                    out.errors[name] = exc
                    continue
                out.results[name].extend(done)
                if frame is not None:
                    waiting[name] = frame
            for group in self._groups(waiting):
                self._run_group(group, waiting, out)
        return out

    def _groups(self, waiting: dict[str, StreamingFrame]) -> list[list[str]]:
        """Camera names with a waiting frame, grouped by network resolution, at most ``max_batch`` each."""
        by_hw: dict[tuple[int, ...], list[str]] = {}
        for name, frame in waiting.items():
            by_hw.setdefault(tuple(frame.images.shape[-2:]), []).append(name)
        size = self.batch.max_batch
        return [names[i : i + size] for names in by_hw.values() for i in range(0, len(names), size)]

    def _run_group(self, names: list[str], waiting: dict[str, StreamingFrame], out: RoundResults) -> None:
        frames = [waiting[name] for name in names]
        start = time.perf_counter()
        try:
            with torch.inference_mode():
                if len(frames) == 1:
                    f = frames[0]
                    outputs = [self.model.step(f.images, f.state, keyframe=f.keyframe)]
                else:
                    images = torch.cat([f.images for f in frames])
                    states = [f.state for f in frames]
                    outputs = self.model.step_batch(images, states, [f.keyframe for f in frames])
        except Exception as exc:  # noqa: BLE001 - every camera of the batch drops its frame and recovers
            for name in names:
                self.sessions[name].fail_frame(exc)
                out.errors[name] = exc
            return
        model_ms = 1e3 * (time.perf_counter() - start)
        self._batches[len(frames)] = self._batches.get(len(frames), 0) + 1
        for name, frame, output in zip(names, frames, outputs, strict=True):
            try:
                out.results[name].append(self.sessions[name].finish_frame(frame, output, model_ms))
            except Exception as exc:  # noqa: BLE001 - e.g. non-finite outputs: that camera recovered
                out.errors[name] = exc

    # ------------------------------------------------------------------ control and diagnostics

    def warm_up(self, image_hw: tuple[int, int], streaming_frames: int = 3) -> float:
        """`StreamingSession.warm_up` of every camera (its single-camera CUDA graphs, compiled blocks), before
        the first frame; counters and epochs untouched. Batched steps are eager (nothing to
        capture). Returns seconds."""
        with self._step_lock:
            return sum(s.warm_up(image_hw, streaming_frames) for s in self.sessions.values())

    def reset(self, name: str, reason: str = "reset requested") -> None:
        """Reset camera ``name`` only (new epoch); the other cameras keep mapping, their caches untouched.
        Waits for a round in progress (call this, not ``sessions[name].reset``, from other threads)."""
        session = self._session(name)
        with self._step_lock:
            session.reset(reason)
            with self._ready:
                self._queues[name].clear()

    def set_sliding_window(self, n: int, name: str | None = None) -> None:
        """Resize the live window of camera ``name`` (None: every camera), between rounds."""
        sessions = [self._session(name)] if name is not None else list(self.sessions.values())
        with self._step_lock:
            for session in sessions:
                session.set_sliding_window(n)

    def stats(self, name: str) -> CameraStats:
        """Camera ``name``'s `StreamingSession.stats()` plus its queue and dropped frames."""
        session = self._session(name).stats()
        with self._ready:
            return CameraStats(session, len(self._queues[name]), self._dropped[name])

    def pool_stats(self) -> dict[str, object]:
        """The shared pool (capacity, regions, bytes) and how many batched steps of each size ran."""
        stats = self.pool.stats()
        return {**dataclasses.asdict(stats), "batches": dict(sorted(self._batches.items()))}

    # ------------------------------------------------------------------ internals

    def _session(self, name: str) -> StreamingSession:
        if name not in self.sessions:
            raise ValueError(f"unknown camera {name!r}; cameras: {self.names}")
        return self.sessions[name]

    def _queue(self, name: str) -> deque:
        self._session(name)
        return self._queues[name]

    def _any_ready(self) -> bool:
        return any(self._queues.values())

    def _all_ready(self) -> bool:
        return all(self._queues.values())
