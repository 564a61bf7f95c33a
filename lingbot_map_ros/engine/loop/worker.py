"""`LoopClosureWorker`: a `LoopCloser` on its own daemon thread, off the pose path (docs/loop_closure.md)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

import numpy as np

from ..lanes import Lane
from ..lock_order import OrderedLock
from ..result import FrameResult
from .closer import LoopCloser, LoopEvent

_LOG = logging.getLogger(__name__)


class LoopClosureWorker:
    """A `LoopCloser` on its own daemon thread: `submit` keyframe results (drop-oldest queue), `on_event`
    gets each `LoopEvent` on that thread; `snapshot()` reads under the closer's lock."""

    def __init__(self, closer: LoopCloser, on_event: Callable[[LoopEvent], None] | None = None) -> None:
        self.closer = closer
        self.on_event = on_event
        self.lock = OrderedLock("loop.worker_lock")
        self._lane: Lane[tuple[str, object, float]] = Lane(closer.config.queue_depth)  # drop-oldest
        self._ready = threading.Condition()  # guards the lane and `_busy`
        self._busy = False  # an item taken from the lane and not yet done
        self._thread = threading.Thread(target=self._run, name="loop_closure", daemon=True)
        self._thread.start()

    @property
    def dropped(self) -> int:
        """Items dropped from the full queue (the oldest first)."""
        with self._ready:
            return self._lane.dropped

    @property
    def backlog(self) -> int:
        """Items waiting in the queue plus the one in progress (0: the closer has caught up)."""
        with self._ready:
            return len(self._lane.queue) + self._busy

    def submit(self, result: FrameResult, stamp_s: float, odometry: np.ndarray | None = None) -> None:
        """Queue a keyframe result, with the robot's odometry pose [4, 4] when known (`LoopCloser.add`);
        never blocks: the oldest waiting one is dropped when full."""
        self._put(("frame", (result, odometry), stamp_s))

    def call(self, under_lock: Callable[[], object], after: Callable[[object], None] | None = None) -> None:
        """Run `under_lock()` on the closer's thread under its lock (after what is queued; drop-oldest like
        `submit`), then `after(its result)` outside the lock (a relocalisation's search, then its
        correction)."""
        self._put(("call", (under_lock, after), 0.0))

    def request_optimize(self) -> None:
        self._put(("optimize", None, 0.0))

    def clear(self) -> None:
        self._put(("clear", None, 0.0))

    def reject_last_loop(self, timeout_s: float = 30.0) -> bool:
        """`LoopCloser.reject_last_loop` on the closer's thread after what is queued; waits for it. False
        when there was no loop to undo (or the wait timed out)."""
        done: list[bool] = []
        self._put(("reject", done, 0.0))
        self.join_idle(timeout_s)
        return bool(done and done[0])

    def stop(self, timeout_s: float = 5.0) -> None:
        self._put(("stop", None, 0.0))
        self._thread.join(timeout_s)

    def join_idle(self, timeout_s: float = 30.0) -> None:
        """Wait until everything queued so far was processed (tests, `run`)."""
        done = threading.Event()
        self._put(("mark", done, 0.0))
        done.wait(timeout_s)

    def _put(self, item: tuple[str, object, float]) -> None:
        with self._ready:
            self._lane.push(item)  # a full lane drops its oldest item, counted
            self._ready.notify()

    def _run(self) -> None:
        while True:
            with self._ready:
                self._ready.wait_for(lambda: self._lane.queue)
                kind, payload, stamp_s = self._lane.queue.popleft()
                self._busy = kind != "stop"
            if kind == "stop":
                return
            try:
                event, called, after = None, None, None
                with self.lock:
                    if kind == "frame":
                        result, odometry = payload  # type: ignore[misc]
                        event = self.closer.add(result, stamp_s, odometry)
                    elif kind == "call":
                        under_lock, after = payload  # type: ignore[misc]
                        called = under_lock()
                    elif kind == "optimize":
                        self.closer.optimize()
                    elif kind == "clear":
                        self.closer.clear()
                    elif kind == "reject":
                        payload.append(self.closer.reject_last_loop())  # type: ignore[union-attr]
                    elif kind == "mark":
                        payload.set()  # type: ignore[union-attr]
                if event is not None and self.on_event is not None:
                    self.on_event(event)
                if after is not None:
                    after(called)
            except Exception:  # the closer must never take the node down; the map keeps its last poses
                _LOG.exception("loop closure failed on a %s item", kind)
            finally:
                with self._ready:
                    self._busy = False
