"""The map side of one camera's outputs, on its own thread, so that pose outputs never wait for map work.

`MappingOutputs.publish` (the camera pipeline's pose stage, after `CameraTracker.track`) sends TF, odometry,
camera_pose, camera_info and depth at once and hands the frame's `MapWork` to `MapWorker.submit`, which never
blocks: a bounded queue (`queue_size`, at least the anchor phase's frames) that drops its oldest work when
full, counted (`map_worker.dropped` in /diagnostics). The worker thread takes the works in order, integrates
each through the camera's `MapSide` (engine/mapping/map_side.py: the map's one owner and its lock) and
publishes the
frame's `~/frame_cloud` under that lock. The map and grid timers (`publish_map`, `publish_grid`) take the
map and grid from it when they changed; `~/save_map`, `~/save_session`, `~/reset`, `~/load_session` and the
lifecycle transitions read or change the map after `drain` (the queued works integrated: save, deactivate)
or `discard` (dropped: reset, load). The pose stage only ever takes the pose lock, so it never waits for
an integration in progress (lock order: engine/lock_order.py).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from builtin_interfaces.msg import Time
from rclpy.publisher import Publisher
from std_msgs.msg import Header

from ...engine.face import FrameCloud, LaneWorker, MapSide, MapWork
from ..messages.conversions import points_to_cloud
from ..messages.poses import grid_msg

#: Integration times (ms) kept for /diagnostics (`map_worker.ms_mean`, `map_worker.ms_max`) and benchmarks.
RECENT_TIMES = 200


@dataclass(frozen=True)
class MapItem:
    """One frame's map work: the `MapWork`, the header of its `~/frame_cloud` (image stamp, map frame) and
    whether to publish that cloud."""

    work: MapWork
    header: Header
    frame_cloud: bool


class MapWorker:
    """One camera's map thread (module doc).

    Args:
        side: the camera's `MapSide` (the map and its lock).
        publishers: `frame_cloud`, `map_cloud` and `grid` publishers.
        queue_size: works waiting for the thread; a full queue drops its oldest.
        on_error: `(exception)` of a work that failed (counted by the caller); the thread carries on.
        name: the thread's name.
    """

    def __init__(
        self,
        side: MapSide,
        publishers: dict[str, Publisher],
        queue_size: int,
        on_error: Callable[[Exception], None],
        name: str = "lingbot_map_map",
    ) -> None:
        self.side = side
        self._pubs = publishers
        self._times: deque[tuple[bool, float]] = deque(maxlen=RECENT_TIMES)  # (keyframe, ms)
        self._worker = LaneWorker(self._process, queue_size, lambda item, exc: on_error(exc), name=name)

    def submit(self, item: MapItem) -> bool:
        """Queue one frame's map work, never blocking; False when the oldest queued work was dropped."""
        return self._worker.submit(item)

    def _process(self, item: MapItem) -> None:
        start = time.perf_counter()
        # the frame cloud goes out under the map's lock: once a reset holds it, nothing of the old stream does
        self.side.integrate(item.work, partial(self._send_cloud, item.header) if item.frame_cloud else None)
        self._times.append((item.work.is_keyframe, 1e3 * (time.perf_counter() - start)))

    def _send_cloud(self, header: Header, cloud: FrameCloud) -> None:
        self._pubs["frame_cloud"].publish(points_to_cloud(cloud.points, cloud.colors, header))

    def drain(self, timeout: float) -> bool:
        """Wait until every queued work is integrated; False on timeout (then the map lacks the rest)."""
        return self._worker.wait_idle(timeout)

    def discard(self) -> int:
        """Drop the queued works (a reset or a loaded session replaces the map); returns how many."""
        return self._worker.clear()

    def publish_map(self, stamp: Time, frame_id: str, force: bool = False) -> int:
        """Publish `~/map_cloud` if the map changed since the last call (or `force`); returns its size."""
        points = self.side.take_points(force)
        if points is None:
            return -1
        xyz, rgb = points
        self._pubs["map_cloud"].publish(points_to_cloud(xyz, rgb, Header(stamp=stamp, frame_id=frame_id)))
        return len(xyz)

    def publish_grid(self, stamp: Time, frame_id: str, force: bool = False) -> bool:
        """Publish `~/grid` if it changed since the last call (or `force`)."""
        grid = self.side.take_grid(force)
        if grid is None:
            return False
        self._pubs["grid"].publish(grid_msg(grid, Header(stamp=stamp, frame_id=frame_id)))
        return True

    def recent_ms(self, keyframes: bool | None = None) -> list[float]:
        """Times (ms) of the last `RECENT_TIMES` works (integration + frame cloud), of keyframes only (True),
        other frames only (False) or all (None)."""
        return [ms for key, ms in list(self._times) if keyframes is None or key == keyframes]

    def stats(self) -> dict[str, object]:
        """For /diagnostics: `map_worker.` submitted, processed, dropped (oldest works dropped from a full
        queue: their keyframes are missing from the map), failed, queued, max_queued, ms_mean, ms_max."""
        s = self._worker.stats()
        times = self.recent_ms()
        return {
            "map_worker.submitted": s.submitted,
            "map_worker.processed": s.processed,
            "map_worker.dropped": s.dropped,
            "map_worker.failed": s.failed,
            "map_worker.queued": s.queued,
            "map_worker.max_queued": s.max_queued,
            "map_worker.ms_mean": round(sum(times) / len(times), 3) if times else 0.0,
            "map_worker.ms_max": round(max(times), 3) if times else 0.0,
        }

    def stop(self, timeout: float = 5.0) -> bool:
        """Drop the queued works, let the one in progress finish and end the thread (cleanup)."""
        return self._worker.stop(timeout)
