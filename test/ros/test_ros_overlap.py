"""Issue 22: the node's inference thread on the overlapped path (`inference.overlap`) and the depth head only
where it is used (`depth.every_n`), without DDS traffic.

The scheduler's idle hook (called after a step that left no frame queued, and when stopping), and one camera
of an in-process tiny node (`depth.every_n` 2) stepped through `step_cameras(..., overlap=True)` +
`flush_cameras`: each overlapped step hands back the frame before's results, the flush the frame in flight,
and the poses, depths and frame order equal those of the synchronous `push` path on the same frames; frames
without a depth are published (pose outputs) without map work, and a subscriber of `~/depth` makes every
frame run the depth head.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import numpy as np
import pytest
from builtin_interfaces.msg import Time
from pose_recorder import recording_pipeline
from ros_helpers import in_process_node
from std_msgs.msg import Header

from lingbot_map_ros.ros.cameras.scheduler import StreamScheduler
from lingbot_map_ros.ros.cameras.step import flush_cameras, step_cameras
from lingbot_map_ros.ros.input.intake import InputFrame
from lingbot_map_ros.ros.node import LingBotMapNode

S0 = 2
FRAMES = 7


def _wait(condition, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


def test_scheduler_calls_on_idle_only_when_no_frame_is_queued_and_when_stopping() -> None:
    release = threading.Event()
    events: list[object] = []

    def step(batch: list[tuple[str, int]]) -> list[Exception | None]:
        release.wait(5)
        events.extend(item for _, item in batch)
        return [None] * len(batch)

    scheduler = StreamScheduler([""], step, 4, lambda *_: None, on_idle=lambda: events.append("idle"))
    try:
        scheduler.submit("", 0)  # taken at once; its step waits on `release`
        _wait(lambda: scheduler.stats("").in_flight == 1)
        scheduler.submit("", 1)
        scheduler.submit("", 2)
        release.set()
        _wait(lambda: "idle" in events)
        assert events == [0, 1, 2, "idle"]  # no idle call while frames 1 and 2 were waiting
        scheduler.submit("", 3)
        _wait(lambda: events.count("idle") == 2)
    finally:
        assert scheduler.stop(5)
    assert events == [0, 1, 2, "idle", 3, "idle", "idle"]  # the last one: stopping


@pytest.fixture(scope="module")
def node() -> Iterator[LingBotMapNode]:
    """An in-process tiny node with one camera, configured and active (not spinning: no callbacks run)."""
    params = {"autostart": False, "kv_cache.scale_frames": S0, "tf.mode": "map_to_camera", "depth.every_n": 2}
    with in_process_node(params) as node:
        yield node


def _frame(stream: int, rgb: np.ndarray, i: int) -> InputFrame:
    return InputFrame(Header(stamp=Time(sec=i), frame_id="cam"), rgb, time.monotonic(), stream)


def _run(
    node: LingBotMapNode, frames: list[np.ndarray], overlap: bool, publish: bool = False
) -> list[tuple[int, list]]:
    """Step `frames` one at a time as the inference thread does, each step's results delivered by the
    pipeline's pose stage (and published, with `publish`); (stamp of each step's frame, its results)."""
    camera = node.cameras[""]
    pipeline, rounds = recording_pipeline(node, publish)
    steps: list[tuple[int, list]] = []
    try:
        for i, rgb in enumerate([*frames, None]):
            before = len(rounds)
            if rgb is None:
                errors = flush_cameras(node.cameras, pipeline)
            else:
                errors = step_cameras(
                    node.cameras, [("", _frame(camera.outputs.state.stream, rgb, i))], pipeline, overlap
                )
            assert not errors
            assert pipeline.wait_delivered(10)
            delivered = [r for _, results in rounds[before:] for r in results]
            steps.append((i if rgb is not None else -1, delivered))
    finally:
        assert pipeline.stop(10)
    return steps


def test_overlapped_steps_return_the_frame_before_and_equal_push(node: LingBotMapNode) -> None:
    rng = np.random.default_rng(0)
    frames = [rng.integers(0, 256, (42, 56, 3), dtype=np.uint8) for _ in range(FRAMES)]
    camera = node.cameras[""]
    published = camera.outputs.frames_published
    map_works = camera.outputs.map.stats()["map_worker.submitted"]
    overlapped = _run(node, frames, overlap=True, publish=True)
    camera.reset(lambda name: 0)
    sync = _run(node, frames, overlap=False)

    stamps = [[r.meta.header.stamp.sec for r in results] for _, results in overlapped]
    # anchor phase: nothing, then the S0 anchors at once; each later step returns the frame before; the
    # flush returns the last frame, and nothing is left in flight after it
    assert stamps == [[], [0, 1], [], [2], [3], [4], [5], [6]]
    pipeline, rounds = recording_pipeline(node)
    assert flush_cameras(node.cameras, pipeline) == {}
    assert pipeline.stop(10) and rounds == []
    assert [[r.meta.header.stamp.sec for r in results] for _, results in sync] == [
        [],
        [0, 1],
        [2],
        [3],
        [4],
        [5],
        [6],
        [],
    ]
    got = [r for _, results in overlapped for r in results]
    want = [r for _, results in sync for r in results]
    assert len(got) == len(want) == FRAMES
    for a, b in zip(got, want, strict=True):
        assert a.index == b.index and a.is_keyframe == b.is_keyframe
        np.testing.assert_array_equal(a.pose_c2w, b.pose_c2w)
        assert (a.depth is None) == (b.depth is None)
        if a.depth is not None:
            np.testing.assert_array_equal(a.depth, b.depth)
    # depth.every_n 2: streaming frames 1, 3 (0-based since the anchors) skip the depth head; anchors never
    assert [r.depth is None for r in got] == [False, False, False, True, False, True, False]
    # every frame published its pose outputs; only those with a depth went to the map thread
    assert camera.outputs.frames_published - published == FRAMES
    assert camera.outputs.map.stats()["map_worker.submitted"] - map_works == FRAMES - 2


def test_a_depth_subscriber_makes_every_frame_run_the_depth_head(node: LingBotMapNode) -> None:
    from sensor_msgs.msg import Image

    camera = node.cameras[""]
    camera.reset(lambda name: 0)
    assert not camera.outputs.depth_wanted()
    subscription = node.create_subscription(Image, "~/depth", lambda msg: None, 10)
    try:
        assert camera.outputs.depth_wanted()
        rng = np.random.default_rng(2)
        frames = [rng.integers(0, 256, (42, 56, 3), dtype=np.uint8) for _ in range(S0 + 4)]
        results = [r for _, out in _run(node, frames, overlap=True) for r in out]
        assert len(results) == len(frames) and all(r.depth is not None for r in results)
    finally:
        node.destroy_subscription(subscription)


def test_a_reset_drops_the_frame_in_flight(node: LingBotMapNode) -> None:
    camera = node.cameras[""]
    camera.reset(lambda name: 0)
    rng = np.random.default_rng(1)
    frames = [rng.integers(0, 256, (42, 56, 3), dtype=np.uint8) for _ in range(S0 + 1)]
    pipeline, rounds = recording_pipeline(node)
    for i, rgb in enumerate(frames):
        frame = _frame(camera.outputs.state.stream, rgb, i)
        step_cameras(node.cameras, [("", frame)], pipeline, overlap=True)
    assert pipeline.wait_delivered(10) and len(rounds) == 1  # the anchors
    camera.reset(lambda name: 0)  # frame S0 is in flight: its stream is gone
    assert flush_cameras(node.cameras, pipeline) == {}
    assert pipeline.stop(10) and len(rounds) == 1  # nothing of the old stream delivered
