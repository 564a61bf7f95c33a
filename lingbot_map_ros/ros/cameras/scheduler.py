"""One inference thread for every camera of the node: a drop-oldest queue per camera, one step at a time.

Each camera has its own bounded queue (`queue_size`, drop-oldest, its own counters as `WorkerStats`), so a
fast camera never evicts a slow camera's frames. The thread takes the oldest frame of every camera that has
one (round robin, starting after the camera served first last time) and hands that batch to `step` — the
one place where "step the cameras that have frames" happens (the node runs it as one
`MultiStreamSession.run_round`: streaming frames batched into one model step). Once one camera has a frame it
waits at most `max_wait_s` for the others (`batch.max_wait_ms`), so a slow or paused camera never stalls a
fast one by more. With one camera this is exactly `LaneWorker`'s behaviour. `on_idle` runs on the
thread after a step that left no frame queued (the node flushes its one-deep overlapped pipeline there, so a
frame's result never waits for a next frame that is not there), and once more when the thread stops. `gaps`
(engine/gpu_gaps.py): GPU work of other threads (the loop closer's verification passes) that this thread
runs after a step, one task at a time within the gaps' time budget, never beside a step's launch; with no
frame queued the thread wakes up for it, and once no frame has come for `GAPS_FREE_AFTER_S` (the cameras
stopped) it runs them back to back, free of the budget.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Hashable, Sequence
from typing import Generic, TypeVar

from ...engine.face import GpuGaps, Lane, WorkerStats, WorkerStopped

#: Seconds without a frame after which gap tasks run free of their budget (no live frame to delay).
GAPS_FREE_AFTER_S = 0.5

Item = TypeVar("Item")
Key = TypeVar("Key", bound=Hashable)


class StreamScheduler(Generic[Key, Item]):
    """Per-camera drop-oldest queues feeding one thread that steps the cameras with a frame ready.

    Args:
        keys: the cameras, in order (round robin starts with the first).
        step: called on the thread with `[(key, item), ...]` (at most one item per camera, oldest first);
            returns one entry per item: None, or the exception its camera's step raised (the seam for a
            batched step). Should `step` itself raise, every item of the batch counts as failed.
        queue_size: capacity of each camera's queue (>= 1).
        on_error: `(key, item, exception)` of each failed item, on the thread, after the counters.
        name: the thread's name.
        max_wait_s: once a camera has a frame, how long to wait for the other cameras' frames.
        on_idle: called on the thread after a step when no camera has a frame queued, and when stopping
            (its exceptions are its own to handle: one escaping is swallowed).
        gaps: tasks of other threads run on this thread between steps (attached here, detached by `stop`).
    """

    def __init__(
        self,
        keys: Sequence[Key],
        step: Callable[[list[tuple[Key, Item]]], list[Exception | None]],
        queue_size: int,
        on_error: Callable[[Key, Item, Exception], None],
        name: str = "lingbot_map_inference",
        max_wait_s: float = 0.0,
        on_idle: Callable[[], None] | None = None,
        gaps: GpuGaps | None = None,
    ) -> None:
        self._max_wait_s = max_wait_s
        self._gaps = gaps
        self._on_idle = on_idle
        self._keys = list(keys)
        self._lanes: dict[Key, Lane[Item]] = {key: Lane(queue_size) for key in self._keys}
        self._step = step
        self._on_error = on_error
        self._cond = threading.Condition()
        self._stopping = False
        self._next = 0  # index in `_keys` of the camera served first in the next batch
        self._last_frame = time.monotonic()  # when the last frame came (gap tasks: `GAPS_FREE_AFTER_S`)
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        if gaps is not None:
            gaps.attach(self._wake)
        self._thread.start()

    def submit(self, key: Key, item: Item) -> bool:
        """Enqueue `item` for camera `key`; False when its oldest queued item was dropped for it.

        Raises:
            WorkerStopped: the scheduler is stopped.
        """
        with self._cond:
            if self._stopping:
                raise WorkerStopped("StreamScheduler is stopped")
            kept = self._lanes[key].push(item)
            self._last_frame = time.monotonic()
            self._cond.notify_all()
        return kept

    def clear(self, key: Key) -> int:
        """Discard camera `key`'s queued frames (not one being stepped); returns how many."""
        with self._cond:
            count = self._lanes[key].clear()
            self._cond.notify_all()
            return count

    def stats(self, key: Key) -> WorkerStats:
        """Camera `key`'s counters (the invariant of `WorkerStats` holds per camera)."""
        with self._cond:
            return self._lanes[key].stats()

    def stop(self, timeout: float = 30.0) -> bool:
        """Drop queued frames, let the current step finish and join the thread; False if it did not end."""
        with self._cond:
            self._stopping = True
            for lane in self._lanes.values():
                lane.queue.clear()
            self._cond.notify_all()
        self._thread.join(timeout)
        if self._gaps is not None:
            self._gaps.detach()
        return not self._thread.is_alive()

    def _wake(self) -> None:
        """A gap task was queued: wake the thread if it waits for frames."""
        with self._cond:
            self._cond.notify_all()

    def _take(self) -> list[tuple[Key, Item]] | None:
        """The next batch (oldest frame of each camera that has one; [] when only a gap task is due), None
        when stopping."""
        with self._cond:
            while not self._stopping and not any(lane.queue for lane in self._lanes.values()):
                free_in = self._last_frame + GAPS_FREE_AFTER_S - time.monotonic()
                due = None if self._gaps is None else self._gaps.wait_s(free=free_in <= 0)
                if due == 0.0:
                    return []
                if due is not None and free_in > 0:
                    due = min(due, free_in)
                self._cond.wait(due)
            gather_until = time.monotonic() + self._max_wait_s
            while not self._stopping and not all(lane.queue for lane in self._lanes.values()):
                left = gather_until - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(left)
            if self._stopping:
                return None
            order = self._keys[self._next :] + self._keys[: self._next]
            self._next = (self._next + 1) % len(self._keys)
            batch = [(key, self._lanes[key].queue.popleft()) for key in order if self._lanes[key].queue]
            for key, _ in batch:
                self._lanes[key].busy = True
            self._cond.notify_all()
            return batch

    def _run(self) -> None:
        while (batch := self._take()) is not None:
            if batch:
                self._step_batch(batch)
            if self._gaps is not None:  # after the step (and the flush of its frame in flight), one task
                self._gaps.run_due(free=not batch and self._idle_for() >= GAPS_FREE_AFTER_S)
        self._idle()  # stopping: what a step left in flight

    def _step_batch(self, batch: list[tuple[Key, Item]]) -> None:
        try:
            errors = self._step(batch)
        except Exception as exc:  # noqa: BLE001 - a failed step must not kill the node
            errors = [exc] * len(batch)
        with self._cond:
            for (key, _), error in zip(batch, errors, strict=True):
                lane = self._lanes[key]
                lane.processed += 1
                lane.failed += error is not None
                lane.busy = False
            self._cond.notify_all()
        for (key, item), error in zip(batch, errors, strict=True):
            if error is not None:
                self._on_error(key, item, error)
        if not self._queued():
            self._idle()

    def _idle_for(self) -> float:
        with self._cond:
            return time.monotonic() - self._last_frame

    def _queued(self) -> bool:
        with self._cond:
            return any(lane.queue for lane in self._lanes.values())

    def _idle(self) -> None:
        if self._on_idle is None:
            return
        with contextlib.suppress(Exception):  # the callback reports its own failures; the thread goes on
            self._on_idle()
