"""Peak resident memory of another process (a node under attack): the one sampler of the tests and of
benchmarks/session_attacks.py. psutil only, no DDS, so a benchmark imports it (with test/ on sys.path)."""

from __future__ import annotations

import threading
import time

import psutil


class PeakRss:
    """Peak resident memory of a process: psutil samples every `period_s` and the kernel's VmHWM."""

    def __init__(self, pid: int, period_s: float = 0.005) -> None:
        self._proc = psutil.Process(pid)
        self._period_s = period_s
        self.peak_sampled = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.peak_sampled = max(self.peak_sampled, self._proc.memory_info().rss)
            except psutil.Error:
                return
            time.sleep(self._period_s)

    def rss(self) -> int:
        return self._proc.memory_info().rss

    def high_water_mark(self) -> int:
        """The kernel's peak RSS of the process since it started (VmHWM, bytes)."""
        with open(f"/proc/{self._proc.pid}/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
        raise AssertionError("no VmHWM in /proc/<pid>/status")
