"""Lifecycle cycles leak no threads (issue 30: 50 cycles with two cameras gave +7 threads and +270 MB over
the first 20-30, then flat). The node's own threads (inference, pose stage, map workers, loop closers, TF
listener, map -> odom) end at deactivate / cleanup and are made again at activate: after a few cycles with
frames through both cameras the threads by name and the process's OS threads are what they were after the
first ones. (The issue's +7 was rclpy's `MultiThreadedExecutor(num_threads=8)` growing its worker pool on
demand up to 8, with a malloc arena per new worker thread; bounded by the 8: docs/reliability.md.)"""

from __future__ import annotations

import collections
import threading
import time

import psutil
from builtin_interfaces.msg import Time
from pose_recorder import recording_pipeline
from rclpy.lifecycle import TransitionCallbackReturn
from ros_helpers import in_process_node, load_frames
from std_msgs.msg import Header

from lingbot_map_ros.ros.cameras.step import step_cameras
from lingbot_map_ros.ros.input.intake import InputFrame
from lingbot_map_ros.ros.node import LingBotMapNode

CYCLES = 6


def threads() -> tuple[collections.Counter[str], int]:
    """Python threads by name (a pool's numbered names folded) and the process's OS threads."""
    names = collections.Counter(t.name.rstrip("0123456789_") for t in threading.enumerate())
    return names, psutil.Process().num_threads()


def step_both(node: LingBotMapNode, rgb: object, stamp_s: int) -> None:
    """One round of the inference thread over a frame of each camera, its results published."""
    frames = [
        (name, InputFrame(Header(stamp=Time(sec=stamp_s), frame_id=f"{name}_optical"), rgb, time.monotonic(),
                          node.cameras[name].outputs.state.stream))
        for name in ("front", "rear")
    ]  # fmt: skip
    pipeline, _ = recording_pipeline(node, True)
    try:
        assert not step_cameras(node.cameras, frames, pipeline)
    finally:
        assert pipeline.stop(10)


def test_lifecycle_cycles_with_two_cameras_leak_no_threads() -> None:
    images = load_frames(3, step=2)
    params = {"autostart": False, "kv_cache.scale_frames": 2, "tf.mode": "map_to_camera"}
    with in_process_node({**params, "cameras": ["front", "rear"]}) as node:
        seen = []
        for cycle in range(CYCLES):
            for i, rgb in enumerate(images):  # frames through both cameras: every worker has work
                step_both(node, rgb, 10 * cycle + i)
            seen.append(threads())
            for transition in (node.trigger_deactivate, node.trigger_cleanup, node.trigger_configure,
                               node.trigger_activate):  # fmt: skip
                assert transition() == TransitionCallbackReturn.SUCCESS
        assert seen[-1] == seen[1], seen
