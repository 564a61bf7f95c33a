"""`MultiStreamSession`: the node's set of cameras (one or several) through one model.

`build_engine` always returns one: a single camera is a set of one. Each camera has its own
`StreamingSession` (pre-processing, anchor phase, keyframe policy, re-anchors, recovery, decoding, epoch and
map frame). A set of one runs its lone session exactly as a single stream: `StreamingSession.push` (CUDA
graphs) or, with ``overlap``, `push_overlapped` + `flush` (the one-deep pipeline, docs/performance.md).
Several cameras keep their caches in one shared KV pool (``model.new_pool()``): a round takes at most one
frame per camera, each session takes its frame in (`StreamingSession.batched.begin_frame`; anchor phases and
re-anchors run there, on their own), the plain streaming frames are grouped by network resolution and run as
ONE `LingBotMap.step_batch` per group (at most ``max_batch`` frames), and each session decodes its own result
(`finish_frame`); a lone streaming frame runs through ``model.step``. So every camera's results equal those of
its own `StreamingSession` fed the same frames (docs/architecture.md, "Several cameras").

With ``overlap`` several cameras run a one-deep pipeline of rounds, as `push_overlapped` does for one camera:
round n+1's frames are taken in (pre-processing, upload) while round n's step is on the GPU, its step is
queued right behind it, and only then round n's results are collected and decoded, every camera's (also of a
camera without a frame in round n+1). The same model calls in the same order: each result equals the
unpipelined round's, one round later; `flush` returns a camera's frame still in flight, and a reset drops it
unread (its result belongs to the stream before).

Scheduling (which frames make a round, how long to wait for the other cameras) is the caller's: the node's
`ros/cameras/scheduler.py` reads ``BatchConfig.max_wait_ms``; `run_round` is called from one thread at a time,
and ``reset`` / ``set_sliding_window`` wait for a round in progress.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from ..config import SessionConfig
from ..contracts import SessionStats, StreamingModel
from ..lock_order import OrderedLock
from ..result import FrameResult
from ..settings import setting
from .preprocess import preprocess_geometry
from .session import StreamingSession
from .step_frames import InFlightFrame, StreamingFrame


@dataclass(frozen=True)
class BatchConfig:
    """How several cameras are stepped together (``batch.*`` parameters).

    Attributes:
        max_wait_ms: once one camera has a frame, the scheduler waits at most this long for the others.
        max_batch: most streaming frames in one batched model step.
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

    def __post_init__(self) -> None:
        if not self.max_wait_ms >= 0:
            raise ValueError(f"BatchConfig.max_wait_ms must be >= 0, got {self.max_wait_ms!r}")
        value = self.max_batch
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"BatchConfig.max_batch must be an int >= 1, got {value!r}")


@dataclass
class RoundResults:
    """What one round produced: per camera its results (in order), and the cameras whose frame failed.

    A failed camera's frame is dropped and its session recovered (as `StreamingSession.push`); the error is
    also in that camera's ``stats(name).last_error``.
    """

    results: dict[str, list[FrameResult]] = field(default_factory=dict)
    errors: dict[str, Exception] = field(default_factory=dict)


class MultiStreamSession:
    """The set of camera streams (one or several) over one model; several share one KV pool.

    Args:
        model: the `LingBotMap` (one copy of the weights for every camera).
        config: the streaming policy of every camera (one `SessionConfig`).
        names: the cameras' names (distinct strings, at least one; "" is a single unnamed camera).
        batch: how several cameras' streaming frames are batched (`BatchConfig`).
    """

    def __init__(
        self,
        model: StreamingModel,
        config: SessionConfig | None,
        names: Sequence[str],
        batch: BatchConfig | None = None,
    ) -> None:
        names = list(names)
        if not names or len(set(names)) != len(names) or not all(isinstance(n, str) for n in names):
            raise ValueError(f"names must be distinct strings, at least one, got {names!r}")
        self.config = config or SessionConfig()
        self.batch = batch or BatchConfig()
        self._model = model
        self.pool = model.new_pool(self.config.backend, streams=len(names)) if len(names) > 1 else None
        self.sessions = {name: StreamingSession(model, self.config, kv_pool=self.pool) for name in names}
        self._batches: dict[int, int] = {}  # batch size -> batched model steps
        # False: batched steps run eagerly even where CUDA graphs apply (benchmarks/multi_camera.py A/B)
        self.batch_graphs = True
        self._step_lock = OrderedLock("cameras.step_lock")

    @property
    def names(self) -> list[str]:
        return list(self.sessions)

    @property
    def model(self) -> StreamingModel:
        """The model every camera steps through."""
        return self._model

    @model.setter
    def model(self, model: StreamingModel) -> None:
        """Step every camera through ``model`` from the next round on (e.g. test/fault_injection.py)."""
        self._model = model
        for session in self.sessions.values():
            session.model = model

    @property
    def only(self) -> StreamingSession:
        """The session of a set of one camera (a tool streaming one camera). Raises ValueError otherwise."""
        if len(self.sessions) != 1:
            raise ValueError(f"a set of {len(self.sessions)} cameras has no only session: {self.names}")
        return next(iter(self.sessions.values()))

    # ------------------------------------------------------------------ rounds

    def run_round(
        self,
        frames: dict[str, tuple[np.ndarray, object]],
        overlap: bool = False,
        depth: Collection[str] = (),
    ) -> RoundResults:
        """One frame of each camera in ``frames`` (name -> (rgb, meta)). Results per camera in frame order.

        A set of one: `StreamingSession.push` (``overlap``: `push_overlapped`, whose results are those of
        the frame before, up to `flush`); ``depth``: the cameras whose depth head runs for this frame
        whatever ``depth_every_n`` says. Several cameras: anchor phases and re-anchors on their own,
        streaming frames batched per network resolution (``depth`` does not apply); ``overlap``: the
        one-deep pipeline of rounds (module doc), whose results may also name cameras not in ``frames``
        (their frame in flight, decoded now). Raises ValueError for an unknown camera.
        """
        for name in frames:
            self._session(name)
        out = RoundResults({name: [] for name in frames})
        with self._step_lock:
            if self.pool is None:
                for name, (rgb, meta) in frames.items():
                    session = self.sessions[name]
                    push = session.push_overlapped if overlap else session.push
                    try:
                        out.results[name] = push(rgb, meta=meta, depth=name in depth)
                    except Exception as exc:  # noqa: BLE001 - the session recovered; report per camera
                        out.errors[name] = exc
                return out
            waiting: dict[str, StreamingFrame] = {}
            for name, (rgb, meta) in frames.items():
                try:
                    done, frame = self.sessions[name].batched.begin_frame(rgb, meta, overlapped=overlap)
                except Exception as exc:  # noqa: BLE001 - the session recovered; report per camera
                    out.errors[name] = exc
                    continue
                out.results[name].extend(done)
                if frame is not None:
                    waiting[name] = frame
            if overlap:
                self._pipelined_round(waiting, out)
                return out
            for group in self._groups(waiting):
                stepped = self._step_group(group, waiting, out)
                if stepped is None:
                    continue
                outputs, model_ms = stepped
                for name, output in zip(group, outputs, strict=True):
                    try:
                        out.results[name].append(
                            self.sessions[name].batched.finish_frame(waiting[name], output, model_ms)
                        )
                    except Exception as exc:  # noqa: BLE001 - e.g. non-finite outputs: that camera recovered
                        out.errors[name] = exc
        return out

    def _pipelined_round(self, waiting: dict[str, StreamingFrame], out: RoundResults) -> None:
        """Queue this round's steps, then collect and decode the round before's (module doc)."""
        before: dict[str, InFlightFrame | None] = {}
        for group in self._groups(waiting):
            stepped = self._step_group(group, waiting, out)
            if stepped is None:  # as push_overlapped: the frame in flight ran before the failure, kept
                continue
            outputs, model_ms = stepped
            for name, output in zip(group, outputs, strict=True):
                try:
                    before[name] = self.sessions[name].batched.launch_frame(waiting[name], output, model_ms)
                except Exception as exc:  # noqa: BLE001 - its copies failed to queue: dropped, recovered
                    self.sessions[name].batched.fail_frame(exc)
                    out.errors[name] = exc
        for name, session in self.sessions.items():
            if name in out.errors:
                continue
            try:
                if name in before:
                    previous = before[name]
                    done = [] if previous is None else [session.batched.finish_launched(previous)]
                else:  # no step of its own this round: its frame in flight is done all the same
                    done = session.flush()
            except Exception as exc:  # noqa: BLE001 - e.g. non-finite outputs: that camera recovered
                out.errors[name] = exc
                continue
            if done:
                out.results.setdefault(name, []).extend(done)

    def flush(self, name: str) -> list[FrameResult]:
        """Camera ``name``'s frame still in flight after an ``overlap`` round (``[]`` if none). Raises as
        `StreamingSession.flush`."""
        session = self._session(name)
        with self._step_lock:
            return session.flush()

    def _groups(self, waiting: dict[str, StreamingFrame]) -> list[list[str]]:
        """Camera names with a waiting frame, grouped by network resolution, at most ``max_batch`` each."""
        by_hw: dict[tuple[int, ...], list[str]] = {}
        for name, frame in waiting.items():
            by_hw.setdefault(tuple(frame.images.shape[-2:]), []).append(name)
        size = self.batch.max_batch
        return [names[i : i + size] for names in by_hw.values() for i in range(0, len(names), size)]

    def _step_group(
        self, names: list[str], waiting: dict[str, StreamingFrame], out: RoundResults
    ) -> tuple[list[object], float] | None:
        """ONE model step of the cameras ``names`` (one resolution): their outputs and the step's time in
        ms, or None when it raised (every camera of the group then drops its frame and recovers)."""
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
                    keyframes = [f.keyframe for f in frames]
                    outputs = self.model.step_batch(images, states, keyframes, graphs=self.batch_graphs)
        except Exception as exc:  # noqa: BLE001 - every camera of the batch drops its frame and recovers
            for name in names:
                self.sessions[name].batched.fail_frame(exc)
                out.errors[name] = exc
            return None
        self._batches[len(frames)] = self._batches.get(len(frames), 0) + 1
        return list(outputs), 1e3 * (time.perf_counter() - start)

    # ------------------------------------------------------------------ control and diagnostics

    def warm_up(self, image_hw: tuple[int, int], streaming_frames: int = 3) -> float:
        """`StreamingSession.warm_up` of every camera (its single-camera CUDA graphs, compiled blocks), then
        the CUDA graphs of batched steps of 2 .. min(cameras, max_batch) cameras (`LingBotMap.warm_up_batch`;
        the first cameras' camera-head graph, another set of cameras captures its own, smaller, on its first
        batch), before the first frame; counters and epochs untouched. Returns seconds."""
        with self._step_lock:
            seconds = sum(s.warm_up(image_hw, streaming_frames) for s in self.sessions.values())
            warm_up_batch = getattr(self.model, "warm_up_batch", None)  # test doubles may have none
            if self.pool is None or not self.batch_graphs or warm_up_batch is None:
                return seconds
            start = time.perf_counter()
            network_hw = preprocess_geometry(tuple(image_hw), self.config.image_width).out_hw
            states = [session.batched.model_state for session in self.sessions.values()]
            for size in range(2, min(len(states), self.batch.max_batch) + 1):
                warm_up_batch(states[:size], network_hw)
            return seconds + time.perf_counter() - start

    def reset(self, name: str, reason: str = "reset requested") -> None:
        """Reset camera ``name`` only (new epoch); the other cameras keep mapping, their caches untouched.
        Waits for a round in progress (call this, not ``sessions[name].reset``, from other threads); the
        camera's frame in flight (``overlap``) is waited for and dropped unread (`BatchedSteps.drain`)."""
        session = self._session(name)
        with self._step_lock:
            session.batched.drain()
            session.reset(reason)

    def set_sliding_window(self, n: int, name: str | None = None) -> None:
        """Resize the live window of camera ``name`` (None: every camera), between rounds."""
        sessions = [self._session(name)] if name is not None else list(self.sessions.values())
        with self._step_lock:
            for session in sessions:
                session.set_sliding_window(n)

    def stats(self, name: str) -> SessionStats:
        """Camera ``name``'s `StreamingSession.stats()`."""
        return self._session(name).stats()

    def pool_stats(self) -> dict[str, object] | None:
        """The shared pool (capacity, regions, bytes), how many batched steps of each size ran, and the GPU
        memory each camera adds (docs/performance.md, "Memory per camera"): ``camera_kv_bytes`` its KV
        region, ``camera_history_bytes`` its camera-head history; None for a set of one (no shared pool)."""
        if self.pool is None:
            return None
        stats = self.pool.stats()
        per_token = stats.pool_bytes // stats.capacity_tokens if stats.capacity_tokens else 0
        kv, history = {}, {}
        for name, session in self.sessions.items():
            state = session.batched.model_state
            region = getattr(state.kv_cache, "region", None)
            kv[name] = region.tokens * per_token if region is not None else 0
            history[name] = 2 * state.camera.k.numel() * state.camera.k.element_size()
        return {
            **dataclasses.asdict(stats),
            "batches": dict(sorted(self._batches.items())),
            "camera_kv_bytes": kv,
            "camera_history_bytes": history,
        }

    # ------------------------------------------------------------------ internals

    def _session(self, name: str) -> StreamingSession:
        if name not in self.sessions:
            raise ValueError(f"unknown camera {name!r}; cameras: {self.names}")
        return self.sessions[name]
