"""`GpuGaps`: GPU work of other threads run by the inference thread between live steps, within a time budget.

The loop closer's verification passes (engine/loop/verify.py) are model steps of their own. On the closer's
thread they launched their ~3,000 kernels beside the live step, competing for the GPU and the GIL (issue 31:
loop closure cost the live stream 11 % of its rate at 60 Hz and 2-3x its p99 at 30 Hz). Through `GpuGaps` the
closer's thread hands the pass over (`call`: queue, then wait for its result) and the inference thread runs it
(`run_due`) after a live step, never beside one's launch, when its budget allows: a token bucket that fills
at `budget` seconds per second of wall time (at most `burst_s` ahead) and pays each task's wall time. So at a
saturated camera rate the live stream gives at most `budget` of its time to verification, and at a camera
slower than the model the passes fill the gaps. One task per gap: a live frame waits behind at most one. Once
no frame has come for a while (the camera stopped; `run_due(free=True)`, the scheduler's call) the tasks run
back to back without paying: there is no live frame to delay, and the closer catches up.

A task may only launch GPU work on a side stream and return (the graphed verification pass,
engine/loop/pair_launch.py: about a millisecond of the inference thread); its caller waits for the GPU outside
the gap and pays the GPU time afterwards (`charge`), so the budget bounds the GPU time too.

While no inference thread is attached (`attach` / `detach`: the node's activate / deactivate; offline tools
never attach one) `call` runs the task on the caller's thread, as before. `detach` fails the tasks still
queued (`GpuGapsDetached`), so a caller never waits for a thread that is gone.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from typing import TypeVar

T = TypeVar("T")

#: Default share of the inference thread's wall time that tasks may take (3 %: issue 31's bound on the rate).
DEFAULT_BUDGET = 0.03
#: Default credit the bucket may hold ahead (s): after a quiet spell, at most this much runs without paying.
DEFAULT_BURST_S = 0.05


#: The shortest wait `wait_s` reports for a task the budget holds back (an empty bucket refills from 0).
MIN_WAIT_S = 1e-4


class GpuGapsDetached(RuntimeError):
    """The inference thread was detached before it ran a queued task (the node deactivated)."""


class GpuGaps:
    """Tasks from other threads, run by the attached inference thread between steps (module doc).

    Args:
        budget: seconds of task time per second of wall time (0 < budget <= 1).
        burst_s: the most credit (s) the bucket holds.
        clock: monotonic seconds (tests pass their own).
    """

    def __init__(
        self,
        budget: float = DEFAULT_BUDGET,
        burst_s: float = DEFAULT_BURST_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not 0.0 < budget <= 1.0 or burst_s < 0.0:
            raise ValueError(f"GpuGaps: need 0 < budget <= 1 and burst_s >= 0, got {budget}, {burst_s}")
        self.budget, self.burst_s = budget, burst_s
        self._clock = clock
        self._lock = threading.Lock()
        self._queue: deque[tuple[Callable[[], object], Future]] = deque()
        self._wake: Callable[[], None] | None = None  # set while an inference thread is attached
        self._credit = burst_s
        self._stamp = clock()
        self.tasks_run = 0
        self.task_seconds = 0.0
        self.charged_seconds = 0.0

    # ------------------------------------------------------------------ any thread
    def call(self, task: Callable[[], T], timeout_s: float | None = None) -> T:
        """Run ``task`` on the inference thread between live steps and return its result (or raise its
        exception); on the caller's thread while no inference thread is attached.

        Raises:
            GpuGapsDetached: the inference thread was detached before it ran the task.
            TimeoutError: not run within ``timeout_s`` (the task is withdrawn if it has not started).
        """
        future: Future = Future()
        with self._lock:
            wake = self._wake
            if wake is not None:
                self._queue.append((task, future))
        if wake is None:
            return task()
        wake()
        try:
            return future.result(timeout_s)
        except TimeoutError:
            future.cancel()  # a task not yet started is skipped by `run_due`
            raise

    def charge(self, seconds: float) -> None:
        """Pay ``seconds`` of GPU work that a task launched and did not wait for (module doc): taken from the
        bucket as a task's wall time is (the next task waits until it is paid back), counted in
        `charged_seconds`."""
        with self._lock:
            self._refill()
            self._credit -= seconds
            self.charged_seconds += seconds

    def pending(self) -> int:
        """Tasks queued and not yet run."""
        with self._lock:
            return len(self._queue)

    # ------------------------------------------------------------------ the inference thread
    def attach(self, wake: Callable[[], None]) -> None:
        """The inference thread takes the tasks from now on; ``wake()`` tells it that one was queued."""
        with self._lock:
            self._wake = wake
            self._stamp, self._credit = self._clock(), self.burst_s

    def detach(self) -> None:
        """No inference thread any more: the queued tasks fail (`GpuGapsDetached`), later calls run inline."""
        with self._lock:
            self._wake = None
            queued, self._queue = list(self._queue), deque()
        for _, future in queued:
            if future.set_running_or_notify_cancel():
                future.set_exception(GpuGapsDetached("the inference thread stopped before the task ran"))

    def wait_s(self, free: bool = False) -> float | None:
        """How long until a queued task may run (``free``: no live frame to delay, at once): 0 now, None with
        nothing queued."""
        with self._lock:
            if not self._queue:
                return None
            self._refill()
            return 0.0 if free or self._credit > 0.0 else max(-self._credit / self.budget, MIN_WAIT_S)

    def run_due(self, free: bool = False) -> bool:
        """Run the oldest queued task if the budget allows (one per call: a live frame waits behind at most
        one); its wall time is paid from the bucket. ``free``: no live frame is coming (the camera stopped),
        run it whatever the budget and without paying. True when a task ran (its exception goes to its
        caller)."""
        with self._lock:
            self._refill()
            if self._credit <= 0.0 and not free:
                return False
            while self._queue:
                task, future = self._queue.popleft()
                if future.set_running_or_notify_cancel():  # False: withdrawn by a timed-out caller
                    break
            else:
                return False
        start = self._clock()
        try:
            future.set_result(task())
        except BaseException as exc:  # noqa: BLE001 - the caller's to handle, not the inference thread's
            future.set_exception(exc)
        spent = self._clock() - start
        with self._lock:
            if not free:
                self._credit -= spent
            self.tasks_run += 1
            self.task_seconds += spent
        return True

    def _refill(self) -> None:
        now = self._clock()
        self._credit = min(self.burst_s, self._credit + (now - self._stamp) * self.budget)
        self._stamp = now
