"""Runtime statistics of the node and their /diagnostics (diagnostic_msgs/DiagnosticArray) form.

One `DiagnosticStatus` named `<node name>: mapping` carries throughput (FPS over a sliding window), latency
(image receipt -> results published), queue drops, rejected frames by cause, failed inferences and the
session's cache statistics (including the live `sliding_window`).
"""

from __future__ import annotations

import math
import threading
import time
from collections import Counter, deque
from collections.abc import Mapping, Sequence

import numpy as np
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from rclpy.impl.rcutils_logger import RcutilsLogger
from sensor_msgs.msg import CameraInfo
from std_msgs.msg import Header

from ...engine.face import WorkerStats


class RuntimeStats:
    """Thread-safe counters updated by the callback and worker threads.

    Args:
        window_s: FPS and latency are averaged over outputs of the last `window_s` seconds.
    """

    def __init__(self, window_s: float = 5.0) -> None:
        self._lock = threading.Lock()
        self._window_s = window_s
        self._outputs: deque[tuple[float, float]] = deque()  # (wall time, latency s) per published frame
        self._rejected: Counter[str] = Counter()
        self._failed: Counter[str] = Counter()
        self.frames_published = 0
        self.resets = 0
        self.frames_ignored_inactive = 0
        self.notes: dict[str, str] = {}  # why a feature is off, e.g. `loop_closure_off` (gtsam missing)

    def record_output(self, latency_s: float) -> None:
        """One frame's results were published `latency_s` after its image arrived."""
        now = time.monotonic()
        with self._lock:
            self._outputs.append((now, latency_s))
            self.frames_published += 1
            self._trim(now)

    def record_rejected(self, cause: str) -> int:
        """Count an input frame rejected before inference; returns the count for that cause."""
        with self._lock:
            self._rejected[cause] += 1
            return self._rejected[cause]

    def record_failed(self, cause: str) -> int:
        """Count a failed inference; returns the count for that cause."""
        with self._lock:
            self._failed[cause] += 1
            return self._failed[cause]

    def record_reset(self) -> None:
        with self._lock:
            self.resets += 1

    def record_ignored_inactive(self) -> None:
        """A frame arrived while the node was not active (or while it deactivated): skipped, not an error."""
        with self._lock:
            self.frames_ignored_inactive += 1

    def snapshot(self) -> dict[str, float | int | str]:
        """Flat key -> value: fps, latency_ms_mean/p99/max, frames_published, rejected_<cause>,
        failed_<cause>, and the `notes` (why a feature is off)."""
        now = time.monotonic()
        with self._lock:
            self._trim(now)
            latencies = [lat for _, lat in self._outputs]
            span = (now - self._outputs[0][0]) if len(self._outputs) > 1 else 0.0
            fps = (len(self._outputs) - 1) / span if span > 0 else 0.0
            out: dict[str, float | int | str] = {
                "fps": round(fps, 3),
                "latency_ms_mean": round(1e3 * sum(latencies) / len(latencies), 2) if latencies else 0.0,
                "latency_ms_p99": round(1e3 * p99(latencies), 2) if latencies else 0.0,
                "latency_ms_max": round(1e3 * max(latencies), 2) if latencies else 0.0,
                "frames_published": self.frames_published,
                "resets": self.resets,
                "frames_ignored_inactive": self.frames_ignored_inactive,
                "rejected_total": sum(self._rejected.values()),
                "failed_total": sum(self._failed.values()),
            }
            out.update({f"rejected_{cause}": n for cause, n in sorted(self._rejected.items())})
            out.update({f"failed_{cause}": n for cause, n in sorted(self._failed.items())})
            out.update(self.notes)
        return out

    def _trim(self, now: float) -> None:
        while self._outputs and now - self._outputs[0][0] > self._window_s:
            self._outputs.popleft()


def p99(values: list[float]) -> float:
    """The 99th percentile of `values` (nearest rank: the smallest value >= 99 % of them; not empty)."""
    ordered = sorted(values)
    return ordered[math.ceil(0.99 * len(ordered)) - 1]


class CauseThrottle:
    """Log each cause (rejection or failure kind) once, then at most every `period_s` seconds."""

    def __init__(self, period_s: float = 10.0) -> None:
        self._period_s = period_s
        self._last: dict[str, float] = {}
        self._lock = threading.Lock()

    def should_log(self, cause: str) -> bool:
        now = time.monotonic()
        with self._lock:
            last = self._last.get(cause)
            if last is not None and now - last < self._period_s:
                return False
            self._last[cause] = now
            return True


class CauseLog:
    """Count rejected frames and failed steps by cause in `stats` and log each cause through a `CauseThrottle`
    (once, then at most every 10 s), so a bad stream cannot flood the log. Used by every stage's thread."""

    def __init__(self, stats: RuntimeStats, logger: RcutilsLogger) -> None:
        self.stats = stats
        self._logger = logger
        self._throttle = CauseThrottle()

    def rejected(self, cause: str, reason: str) -> None:
        """An input frame the node cannot use (`rejected_<cause>`), skipped."""
        count = self.stats.record_rejected(cause)
        if self._throttle.should_log(cause):
            self._logger.warning(f"frame rejected ({cause}, {count} so far): {reason}")

    def inference_failed(self, exc: Exception, restarted: bool) -> None:
        """A failed session step (`failed_<ExceptionType>`); `restarted`: the engine started a new stream."""
        cause = type(exc).__name__
        count = self.stats.record_failed(cause)
        if self._throttle.should_log(f"failed:{cause}"):
            recovery = (
                "the stream restarts with a new anchor phase"
                if restarted
                else "caches reset, the next frame re-anchors on the kept keyframes, map kept"
            )
            self._logger.error(
                f"inference failed ({cause}, {count} so far), frame skipped, {recovery}: {exc}"
            )

    def publish_failed(self, exc: Exception) -> None:
        """A step whose outputs could not be published (`failed_publish_<ExceptionType>`), skipped."""
        cause = f"publish_{type(exc).__name__}"
        count = self.stats.record_failed(cause)
        if self._throttle.should_log(cause):
            self._logger.error(f"publishing failed ({cause}, {count} so far), step skipped: {exc}")

    def callback_failed(self, where: str, exc: Exception) -> None:
        """A callback (timer, service, parameter) raised; counted as `failed_<where>_<ExceptionType>` and
        logged, never re-raised (an exception escaping a callback would end the executor's spin)."""
        cause = f"{where}_{type(exc).__name__}"
        count = self.stats.record_failed(cause)
        if self._throttle.should_log(cause):
            self._logger.error(f"{where} failed ({cause}, {count} so far): {type(exc).__name__}: {exc}")


class SimClockWatch:
    """Notice when ROS time does not run under `use_sim_time` (no /clock) or runs backwards; warn once each.

    Timers of the node run on the steady clock, so /diagnostics and ~/map_cloud keep coming either way; this
    only tells the user why stamps are zero or jump.

    Args:
        logger: the node's logger.
        grace_s: how long ROS time may stay at zero under `use_sim_time` before the warning.
    """

    def __init__(self, logger: RcutilsLogger, grace_s: float = 3.0) -> None:
        self._logger = logger
        self._grace_s = grace_s
        self._started = time.monotonic()
        self._last_ns = 0
        self._warned_no_clock = False
        self._throttle = CauseThrottle()

    def check(self, use_sim_time: bool, ros_now_ns: int) -> str:
        """Call periodically; returns the clock state for /diagnostics (`clock`)."""
        if not use_sim_time:
            self._last_ns = ros_now_ns
            return "system"
        if ros_now_ns == 0:
            waited = time.monotonic() - self._started
            if waited > self._grace_s and not self._warned_no_clock:
                self._warned_no_clock = True
                self._logger.warning(
                    f"use_sim_time is true but no /clock message arrived in {waited:.0f} s: ROS time is 0; "
                    "outputs keep the input stamps, /diagnostics and ~/map_cloud run on a wall-clock timer"
                )
            return "sim, no /clock"
        state = "sim"
        if ros_now_ns < self._last_ns:
            state = "sim, ran backwards"
            if self._throttle.should_log("backwards"):
                self._logger.warning(
                    f"ROS time (/clock) jumped back by {(self._last_ns - ros_now_ns) / 1e9:.3f} s "
                    "(a bag replayed again?); timers keep running on the wall clock"
                )
        self._last_ns = ros_now_ns
        return state


def intrinsics_report(info: CameraInfo, predicted: np.ndarray, image_hw: tuple[int, int]) -> dict[str, float]:
    """Predicted focal lengths against an input CameraInfo (empty unless it describes the same image size).

    Args:
        info: the camera's CameraInfo (K in pixels of `info.width` x `info.height`).
        predicted: `[3, 3]` predicted intrinsics in pixels of the input image of size `image_hw` (H, W).
    """
    if (info.height, info.width) != tuple(image_hw) or info.k[0] <= 0 or info.k[4] <= 0:
        return {}
    return {
        "intrinsics.fx_input": float(info.k[0]),
        "intrinsics.fy_input": float(info.k[4]),
        "intrinsics.fx_predicted": round(float(predicted[0, 0]), 3),
        "intrinsics.fy_predicted": round(float(predicted[1, 1]), 3),
        "intrinsics.fx_rel_error": round(float(predicted[0, 0]) / info.k[0] - 1.0, 4),
    }


def diagnostic_array(
    name: str,
    hardware_id: str,
    stamp: object,
    runtime: Mapping[str, object],
    worker: WorkerStats | None,
    session: Mapping[str, object],
    state: str,
    errors: Sequence[str] = (),
    warnings: Sequence[str] = (),
) -> DiagnosticArray:
    """Build the /diagnostics message.

    Level: OK, or WARN once frames were dropped, rejected or failed inference, or TF samples were rejected
    (`tf.rejected_total`; the message gives the counts; the node keeps mapping in every case). Keys: every
    `runtime` entry, the worker counters, `state` (lifecycle state) and the session statistics flattened under
    `session.` (e.g. `session.sliding_window`, `session.cache.kv_cache.sliding_window`). Any of `errors` (e.g.
    two cameras alternating on the image topic) makes the level ERROR and leads the message; any of `warnings`
    (a TF gap, a refused TF edge) makes it at least WARN and leads the message too.
    """
    values: dict[str, object] = {"state": state}
    values.update(runtime)
    if worker is not None:
        values.update(
            frames_received=worker.submitted,
            frames_processed=worker.processed,
            frames_dropped=worker.dropped,
            queue_length=worker.queued,
            queue_max_length=worker.max_queued,
            frames_in_flight=worker.in_flight,
        )
    values.update(flatten(session, "session"))
    problems = {key: int(values.get(key, 0)) for key in ("frames_dropped", "rejected_total", "failed_total")}
    level, message = DiagnosticStatus.OK, "mapping"
    if any(problems.values()):
        level = DiagnosticStatus.WARN
        message = "mapping; {frames_dropped} dropped, {rejected_total} rejected, {failed_total} failed"
        message = message.format(**problems)
    tf_rejected = int(values.get("tf.rejected_total", 0))  # bad TF samples from the robot (tf/ingest.py)
    if tf_rejected:
        level = DiagnosticStatus.WARN
        message += f"; {tf_rejected} TF samples rejected"
    if warnings:
        level = max(level, DiagnosticStatus.WARN)
        message = "; ".join([*warnings, message])
    if errors:
        level = DiagnosticStatus.ERROR
        message = "; ".join([*errors, message])
    status = DiagnosticStatus(
        level=level,
        name=f"{name}: mapping",
        message=message,
        hardware_id=hardware_id,
        values=[KeyValue(key=str(k), value=_format(v)) for k, v in values.items()],
    )
    return DiagnosticArray(header=Header(stamp=stamp), status=[status])


def flatten(values: Mapping[str, object], prefix: str) -> dict[str, object]:
    """Nested mappings to dotted keys: `{"a": {"b": 1}}` with prefix `p` -> `{"p.a.b": 1}`."""
    out: dict[str, object] = {}
    for key, value in values.items():
        name = f"{prefix}.{key}"
        if isinstance(value, Mapping):
            out.update(flatten(value, name))
        else:
            out[name] = value
    return out


def diagnostic_values(msg: DiagnosticArray, name_suffix: str = ": mapping") -> dict[str, str]:
    """Key -> value of the first status whose name ends with `name_suffix` (empty if none)."""
    for status in msg.status:
        if status.name.endswith(name_suffix):
            return {kv.key: kv.value for kv in status.values}
    return {}


def _format(value: object) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def log_notice(logger: object, level: str, text: str, throttle_s: float | None) -> None:
    """An engine notice (`engine.tracker.Notice`: the TF mode of a stream, the auto switch, stamps going back)
    in the node's log: one call site per kind, as rclpy refuses another severity or throttle at a call site it
    has seen."""
    if throttle_s is not None:  # only warnings are throttled
        logger.warning(text, throttle_duration_sec=throttle_s)
    elif level == "warning":
        logger.warning(text)
    else:
        logger.info(text)
