"""Which frames belong to the current stream: confirmed stream changes, alternating cameras, frame id checks.

A valid frame of another size or another `header.frame_id` restarts the stream (a new map frame: the map and
path are cleared). One odd frame must not do that (issue 16: a single 14x14 frame wiped a 128,552-point map),
so `StreamGuard` switches to a new (size, frame_id) only after `stream.change_confirm_frames` consecutive
frames of it; until then each odd frame is rejected (`rejected_unconfirmed_stream_change`). Two cameras
alternating on one topic never confirm either way: the guard keeps the current one and reports the conflict,
naming both ids, which the node raises to an ERROR on /diagnostics.

`frame_id_problem` checks a TF child frame id (no leading '/', no whitespace, not a frame the node or the
robot's tree already uses as a parent: `reserved_frames`). `CameraFrames` gives each frame id to one camera
(two cameras with one frame id, e.g. two empty ones that both default to `DEFAULT_CAMERA_FRAME`, would give
it two parents in TF): the second camera's frames are refused.
"""

from __future__ import annotations

import threading
from collections import Counter, deque
from collections.abc import Collection, Iterable
from dataclasses import dataclass

#: The camera frame when neither `camera_frame` nor the image header's frame_id names one.
DEFAULT_CAMERA_FRAME = "camera_optical_frame"

#: Frames looked back on to decide that two streams alternate on one topic.
CONFLICT_WINDOW = 30
#: Frames of another stream within `CONFLICT_WINDOW` (interleaved with the current one) that make a conflict.
CONFLICT_MIN_FRAMES = 4


@dataclass(frozen=True)
class StreamKey:
    """What identifies a stream: the decoded image size and the camera (header frame_id)."""

    height: int
    width: int
    frame_id: str

    def describe(self) -> str:
        return f"'{self.frame_id}' {self.width}x{self.height}"


@dataclass(frozen=True)
class Verdict:
    """What `StreamGuard.check` decided for one frame.

    Attributes:
        accept: the frame belongs to the (possibly new) current stream.
        reason: why it was rejected (empty when accepted).
        switched_from: the previous stream when this frame confirmed a change, else None.
    """

    accept: bool
    reason: str = ""
    switched_from: StreamKey | None = None


class StreamGuard:
    """Decide for each incoming frame whether it belongs to the current stream (thread-safe).

    Args:
        confirm_frames: consecutive frames of a new (size, frame_id) needed to switch to it (1 = at once).
    """

    def __init__(self, confirm_frames: int = 3) -> None:
        self.confirm_frames = confirm_frames
        self._lock = threading.Lock()
        self._current: StreamKey | None = None
        self._candidate: StreamKey | None = None
        self._candidate_run = 0
        self._recent: deque[StreamKey] = deque(maxlen=CONFLICT_WINDOW)

    @property
    def current(self) -> StreamKey | None:
        with self._lock:
            return self._current

    def forget(self) -> None:
        """Start over (cleanup): the next frame defines the stream."""
        with self._lock:
            self._current = self._candidate = None
            self._candidate_run = 0
            self._recent.clear()

    def check(self, key: StreamKey) -> Verdict:
        """Accept `key`'s frame, switch to it after `confirm_frames` consecutive frames, or reject it."""
        with self._lock:
            self._recent.append(key)
            if self._current is None or key == self._current:
                self._current = self._current or key
                self._candidate, self._candidate_run = None, 0
                return Verdict(True)
            if key == self._candidate:
                self._candidate_run += 1
            else:
                self._candidate, self._candidate_run = key, 1
            if self._candidate_run >= self.confirm_frames:
                previous, self._current = self._current, key
                self._candidate, self._candidate_run = None, 0
                return Verdict(True, switched_from=previous)
            return Verdict(
                False,
                f"frame of {key.describe()} while streaming {self._current.describe()}: "
                f"{self._candidate_run} of {self.confirm_frames} consecutive frames needed to restart the "
                "stream (stream.change_confirm_frames)",
            )

    def conflict(self) -> str | None:
        """A message naming the streams that alternate on the topic (None when there is no conflict):
        within the last `CONFLICT_WINDOW` frames, another stream sent >= `CONFLICT_MIN_FRAMES` frames
        interleaved with the current one."""
        with self._lock:
            recent, current = list(self._recent), self._current
        if current is None:
            return None
        others = Counter(key for key in recent if key != current)
        alternating = [
            key
            for key, n in others.items()
            if n >= CONFLICT_MIN_FRAMES and _interleaved(recent, key, current)
        ]
        if not alternating:
            return None
        names = ", ".join(key.describe() for key in sorted(alternating, key=lambda k: k.frame_id))
        return (
            f"frames of two streams alternate on one topic: {current.describe()} (mapped) and {names} "
            "(rejected); give each camera its own topic and node"
        )


def _interleaved(recent: list[StreamKey], other: StreamKey, current: StreamKey) -> bool:
    """True when `other` and `current` alternate (more than two runs between them) in `recent`."""
    runs, last = 0, None
    for key in recent:
        if key in (other, current) and key != last:
            runs += 1
            last = key
    return runs > 2


def reserved_frames(
    map_frame: str, odom_frame: str, base_frame: str, cameras: Iterable[str]
) -> frozenset[str]:
    """Frame ids no camera may have: `map_frame`, `odom_frame`, `base_frame` and the per-camera map frames
    `<map_frame>_<name>` (the parents the node publishes, and the robot's own frames above the camera)."""
    names = {map_frame, odom_frame, base_frame, *(f"{map_frame}_{name}" for name in cameras if name)}
    return frozenset(name for name in names if name)


class CameraFrames:
    """Which camera owns which frame id (first come, first served; thread-safe): one frame, one camera."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._owner: dict[str, str] = {}  # frame id -> camera name

    def claim(self, camera: str, frame_id: str) -> str | None:
        """Why `camera` may not have `frame_id` (another camera has it), or None (then it is `camera`'s and
        the camera's earlier frame id is free again)."""
        with self._lock:
            owner = self._owner.get(frame_id)
            if owner is not None and owner != camera:
                return (
                    f"frame_id '{frame_id}' is camera '{owner or '(unnamed)'}''s: two cameras with one "
                    "frame id would give it two parents in TF (set each camera's frame_id)"
                )
            if owner is None:
                self._owner = {f: c for f, c in self._owner.items() if c != camera}
                self._owner[frame_id] = camera
            return None


def frame_id_problem(frame_id: str, reserved: Collection[str]) -> str | None:
    """Why `frame_id` cannot be a TF child frame (None when it can; empty is allowed: a default is used).

    Args:
        frame_id: the candidate (an image header's frame_id or the `camera_frame` parameter).
        reserved: frame ids the node publishes as parents and the robot's (`reserved_frames`).
    """
    if not frame_id:
        return None
    if frame_id.startswith("/"):
        return f"frame_id '{frame_id}' starts with '/' (tf2 frame ids have no leading slash)"
    if any(ch.isspace() for ch in frame_id):
        return f"frame_id {frame_id!r} contains whitespace"
    if frame_id in reserved:
        return (
            f"frame_id '{frame_id}' is the node's own frame or a robot frame (one of {sorted(reserved)}): "
            "TF would link it to itself or give it two parents"
        )
    return None
