"""The `map -> odom` republish thread (ros/timers.py `MapOdomThread`, issue 29): it runs the republish on its
own schedule, off the executor, and ends on `stop` or once the context is shutting down."""

from __future__ import annotations

import threading
import time

from lingbot_map_ros.ros.timers import MapOdomThread


def wait_until(predicate: object, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.01)


def test_republishes_on_its_own_thread_until_stopped() -> None:
    runs: list[str] = []
    thread = MapOdomThread(lambda: runs.append(threading.current_thread().name), lambda: True, period_s=0.01)
    wait_until(lambda: len(runs) >= 5)
    thread.stop()
    assert not thread._thread.is_alive()  # stopped: no run after stop returned
    assert set(runs) == {"lingbot_map_odom_tf"}  # never the caller's (the executor's) thread


def test_ends_once_the_context_is_shutting_down() -> None:
    ok = threading.Event()
    ok.set()
    runs: list[int] = []
    thread = MapOdomThread(lambda: runs.append(1), ok.is_set, period_s=0.01)
    wait_until(lambda: len(runs) >= 2)
    ok.clear()
    wait_until(lambda: not thread._thread.is_alive())
