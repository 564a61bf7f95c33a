"""`GpuGaps` (engine/gpu_gaps.py, issue 31): tasks of other threads run by the attached inference thread,
one per gap, within a time budget; inline while detached; queued tasks fail when it detaches."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from lingbot_map_ros.engine.gpu_gaps import MIN_WAIT_S, GpuGaps, GpuGapsDetached


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _queue(gaps: GpuGaps, task, results: list) -> threading.Thread:  # noqa: ANN001
    """Call `task` through `gaps` on a thread of its own; its result or exception lands in `results`."""

    def caller() -> None:
        try:
            results.append(gaps.call(task))
        except Exception as exc:  # noqa: BLE001 - the test inspects it
            results.append(exc)

    thread = threading.Thread(target=caller)
    thread.start()
    return thread


def _wait_queued(gaps: GpuGaps, count: int) -> None:
    event = threading.Event()
    while gaps.pending() < count:
        event.wait(0.001)


def test_detached_gaps_run_the_task_on_the_callers_thread() -> None:
    gaps = GpuGaps()
    assert gaps.call(threading.get_ident) == threading.get_ident()
    assert gaps.tasks_run == 0


def test_attached_gaps_run_each_task_on_the_inference_thread_within_the_budget() -> None:
    """A task runs only in `run_due` (the inference thread), one per call; its wall time is paid at `budget`
    seconds per second, so the next waits cost / budget; results and exceptions reach their callers."""
    clock = FakeClock()
    gaps = GpuGaps(budget=0.1, burst_s=0.01, clock=clock)
    woken: list[int] = []
    gaps.attach(lambda: woken.append(1))
    assert gaps.wait_s() is None and not gaps.run_due()

    def slow() -> int:
        clock.now += 0.05  # the task takes 50 ms of the inference thread
        return threading.get_ident()

    def broken() -> int:
        raise ValueError("pass failed")

    results: list = []
    first = _queue(gaps, slow, results)
    _wait_queued(gaps, 1)
    second = _queue(gaps, broken, results)
    _wait_queued(gaps, 2)
    assert len(woken) == 2 and gaps.wait_s() == 0.0
    assert gaps.run_due()  # one task per gap
    first.join(5)
    assert results == [threading.get_ident()] and gaps.pending() == 1
    # 50 ms spent against 10 ms of credit + 5 ms earned meanwhile: 35 ms in debt, repaid at 0.1 s/s in 0.35 s
    assert gaps.wait_s() == pytest.approx(0.35)
    assert not gaps.run_due()
    clock.now += 0.34
    assert not gaps.run_due()
    clock.now += 0.02
    assert gaps.run_due()
    second.join(5)
    assert isinstance(results[1], ValueError) and gaps.tasks_run == 2
    assert gaps.task_seconds == pytest.approx(0.05)


def test_a_free_task_runs_whatever_the_budget_and_is_not_charged() -> None:
    """`run_due(free=True)` (no live frame to delay): the task runs with the bucket empty, which it leaves as
    it was (not 1 s in debt, which would hold the next task back 10 s at this budget)."""
    clock = FakeClock()
    gaps = GpuGaps(budget=0.1, burst_s=0.0, clock=clock)
    gaps.attach(lambda: None)
    results: list = []

    def slow() -> str:
        clock.now += 1.0
        return "ran"

    caller = _queue(gaps, slow, results)
    _wait_queued(gaps, 1)
    assert gaps.wait_s() == pytest.approx(MIN_WAIT_S) and not gaps.run_due()  # the bucket is empty
    assert gaps.wait_s(free=True) == 0.0 and gaps.run_due(free=True)
    caller.join(5)
    assert results == ["ran"] and gaps.task_seconds == pytest.approx(1.0)
    assert gaps.pending() == 0 and gaps.wait_s() is None
    following = _queue(gaps, lambda: "next", results)
    _wait_queued(gaps, 1)
    assert gaps.wait_s() == pytest.approx(MIN_WAIT_S)  # no debt (charged, it would be 10 s)
    assert gaps.run_due(free=True)
    following.join(5)
    assert results == ["ran", "next"]


def test_detach_fails_the_queued_tasks_and_later_calls_run_inline() -> None:
    gaps = GpuGaps()
    gaps.attach(lambda: None)
    results: list = []
    waiting = _queue(gaps, lambda: "never", results)
    _wait_queued(gaps, 1)
    gaps.detach()
    waiting.join(5)
    assert len(results) == 1 and isinstance(results[0], GpuGapsDetached)
    assert gaps.call(lambda: "inline") == "inline" and gaps.pending() == 0


def test_charged_gpu_time_is_paid_from_the_budget() -> None:
    """A task that only launches GPU work (the graphed verification pass) costs the inference thread almost
    nothing; the GPU time its caller charges afterwards holds the next task back as wall time would."""
    clock = FakeClock()
    gaps = GpuGaps(budget=0.1, burst_s=0.01, clock=clock)
    gaps.attach(lambda: None)
    results: list = []
    first = _queue(gaps, lambda: "launched", results)
    _wait_queued(gaps, 1)
    assert gaps.run_due()
    first.join(5)
    assert results == ["launched"] and gaps.task_seconds == 0.0
    gaps.charge(0.03)  # 30 ms of GPU time against 10 ms of credit: 20 ms in debt, repaid in 0.2 s
    assert gaps.charged_seconds == pytest.approx(0.03)
    second = _queue(gaps, lambda: "next", results)
    _wait_queued(gaps, 1)
    assert gaps.wait_s() == pytest.approx(0.2) and not gaps.run_due()
    clock.now += 0.21
    assert gaps.run_due()
    second.join(5)
    assert results == ["launched", "next"]


def test_a_timed_out_call_is_withdrawn() -> None:
    gaps = GpuGaps()
    gaps.attach(lambda: None)
    ran: list[int] = []
    with pytest.raises(TimeoutError):
        gaps.call(lambda: ran.append(1), timeout_s=0.01)
    assert not gaps.run_due() and ran == [] and gaps.pending() == 0


def test_budget_is_checked() -> None:
    with pytest.raises(ValueError, match="budget"):
        GpuGaps(budget=0.0)


def test_a_pair_pass_left_queued_by_a_stopped_inference_thread_is_a_quiet_rejection() -> None:
    """The node deactivates while the closer waits for its verification pass: the pair is not verified
    (a rejection with the reason), no exception reaches the closer's thread."""
    from lingbot_map_ros.engine.geometry import Sim3
    from lingbot_map_ros.engine.loop import PairVerifier
    from lingbot_map_ros.engine.loop.keyframes import Keyframe

    def keyframe(key: int) -> Keyframe:
        empty = np.zeros((0, 3), np.float32)
        return Keyframe(
            key, 0.0, Sim3.identity(), Sim3.identity(), empty, empty.astype(np.uint8), np.ones(4, np.float32),
            np.zeros((14, 14, 3), np.uint8), np.ones((7, 7), np.float32), np.ones((7, 7), np.float32), 2,
        )  # fmt: skip

    def stopped(task):  # noqa: ANN001, ANN202
        raise GpuGapsDetached("the inference thread stopped before the task ran")

    verdict = PairVerifier(model=None, run=stopped)(keyframe(0), keyframe(1))  # type: ignore[arg-type]
    assert not verdict.accepted and verdict.reason == "inference thread stopped"
