"""The node's TF history (`tf.cache_time`, issue 29): tf2's default 10 s had pruned the odometry of frames
processed later than that after their stamp, and they were dropped as an "extrapolation into the past".
`TfLookup` keeps `cache_s` in either backend, and a lookup that fails at a stamp older than the history raises
`FrameTooOld` at once (the node counts `rejected_frame_too_old`), never a plain missing transform."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
import rclpy

from lingbot_map_ros.engine.robot_tf import FrameTooOld, TransformUnavailable
from lingbot_map_ros.ros.tf import listener as tf_listener
from lingbot_map_ros.ros.tf.listener import TfLookup
from lingbot_map_ros.ros.tf.wire import TfSample

BACKENDS = [
    False,
    pytest.param(
        True, marks=pytest.mark.skipif(tf_listener.tf2_ros is None, reason="tf2_ros not importable")
    ),
]


@pytest.fixture
def node() -> Iterator[object]:
    context = rclpy.Context()
    rclpy.init(context=context)
    node = rclpy.create_node("tf_cache_time_test", context=context)
    yield node
    node.destroy_node()
    rclpy.shutdown(context=context)


def odometry(lookup: TfLookup, start_s: float, end_s: float) -> None:
    """`odom -> base_link` every 0.5 s from `start_s` to `end_s`, x equal to the stamp."""
    for stamp in np.arange(start_s, end_s + 1e-9, 0.5):
        lookup.store(
            TfSample("odom", "base_link", float(stamp), (float(stamp), 0.0, 0.0), (0, 0, 0, 1.0)), False
        )


@pytest.mark.parametrize("use_tf2_ros", BACKENDS)
def test_history_covers_the_cache_time_not_tf2s_default(node: object, use_tf2_ros: bool) -> None:
    lookup = TfLookup(node, use_tf2_ros=use_tf2_ros, cache_s=60.0)
    try:
        odometry(lookup, 100.0, 140.0)
        # 25 s behind the newest sample: pruned with tf2's default 10 s, kept with 60 s
        assert lookup.lookup("odom", "base_link", 115.25, 0.0)[0, 3] == pytest.approx(115.25)
    finally:
        lookup.destroy()


@pytest.mark.parametrize("use_tf2_ros", BACKENDS)
def test_a_stamp_older_than_the_history_is_too_old_not_missing(node: object, use_tf2_ros: bool) -> None:
    lookup = TfLookup(node, use_tf2_ros=use_tf2_ros, cache_s=5.0)
    try:
        odometry(lookup, 100.0, 120.0)
        assert lookup.lookup("odom", "base_link", 117.25, 0.0)[0, 3] == pytest.approx(117.25)
        with pytest.raises(FrameTooOld, match=r"tf\.cache_time 5 s") as old:
            lookup.lookup("odom", "base_link", 101.0, 30.0)  # raised at once: waiting cannot bring it back
        assert old.value.edge == "odom -> base_link" and "19.0 s behind the newest TF" in str(old.value)
        with pytest.raises(TransformUnavailable) as missing:  # newer than the data: missing, not too old
            lookup.lookup("odom", "base_link", 121.0, 0.0)
        assert not isinstance(missing.value, FrameTooOld)
        with pytest.raises(TransformUnavailable) as unknown:  # an edge never seen, at a recent stamp
            lookup.lookup("base_link", "camera", 119.0, 0.0)
        assert not isinstance(unknown.value, FrameTooOld)
        lookup.store(TfSample("base_link", "camera", 0.0, (0.1, 0.0, 0.0), (0, 0, 0, 1.0)), True)
        assert lookup.lookup("base_link", "camera", 50.0, 0.0)[0, 3] == pytest.approx(0.1)  # static: any time
    finally:
        lookup.destroy()


def test_a_static_parent_wins_over_a_dynamic_edge_heard_back(node: object) -> None:
    """A dynamic `map -> camera_link` (another node's edge; this node's own before it inverted its
    `map_to_camera` edge) must not hide the robot's `base_link -> camera_link` published later on
    /tf_static."""
    lookup = TfLookup(node, use_tf2_ros=False)
    try:
        mount = TfSample("base_link", "camera_link", 0.0, (0.2, 0.0, 0.0), (0, 0, 0, 1.0))
        ours = TfSample("map", "camera_link", 10.0, (1.0, 0.0, 0.0), (0, 0, 0, 1.0))
        lookup.store(ours, False)
        lookup.store(mount, True)
        lookup.store(TfSample("map", "camera_link", 10.1, (1.0, 0.0, 0.0), (0, 0, 0, 1.0)), False)
        assert lookup.graph.parents()["camera_link"] == "base_link"
        assert lookup.lookup("base_link", "camera_link", 10.1, 0.0)[0, 3] == pytest.approx(0.2)
    finally:
        lookup.destroy()


def test_the_nodes_own_map_edges_do_not_age_the_robots_tf(node: object) -> None:
    """`map -> odom` republished stamped now (wall clock) while the robot's TF has bag stamps: no frame is
    too old because of the node's own edge."""
    lookup = TfLookup(node, use_tf2_ros=False, cache_s=5.0)
    try:
        odometry(lookup, 100.0, 101.0)
        lookup.store(TfSample("map", "odom", 1.8e9, (0.0, 0.0, 0.0), (0, 0, 0, 1.0)), False)
        lookup.store(TfSample("map_front", "front_link", 1.8e9, (0.0, 0.0, 0.0), (0, 0, 0, 1.0)), False)
        with pytest.raises(TransformUnavailable) as missing:
            lookup.lookup("base_link", "camera", 100.5, 0.0)
        assert not isinstance(missing.value, FrameTooOld) and lookup.newest_s == 101.0
    finally:
        lookup.destroy()


@pytest.mark.parametrize("use_tf2_ros", BACKENDS)
def test_the_late_mount_switch_in_both_backends(node: object, use_tf2_ros: bool) -> None:
    """Issue 29: the node's inverted `camera_link -> map` until 10.0 s, robot_state_publisher's static
    `base_link -> camera_link`, then `map -> base_link` from 10.2 s (x of each edge = its offset). At a time
    every direction resolves on both sides of the switch (tf2's walkToTopParent ends a walk at a parent
    lookup that fails), the one-frame gap extrapolates. At `Time()` with source `map` the C++ tf2 follows
    `map`'s newest parent, the stale `camera_link` (docs/robot.md: the loop error or the switch-time value);
    the package's buffer cuts that loop at the stale edge."""
    lookup = TfLookup(node, use_tf2_ros=use_tf2_ros, cache_s=30.0)

    def edge(parent: str, child: str, stamp: float, x: float, static: bool = False) -> None:
        lookup.store(TfSample(parent, child, stamp, (x, 0.0, 0.0), (0, 0, 0, 1.0)), static)

    try:
        edge("camera_link", "camera_optical", 0.0, 0.05, static=True)
        for t in (9.8, 9.9, 10.0):
            edge("camera_link", "map", t, -t)
        edge("base_link", "camera_link", 0.0, 0.1, static=True)
        for t in (10.2, 10.4):
            edge("map", "base_link", t, 100.0 + t)
        x = {t: lookup.lookup("map", "camera_optical", t, 0.0)[0, 3] for t in (9.9, 10.4, 0.0)}
        assert x == pytest.approx({9.9: 9.95, 10.4: 110.55, 0.0: 110.55})
        assert lookup.lookup("camera_optical", "map", 10.4, 0.0)[0, 3] == pytest.approx(-110.55)
        assert lookup.lookup("base_link", "map", 10.4, 0.0)[0, 3] == pytest.approx(-110.4)
        assert lookup.lookup("base_link", "camera_optical", 10.4, 0.0)[0, 3] == pytest.approx(0.15)
        with pytest.raises(TransformUnavailable):
            lookup.lookup("map", "camera_optical", 10.1, 0.0)  # between the two edges
        latest = lookup.lookup("base_link", "map", 0.0, 0.0)[0, 3]
        assert latest == pytest.approx(-9.9 if use_tf2_ros else -110.4)  # tf2: the value at 10.0 s
        if use_tf2_ros:
            with pytest.raises(TransformUnavailable, match="loop"):
                lookup.lookup("camera_optical", "map", 0.0, 0.0)
        else:
            assert lookup.lookup("camera_optical", "map", 0.0, 0.0)[0, 3] == pytest.approx(-110.55)
    finally:
        lookup.destroy()
