"""The map side of one camera's outputs, on its own thread, so that pose outputs never wait for map work.

`MappingOutputs.publish` (the publish thread) locates a frame (`Mapper.locate`), sends TF, odometry,
camera_pose, camera_info and depth at once and hands the frame's `MapWork` to `MapWorker.submit`, which never
blocks: a bounded queue (`queue_size`, at least the anchor phase's frames) that drops its oldest work when
full, counted (`map_worker.dropped` in /diagnostics). The worker thread takes the works in order, integrates
each (`Mapper.integrate`: the frame's points, voxel map, occupancy grid, held keyframes) under `lock` and
publishes the frame's `~/frame_cloud`. The map and grid timers (`publish_map`, `publish_grid`), `~/save_map`,
`~/save_session`, `~/reset`, `~/load_session` and the lifecycle transitions read or change the map under
`lock`, after `drain` (the queued works integrated: save, deactivate) or `discard` (dropped: reset, load).
Lock order where both are needed: `lock` first, then the outputs' pose lock (the publish thread only ever
takes the pose lock, so it never waits for an integration in progress).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from builtin_interfaces.msg import Time
from rclpy.publisher import Publisher
from std_msgs.msg import Header

from ..engine.lock_order import OrderedLock
from ..engine.mapper import Mapper, MapWork
from .conversions import points_to_cloud
from .geometry import grid_msg
from .worker import InferenceWorker

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
        mapper: the camera's `Mapper` (its map side is only touched under `lock`).
        publishers: `frame_cloud`, `map_cloud` and `grid` publishers.
        queue_size: works waiting for the thread; a full queue drops its oldest.
        on_error: `(exception)` of a work that failed (counted by the caller); the thread carries on.
        name: the thread's name.
    """

    def __init__(
        self,
        mapper: Mapper,
        publishers: dict[str, Publisher],
        queue_size: int,
        on_error: Callable[[Exception], None],
        name: str = "lingbot_map_map",
    ) -> None:
        self.lock = OrderedLock("map.lock")
        self._mapper = mapper
        self._pubs = publishers
        self._map_dirty = self._grid_dirty = False
        self._serial: int | None = None  # serial of the last work integrated (another = a new epoch)
        self._times: deque[tuple[bool, float]] = deque(maxlen=RECENT_TIMES)  # (keyframe, ms)
        self._worker = InferenceWorker(self._process, queue_size, lambda item, exc: on_error(exc), name=name)

    def submit(self, item: MapItem) -> bool:
        """Queue one frame's map work, never blocking; False when the oldest queued work was dropped."""
        return self._worker.submit(item)

    def _process(self, item: MapItem) -> None:
        start = time.perf_counter()
        with self.lock:  # the cloud too: once a reset holds the lock, nothing of the old stream goes out
            cloud = self._mapper.integrate(item.work)
            new_epoch = item.work.serial != self._serial
            self._serial = item.work.serial
            if cloud.map_changed or new_epoch:
                self._map_dirty = self._grid_dirty = True
            if item.frame_cloud:
                self._pubs["frame_cloud"].publish(points_to_cloud(cloud.points, cloud.colors, item.header))
        self._times.append((item.work.is_keyframe, 1e3 * (time.perf_counter() - start)))

    def drain(self, timeout: float) -> bool:
        """Wait until every queued work is integrated; False on timeout (then the map lacks the rest)."""
        return self._worker.wait_idle(timeout)

    def discard(self) -> int:
        """Drop the queued works (a reset or a loaded session replaces the map); returns how many."""
        return self._worker.clear()

    def mark_changed(self) -> None:
        """The map was cleared or replaced (call under `lock`): the timers publish it again."""
        self._map_dirty = self._grid_dirty = True

    def publish_map(self, stamp: Time, frame_id: str, force: bool = False) -> int:
        """Publish `~/map_cloud` if the map changed since the last call (or `force`); returns its size."""
        with self.lock:
            if not (self._map_dirty or force):
                return -1
            xyz, rgb = self._mapper.voxels.points()
            self._map_dirty = False
        self._pubs["map_cloud"].publish(points_to_cloud(xyz, rgb, Header(stamp=stamp, frame_id=frame_id)))
        return len(xyz)

    def publish_grid(self, stamp: Time, frame_id: str, force: bool = False) -> bool:
        """Publish `~/grid` if it changed since the last call (or `force`)."""
        with self.lock:
            if not (self._grid_dirty or force):
                return False
            grid = self._mapper.grid.grid()
            self._grid_dirty = False
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
