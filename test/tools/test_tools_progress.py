"""`wait_until_done`: returns when every frame is handled, or when frames were lost before the node."""

from __future__ import annotations

import time

import pytest

from lingbot_map_ros.tools.live.progress import wait_until_done


class _Monitor:
    """Stands in for MappingMonitor: fixed counters, a pose long ago."""

    def __init__(self, received: int, processed: int, dropped: int = 0, queue: int = 0) -> None:
        self.posed = processed
        self.diagnostics: dict[str, str] = {}
        self.last_pose_time = time.monotonic() - 10.0
        self._counters = {
            "frames_received": received,
            "frames_processed": processed,
            "frames_dropped": dropped,
            "rejected_total": 0,
            "queue_length": queue,
        }

    def counter(self, key: str) -> int:
        return self._counters[key]

    def arrived(self) -> int:
        return self._counters["frames_received"] + self._counters["rejected_total"]

    def idle(self) -> bool:
        c = self._counters
        return c["frames_processed"] + c["frames_dropped"] >= c["frames_received"] and c["queue_length"] == 0

    def done(self, sent: int) -> bool:
        return self.arrived() >= sent and self.idle()


class _Node:
    def alive(self) -> bool:
        return True


def test_returns_at_once_when_every_frame_is_handled() -> None:
    started = time.monotonic()
    wait_until_done(_Monitor(received=30, processed=25, dropped=5), 30, _Node(), deadline=started + 5)
    assert time.monotonic() - started < 1.0


def test_returns_after_lost_after_s_when_frames_never_arrive() -> None:
    started = time.monotonic()
    wait_until_done(_Monitor(received=27, processed=27), 30, _Node(), deadline=started + 30, lost_after_s=0.5)
    assert 0.5 <= time.monotonic() - started < 5.0


def test_busy_node_times_out_instead() -> None:
    with pytest.raises(TimeoutError, match="had not handled all 30 frames"):
        wait_until_done(
            _Monitor(received=27, processed=20, queue=7),
            30,
            _Node(),
            deadline=time.monotonic() + 0.5,
            lost_after_s=0.1,
        )
