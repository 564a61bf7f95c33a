"""`Lane`: the package's one drop-oldest bounded queue, and its counters (`WorkerStats`).

No thread and no lock of its own: its owner guards it with its condition (engine/lane_worker.py `LaneWorker`,
ros/cameras/scheduler.py `StreamScheduler`, engine/loop/closer.py `LoopClosureWorker`). A full lane drops its
oldest item to admit a new one, counted.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Generic, TypeVar

Item = TypeVar("Item")


@dataclass(frozen=True)
class WorkerStats:
    """Counters since the worker started.

    `processed` counts every frame the thread took (failed ones included), `failed` those whose processing
    raised, `dropped` those evicted unprocessed from a full queue; `queued` is the current queue length and
    `max_queued` its high-water mark (never above the capacity), `in_flight` 1 while a frame is being
    processed. Invariant: submitted == processed + dropped + queued + in_flight.
    """

    submitted: int
    processed: int
    dropped: int
    failed: int
    queued: int
    max_queued: int
    in_flight: int


class Lane(Generic[Item]):
    """A drop-oldest bounded queue and its counters (`WorkerStats`); the owner guards it with its condition.

    The package's one drop-oldest queue: a `LaneWorker` (engine/lane_worker.py: the camera pipeline's pose
    stage and each camera's map thread) has one, the node's `StreamScheduler` (ros/cameras/scheduler.py) one
    per camera, the loop closer's thread (engine/loop/closer.py) one.
    """

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"queue_size must be >= 1, got {capacity}")
        self.capacity = capacity
        self.queue: deque[Item] = deque()
        self.busy = False
        self.submitted = self.processed = self.dropped = self.failed = self.max_queued = 0

    @property
    def full(self) -> bool:
        return len(self.queue) >= self.capacity

    def push(self, item: Item) -> bool:
        """Append `item`; False when the oldest queued item was dropped for it."""
        dropped = self.full
        if dropped:
            self.queue.popleft()
            self.dropped += 1
        self.queue.append(item)
        self.submitted += 1
        self.max_queued = max(self.max_queued, len(self.queue))
        return not dropped

    def clear(self) -> int:
        """Discard the queued items (not one in flight); returns how many."""
        count = len(self.queue)
        self.queue.clear()
        return count

    def stats(self) -> WorkerStats:
        return WorkerStats(
            submitted=self.submitted,
            processed=self.processed,
            dropped=self.dropped,
            failed=self.failed,
            queued=len(self.queue),
            max_queued=self.max_queued,
            in_flight=int(self.busy),
        )
