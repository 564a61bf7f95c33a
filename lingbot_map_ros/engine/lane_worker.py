"""`LaneWorker`: a bounded queue (`Lane`, engine/lanes.py) feeding one thread.

Its users: the node's inference queue callbacks only call `submit` (O(1), never blocks the executor; a full
queue drops its oldest item, counted), the camera pipeline's pose stage (engine/camera_pipeline.py: blocking
`submit` = back-pressure, nothing dropped) and each camera's map thread (ros/outputs/map_worker.py). One
thread takes the items in arrival order and calls `process(item)`; output order is therefore input order.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Generic, TypeVar

from .lanes import Lane, WorkerStats

Item = TypeVar("Item")


class WorkerStopped(RuntimeError):
    """`LaneWorker.submit` on a stopped worker (e.g. a frame converted while the node deactivates)."""


class LaneWorker(Generic[Item]):
    """Drop-oldest bounded queue feeding one processing thread.

    Args:
        process: called on the worker thread with each frame, in arrival order.
        queue_size: capacity (>= 1); a full queue drops its oldest frame to admit a new one.
        on_error: called on the worker thread with `(frame, exception)` when `process` raises; the worker
            counts the failure and carries on with the next frame.
    """

    def __init__(
        self,
        process: Callable[[Item], None],
        queue_size: int,
        on_error: Callable[[Item, Exception], None],
        name: str = "lingbot_map_inference",
    ) -> None:
        self._lane: Lane[Item] = Lane(queue_size)
        self._process = process
        self._on_error = on_error
        self._cond = threading.Condition()
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, item: Item, block: bool = False) -> bool:
        """Enqueue an item; returns False when the oldest queued item had to be dropped for it.

        With `block` a full queue is waited on instead (back-pressure, nothing dropped; used for the publish
        stage, whose items must all be published).

        Raises:
            WorkerStopped (a RuntimeError): the worker is stopped (also when it stops while `block` waits).
        """
        with self._cond:
            while block and self._lane.full and not self._stopping:
                self._cond.wait()
            if self._stopping:
                raise WorkerStopped("LaneWorker is stopped")
            kept = self._lane.push(item)
            self._cond.notify_all()
        return kept

    def clear(self) -> int:
        """Discard queued frames (not the one being processed); returns how many were discarded."""
        with self._cond:
            count = self._lane.clear()
            self._cond.notify_all()
            return count

    def wait_idle(self, timeout: float) -> bool:
        """Block until the queue is empty and no frame is being processed; False on timeout."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._lane.queue or self._lane.busy:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._cond.wait(remaining)
        return True

    @property
    def stopped(self) -> bool:
        """True once `stop` was called (submit then raises `WorkerStopped`)."""
        return self._stopping

    def stats(self) -> WorkerStats:
        """A consistent snapshot of the counters."""
        with self._cond:
            return self._lane.stats()

    def stop(self, timeout: float = 30.0) -> bool:
        """Drop queued frames, let the current one finish and join the thread; False if it did not end."""
        with self._cond:
            self._stopping = True
            self._lane.clear()
            self._cond.notify_all()
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._lane.queue and not self._stopping:
                    self._cond.wait()
                if self._stopping:
                    return
                item = self._lane.queue.popleft()
                self._lane.busy = True
                self._cond.notify_all()  # a blocked submit may go on
            try:
                self._process(item)
            except Exception as exc:  # noqa: BLE001 - a failed frame must not kill the node
                with self._cond:
                    self._lane.failed += 1
                self._on_error(item, exc)
            finally:
                with self._cond:
                    self._lane.processed += 1
                    self._lane.busy = False
                    self._cond.notify_all()
