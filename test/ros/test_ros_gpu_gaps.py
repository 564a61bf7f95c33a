"""Issue 31: the inference thread (`StreamScheduler`) runs other threads' GPU tasks (`GpuGaps`: the loop
closer's verification passes) between its steps: never during one, at most one per gap, also when no frame
comes (it wakes up for them); `stop` detaches the gaps (later calls run on the caller's thread)."""

from __future__ import annotations

import threading
import time

from lingbot_map_ros.engine.gpu_gaps import GpuGaps
from lingbot_map_ros.ros.cameras.scheduler import StreamScheduler


def _wait(condition, timeout: float = 10.0) -> None:  # noqa: ANN001
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


def test_gap_tasks_run_between_steps_one_per_gap_and_when_no_frame_comes() -> None:
    release = threading.Event()
    events: list[object] = []
    in_step = threading.Event()

    def step(batch: list[tuple[str, int]]) -> list[Exception | None]:
        in_step.set()
        release.wait(5)
        events.extend(item for _, item in batch)
        in_step.clear()
        return [None] * len(batch)

    gaps = GpuGaps(budget=1.0, burst_s=1.0)
    scheduler = StreamScheduler([""], step, 4, lambda *_: None, gaps=gaps)
    threads: list[threading.Thread] = []

    def task(name: str) -> str:
        assert not in_step.is_set()  # never beside a step
        events.append(name)
        return threading.current_thread().name

    results: list[str] = []

    def call(name: str) -> None:
        thread = threading.Thread(target=lambda: results.append(gaps.call(lambda: task(name))))
        thread.start()
        threads.append(thread)

    try:
        scheduler.submit("", 0)  # taken at once; its step waits on `release`
        _wait(lambda: scheduler.stats("").in_flight == 1)
        scheduler.submit("", 1)
        scheduler.submit("", 2)
        call("a")
        _wait(lambda: gaps.pending() == 1)
        call("b")
        _wait(lambda: gaps.pending() == 2)
        release.set()
        _wait(lambda: "b" in events)
        assert events == [0, "a", 1, "b", 2]  # one task per gap, frames keep coming
        call("c")  # no frame queued: the thread wakes up for the task
        _wait(lambda: "c" in events)
        for thread in threads:
            thread.join(5)
        assert results == ["lingbot_map_inference"] * 3
    finally:
        assert scheduler.stop(5)
    assert gaps.call(lambda: threading.current_thread().name) == threading.current_thread().name


def test_with_no_frame_coming_the_tasks_run_back_to_back_free_of_the_budget() -> None:
    """A budget that would allow one task a day: with no frame for `GAPS_FREE_AFTER_S` (the camera stopped)
    the queued tasks still all run, one after another, and the bucket is not charged for them."""
    gaps = GpuGaps(budget=1e-6, burst_s=0.0)
    scheduler = StreamScheduler([""], lambda batch: [None] * len(batch), 2, lambda *_: None, gaps=gaps)
    done: list[int] = []
    try:
        callers = [threading.Thread(target=lambda i=i: done.append(gaps.call(lambda: i))) for i in range(3)]
        for caller in callers:
            caller.start()
        for caller in callers:
            caller.join(10)
        assert sorted(done) == [0, 1, 2] and gaps.tasks_run == 3
        assert gaps.wait_s() is None and gaps.task_seconds >= 0.0
    finally:
        assert scheduler.stop(5)
