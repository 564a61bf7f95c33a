"""Per-stage wall-clock timing of session steps over a bounded window of recent steps."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager


class StageTimer:
    """Collect stage durations (ms) of the current step; keep the last ``window`` steps per stage.

    A step's model stage includes the device → host copy of the outputs, which synchronises the GPU, so the
    numbers are real compute times, not launch times.
    """

    def __init__(self, window: int = 100) -> None:
        self._window = window
        self._current: dict[str, float] = {}
        self._last: dict[str, float] = {}
        self._history: dict[str, deque[float]] = {}

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self._current[name] = self._current.get(name, 0.0) + 1e3 * (time.perf_counter() - start)

    def add(self, name: str, ms: float) -> None:
        """Add ``ms`` measured elsewhere (a batched step shared by several sessions) to stage ``name``."""
        self._current[name] = self._current.get(name, 0.0) + ms

    def end_step(self) -> None:
        """Close the current step: its stages (and their sum as ``total``) enter the history."""
        self._current["total"] = sum(self._current.values())
        for name, ms in self._current.items():
            self._history.setdefault(name, deque(maxlen=self._window)).append(ms)
        self._last, self._current = self._current, {}

    def last(self) -> dict[str, float]:
        """Stage durations (ms) of the last completed step."""
        return dict(self._last)

    def summary(self) -> dict[str, dict[str, float]]:
        """Per stage: ``last``, ``mean`` and ``max`` over the recent window (ms), and ``count`` of steps."""
        return {
            name: {
                "last": values[-1],
                "mean": sum(values) / len(values),
                "max": max(values),
                "count": float(len(values)),
            }
            for name, values in self._history.items()
        }
