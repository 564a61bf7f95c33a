"""The one order in which the node's locks are taken (outermost first), and `OrderedLock`, which checks it.

A thread holding a lock may only take locks of the same or a later rank in `LOCK_ORDER` (the same rank: the
cameras' session locks, taken in camera order by ros/cameras/step.py). Every thread keeps the stack of
`OrderedLock`s it holds (a thread-local list; about a microsecond an acquire); an acquisition out of order
is appended to `violations` and, with `STRICT` (the tests), raises `LockOrderError` before it can deadlock.

| lock | guards | where |
|---|---|---|
| `node.stream_change` | resets and session loads | ros/node.py |
| `camera.session_lock` | a camera's step, reset, window change | ros/cameras/stream.py |
| `cameras.step_lock` | a round of the set of cameras | engine/stream/multi_stream.py |
| `camera.publish_lock` | a camera's publishing of one step | ros/cameras/stream.py |
| `loop.apply_lock` | one loop-closure correction at a time | ros/outputs/loop.py |
| `path.send_lock` | `~/path` being sent | ros/outputs/path.py |
| `map.lock` | the map side (voxels, grid) | ros/outputs/map_worker.py |
| `pose.lock` | the pose side (mapper chain, scale, trajectory; the path) | engine/tracker.py |
| `loop.worker_lock` | the loop closer's keyframe map and graph | engine/loop/closer.py |
| `tracker.estimate_lock` | the `map -> odom` estimate | engine/tracker.py |

`StreamingSession`'s own lock (engine/stream/session.py) is a plain leaf lock, outside the check: its methods
take no
other lock, so it may be taken under any of these (a round under `cameras.step_lock`, a session restored under
`map.lock`).
"""

from __future__ import annotations

import threading
from types import TracebackType

LOCK_ORDER: tuple[str, ...] = (
    "node.stream_change",
    "camera.session_lock",
    "cameras.step_lock",
    "camera.publish_lock",
    "loop.apply_lock",
    "path.send_lock",
    "map.lock",
    "pose.lock",
    "loop.worker_lock",
    "tracker.estimate_lock",
)
_RANK = {name: rank for rank, name in enumerate(LOCK_ORDER)}
#: Raise `LockOrderError` on an acquisition out of order (tests); otherwise only record it in `violations`.
STRICT = False
#: Acquisitions out of order so far: "took <lock> while holding <lock>".
violations: list[str] = []
_held = threading.local()


class LockOrderError(RuntimeError):
    """A lock taken against `LOCK_ORDER` (a possible deadlock)."""


class OrderedLock:
    """A `threading.Lock` with a place in `LOCK_ORDER` (module doc). `name` must be one of its entries."""

    __slots__ = ("_lock", "name", "rank")

    def __init__(self, name: str) -> None:
        self.name = name
        self.rank = _RANK[name]
        self._lock = threading.Lock()

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        stack: list[OrderedLock] = _stack()
        later = [held for held in stack if held.rank > self.rank]
        if later:
            message = f"took {self.name} while holding {later[-1].name} (docs: engine/lock_order.py)"
            violations.append(message)
            if STRICT:
                raise LockOrderError(message)
        acquired = self._lock.acquire(blocking, timeout)
        if acquired:
            stack.append(self)
        return acquired

    def release(self) -> None:
        stack = _stack()
        for i in range(len(stack) - 1, -1, -1):  # usually the last one
            if stack[i] is self:
                del stack[i]
                break
        self._lock.release()

    def locked(self) -> bool:
        return self._lock.locked()

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.release()


def _stack() -> list[OrderedLock]:
    stack = getattr(_held, "stack", None)
    if stack is None:
        stack = _held.stack = []
    return stack
