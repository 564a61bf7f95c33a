"""Unit tests of the bounded drop-oldest inference worker, the parameter table and the diagnostics builder."""

from __future__ import annotations

import threading
import time

import pytest
from builtin_interfaces.msg import Time
from rclpy.parameter import Parameter

from lingbot_map_ros.engine.lane_worker import LaneWorker
from lingbot_map_ros.ros.diagnostics.stats import (
    CauseLog,
    CauseThrottle,
    RuntimeStats,
    diagnostic_array,
    diagnostic_values,
)
from lingbot_map_ros.ros.params.declare import (
    PARAMETERS,
    SPECS,
    NodeParams,
    apply_update,
    check_update,
    field_name,
)


def test_worker_processes_in_order_and_drops_oldest_when_slow() -> None:
    gate = threading.Event()
    seen: list[int] = []

    def process(item: int) -> None:
        gate.wait(5)
        seen.append(item)

    worker = LaneWorker(process, queue_size=3, on_error=lambda item, exc: None)
    try:
        assert worker.submit(0)
        deadline = time.monotonic() + 5
        while worker.stats().queued and time.monotonic() < deadline:  # thread takes frame 0, blocks on gate
            time.sleep(0.005)
        accepted = [worker.submit(i) for i in range(1, 11)]  # 10 frames into a queue of 3
        assert accepted == [True] * 3 + [False] * 7
        stats = worker.stats()
        assert (stats.submitted, stats.dropped, stats.queued, stats.max_queued) == (11, 7, 3, 3)
        gate.set()
        assert worker.wait_idle(5)
        assert seen == [0, 8, 9, 10]  # the newest frames survive, in arrival order
        assert worker.stats().processed == 4
    finally:
        assert worker.stop()


def test_worker_survives_failures_and_clear_discards_queue() -> None:
    errors: list[tuple[int, str]] = []

    def process(item: int) -> None:
        if item == 1:
            raise RuntimeError("boom")

    worker = LaneWorker(process, queue_size=100, on_error=lambda item, exc: errors.append((item, str(exc))))
    try:
        for i in range(4):
            worker.submit(i)
        assert worker.wait_idle(5)
        assert errors == [(1, "boom")]
        stats = worker.stats()
        assert (stats.processed, stats.failed, stats.dropped) == (4, 1, 0)
    finally:
        assert worker.stop()
    with pytest.raises(RuntimeError, match="stopped"):
        worker.submit(5)
    with pytest.raises(ValueError, match="queue_size"):
        LaneWorker(process, queue_size=0, on_error=lambda item, exc: None)


def test_blocking_submit_applies_back_pressure_instead_of_dropping() -> None:
    gate = threading.Event()
    seen: list[int] = []
    worker = LaneWorker(lambda item: (gate.wait(5), seen.append(item)), queue_size=2, on_error=print)
    try:
        done = threading.Event()

        def producer() -> None:
            for i in range(6):
                worker.submit(i, block=True)
            done.set()

        thread = threading.Thread(target=producer)
        thread.start()
        time.sleep(0.2)
        assert not done.is_set()  # 1 in flight + 2 queued: the producer waits
        assert worker.stats().queued == 2
        gate.set()
        thread.join(5)
        assert done.is_set() and worker.wait_idle(5)
        assert seen == list(range(6)) and worker.stats().dropped == 0
    finally:
        assert worker.stop()


def test_blocked_submit_is_released_by_stop() -> None:
    gate = threading.Event()
    worker = LaneWorker(lambda item: gate.wait(5), queue_size=1, on_error=print)
    errors: list[Exception] = []

    def producer() -> None:
        try:
            for i in range(3):
                worker.submit(i, block=True)
        except RuntimeError as exc:
            errors.append(exc)

    thread = threading.Thread(target=producer)
    thread.start()
    time.sleep(0.2)  # item 0 in flight (blocked on the gate), item 1 queued, the producer waits with item 2
    assert thread.is_alive()
    assert not worker.stop(timeout=0.1)  # the item in flight is still blocked
    thread.join(5)
    assert not thread.is_alive() and len(errors) == 1 and "stopped" in str(errors[0])
    gate.set()
    assert worker.stop()


def _defaults() -> NodeParams:
    return NodeParams(**{field_name(s.name): s.default for s in PARAMETERS})


def test_parameter_table_matches_dataclass_and_defaults_are_valid() -> None:
    assert {field_name(s.name) for s in PARAMETERS} == set(NodeParams.__dataclass_fields__)
    for spec in PARAMETERS:
        assert spec.validate(spec.default) is None, spec.name
        desc = spec.descriptor()
        assert desc.description
        if spec.int_range:
            assert (desc.integer_range[0].from_value, desc.integer_range[0].to_value) == spec.int_range


def test_parameter_updates_live_vs_reload() -> None:
    current = _defaults()
    ok = check_update([Parameter("kv_cache.sliding_window", value=16)], current, configured=True)
    assert ok.successful
    assert (
        apply_update(current, [Parameter("kv_cache.sliding_window", value=16)]).kv_cache_sliding_window == 16
    )
    reload = check_update([Parameter("model.preset", value="tiny")], current, configured=True)
    assert not reload.successful and "needs a reload" in reload.reason
    assert check_update([Parameter("model.preset", value="tiny")], current, configured=False).successful
    same = check_update([Parameter("model.preset", value=current.model_preset)], current, configured=True)
    assert same.successful  # unchanged reload-only value: accepted (ros2 param load of a dump)
    assert check_update([Parameter("map.voxel_size", value=1)], current, configured=True).successful is False
    cases = {
        ("kv_cache.sliding_window", 0): "in [1, 1024]",
        ("kv_cache.sliding_window", 500): "<= kv_cache.max_window (128)",
        ("kv_cache.sliding_window", "big"): "must be a int",
        ("attention.backend", "cuda"): "one of",
        ("model.image_width", 100): "multiple of 14",
    }
    for (name, value), reason in cases.items():
        result = check_update([Parameter(name, value=value)], current, configured=False)
        assert not result.successful and reason in result.reason, (name, result.reason)
    assert SPECS["map.conf_threshold"].validate(2) is None  # an int for a float parameter is fine


def test_trajectory_max_poses_is_a_validated_reload_parameter() -> None:
    current = _defaults()
    assert current.trajectory_max_poses == 1_000_000  # 64 MB of TUM rows at 64 B/pose
    assert SPECS["trajectory.max_poses"].descriptor().integer_range[0].to_value == 50_000_000
    for value, reason in ((0, "in [1, 50000000]"), (50_000_001, "in [1, 50000000]"), (2.5, "must be a int")):
        result = check_update([Parameter("trajectory.max_poses", value=value)], current, configured=False)
        assert not result.successful and reason in result.reason, (value, result.reason)
    change = [Parameter("trajectory.max_poses", value=5000)]
    configured = check_update(change, current, configured=True)
    assert not configured.successful and "needs a reload" in configured.reason
    assert check_update(change, current, configured=False).successful
    assert apply_update(current, change).trajectory_max_poses == 5000


def test_runtime_stats_latency_p99_is_the_nearest_rank() -> None:
    """Issue 33: a camera's latency p99 in /diagnostics (per camera: each camera has its own RuntimeStats)."""
    stats = RuntimeStats(window_s=60)
    for ms in range(1, 201):  # 1..200 ms: the 198th value is the smallest >= 99 % of them
        stats.record_output(ms / 1e3)
    snap = stats.snapshot()
    assert snap["latency_ms_p99"] == pytest.approx(198.0) and snap["latency_ms_max"] == pytest.approx(200.0)
    assert snap["latency_ms_mean"] == pytest.approx(100.5)


def test_runtime_stats_and_diagnostic_message() -> None:
    stats = RuntimeStats(window_s=60)
    for _ in range(3):
        stats.record_output(0.05)
        time.sleep(0.01)
    assert stats.record_rejected("unsupported_encoding") == 1
    assert stats.record_rejected("unsupported_encoding") == 2
    snap = stats.snapshot()
    assert snap["frames_published"] == 3 and snap["rejected_unsupported_encoding"] == 2
    assert snap["fps"] > 0 and snap["latency_ms_mean"] == pytest.approx(50.0)
    assert snap["latency_ms_p99"] == snap["latency_ms_max"] == pytest.approx(50.0)
    msg = diagnostic_array(
        "lingbot_map", "cpu", Time(), snap, None, {"sliding_window": 16, "cache": {"x": 1}}, "active"
    )
    values = diagnostic_values(msg)
    assert (
        values["session.sliding_window"] == "16"
        and values["session.cache.x"] == "1"
        and values["state"] == "active"
    )
    assert msg.status[0].level == msg.status[0].WARN and "2 rejected" in msg.status[0].message


def test_cause_throttle() -> None:
    throttle = CauseThrottle(period_s=60)
    assert throttle.should_log("a") and not throttle.should_log("a") and throttle.should_log("b")


class _Logger:
    """Records what the node's RcutilsLogger would print, by severity."""

    def __init__(self) -> None:
        self.lines: list[tuple[str, str]] = []

    def warning(self, text: str) -> None:
        self.lines.append(("warning", text))

    def error(self, text: str) -> None:
        self.lines.append(("error", text))


def test_cause_log_counts_every_event_and_logs_each_cause_once() -> None:
    stats, logger = RuntimeStats(), _Logger()
    causes = CauseLog(stats, logger)
    for _ in range(3):
        causes.rejected("oversized_image", "header claims 9000x9000 px")
        causes.inference_failed(MemoryError("oom"), restarted=False)
        causes.publish_failed(RuntimeError("publisher gone"))
    causes.rejected("conversion_error", "unexpected KeyError")
    snap = stats.snapshot()
    assert snap["rejected_oversized_image"] == 3 and snap["rejected_conversion_error"] == 1
    assert snap["rejected_total"] == 4
    assert snap["failed_MemoryError"] == 3 and snap["failed_publish_RuntimeError"] == 3
    assert snap["failed_total"] == 6
    assert logger.lines == [
        ("warning", "frame rejected (oversized_image, 1 so far): header claims 9000x9000 px"),
        (
            "error",
            "inference failed (MemoryError, 1 so far), frame skipped, caches reset, the next frame "
            "re-anchors on the kept keyframes, map kept: oom",
        ),
        ("error", "publishing failed (publish_RuntimeError, 1 so far), step skipped: publisher gone"),
        ("warning", "frame rejected (conversion_error, 1 so far): unexpected KeyError"),
    ]


def test_pipeline_passes_the_gpu_fast_path_switches_to_the_session() -> None:
    from dataclasses import replace

    from lingbot_map_ros.ros.lifecycle.pipeline import build_pipeline

    params = replace(
        _defaults(),
        model_preset="tiny",
        model_device="cpu",
        model_image_width=56,
        model_cuda_graphs=False,
        model_compile_blocks=True,
    )
    warnings: list[str] = []
    pipeline = build_pipeline(params, warnings.append)
    config = pipeline.cameras.config
    assert (config.cuda_graphs, config.compile_blocks) == (False, True)
    assert any("SYNTHETIC" in w for w in warnings)
