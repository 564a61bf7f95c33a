"""The TF buffer the node uses without tf2_ros: interpolation between stamps, chains of edges, static edges,
failures naming the missing edge (no DDS)."""

from __future__ import annotations

import numpy as np
import pytest

from lingbot_map_ros.engine.geometry import invert_rigid, rigid
from lingbot_map_ros.ros.tf.buffer import TfBuffer, TransformUnavailable


def rz(a: float) -> np.ndarray:
    return np.array([[np.cos(a), -np.sin(a), 0], [np.sin(a), np.cos(a), 0], [0, 0, 1.0]])


def test_interpolates_translation_linearly_and_rotation_by_slerp() -> None:
    buf = TfBuffer()
    buf.set_transform("odom", "base", 1.0, rigid(rz(0.0), [0, 0, 0]), static=False)
    buf.set_transform("odom", "base", 2.0, rigid(rz(1.0), [2, 0, 0]), static=False)
    mid = buf.lookup("odom", "base", 1.25)
    np.testing.assert_allclose(mid[:3, 3], [0.5, 0, 0], atol=1e-12)
    np.testing.assert_allclose(mid[:3, :3], rz(0.25), atol=1e-12)
    np.testing.assert_allclose(buf.lookup("odom", "base", 2.0), rigid(rz(1.0), [2, 0, 0]))
    np.testing.assert_allclose(buf.lookup("odom", "base", 0.0), rigid(rz(1.0), [2, 0, 0]))  # 0: latest


def test_chains_static_and_dynamic_edges_through_the_common_parent() -> None:
    buf = TfBuffer()
    base_cam = rigid(rz(0.3), [0.1, 0.0, 1.2])
    buf.set_transform("base", "cam_link", 0.0, rigid(np.eye(3), [0.1, 0, 1.2]), static=True)
    buf.set_transform("cam_link", "cam", 0.0, rigid(rz(0.3), [0, 0, 0]), static=True)
    odom_base = rigid(rz(0.5), [3, 1, 0])
    buf.set_transform("odom", "base", 5.0, odom_base, static=False)
    np.testing.assert_allclose(buf.lookup("base", "cam", 5.0), base_cam, atol=1e-12)
    np.testing.assert_allclose(buf.lookup("odom", "cam", 5.0), odom_base @ base_cam, atol=1e-12)
    np.testing.assert_allclose(buf.lookup("cam", "odom", 5.0), invert_rigid(odom_base @ base_cam), atol=1e-12)
    assert buf.frames() == {"cam_link": "base", "cam": "cam_link", "base": "odom"}


def test_missing_and_out_of_range_edges_are_named() -> None:
    buf = TfBuffer()
    buf.set_transform("odom", "base", 1.0, np.eye(4), static=False)
    buf.set_transform("odom", "base", 2.0, np.eye(4), static=False)
    with pytest.raises(TransformUnavailable) as exc:
        buf.lookup("base", "cam", 1.5)
    assert exc.value.edge == "base -> cam"
    with pytest.raises(TransformUnavailable) as exc:
        buf.lookup("odom", "base", 2.5)  # no extrapolation into the future
    assert exc.value.edge == "odom -> base" and "no data" in str(exc.value)
    with pytest.raises(TransformUnavailable):
        buf.lookup("odom", "base", 0.5)
    assert buf.lookup("odom", "base", 1.5).shape == (4, 4)


def test_old_samples_leave_the_cache() -> None:
    buf = TfBuffer(cache_s=1.0)
    for t in np.arange(0.0, 5.0, 0.1):
        buf.set_transform("odom", "base", float(t), rigid(np.eye(3), [t, 0, 0]), static=False)
    with pytest.raises(TransformUnavailable):
        buf.lookup("odom", "base", 2.0)
    np.testing.assert_allclose(buf.lookup("odom", "base", 4.45)[0, 3], 4.45)


def test_300000_distinct_edges_through_check_and_store_keep_the_buffer_bounded_and_the_live_tree() -> None:
    """Issue 30: `robot_part_N -> sensor_N`, each edge new; the robot's tree (static camera mount, odometry
    sampled meanwhile) stays and looks up; the store holds at most the graph's caps."""
    from lingbot_map_ros.ros.tf.ingest import SampleCheck
    from lingbot_map_ros.ros.tf.wire import TfSample

    buf = TfBuffer(cache_s=10.0)
    check = SampleCheck(lambda line: None)
    buf.add_sample(TfSample("base_link", "camera", 0.0, (0.1, 0.0, 1.2), (0.0, 0.0, 0.0, 1.0)), static=True)
    for i in range(300_000):
        stamp = 1.0 + i * 1e-5
        sample = TfSample(f"robot_part_{i}", f"sensor_{i}", stamp, (0.0, 0.0, 0.0), (0.0, 0.0, 0.0, 1.0))
        if check(sample, False, None, 5.0):
            buf.add_sample(sample, static=False)
        if i % 1000 == 0:
            odom = TfSample("odom", "base_link", stamp, (i * 1e-3, 0.0, 0.0), (0.0, 0.0, 0.0, 1.0))
            buf.add_sample(odom, static=False)
    assert check.accepted == 300_000 and not check.rejected
    graph = buf.graph
    assert len(buf.frames()) == len(graph) <= graph.max_dynamic_edges + graph.max_static_edges
    assert graph.evicted == 300_001 - graph.max_dynamic_edges
    np.testing.assert_allclose(buf.lookup("odom", "camera", 0.0)[:3, 3], [299.1, 0.0, 1.2])
    with pytest.raises(TransformUnavailable):
        buf.lookup("robot_part_0", "sensor_0", 0.0)  # evicted
    buf.lookup("robot_part_299999", "sensor_299999", 0.0)


def test_the_stale_inverted_edge_of_a_late_mount_is_no_path() -> None:
    """Issue 29: the node's `camera_link -> map` (mount unknown) until 10.0 s, then the robot's static
    `base_link -> camera_link` and the node's `map -> base_link` from 10.2 s. The old edge stays in the
    buffer (as in every tf2 consumer): a chain ends at an edge without data at the stamp (tf2's
    walkToTopParent), and at the latest time the loop of newest samples is cut at the stale edge."""
    buf = TfBuffer()
    link_opt = rigid(rz(0.2), [0, 0, 0.05])
    base_link = rigid(np.eye(3), [0.1, 0, 1.2])
    buf.set_transform("camera_link", "camera_optical", 0.0, link_opt, static=True)
    map_link = {t: rigid(rz(0.1 * t), [t, 0, 0]) for t in (9.8, 9.9, 10.0)}
    for t, pose in map_link.items():
        buf.set_transform("camera_link", "map", t, invert_rigid(pose), static=False)
    buf.set_transform("base_link", "camera_link", 0.0, base_link, static=True)
    map_base = {t: rigid(rz(0.3 * t), [0, t, 0]) for t in (10.2, 10.4)}
    for t, pose in map_base.items():
        buf.set_transform("map", "base_link", t, pose, static=False)
    np.testing.assert_allclose(buf.lookup("map", "camera_optical", 9.9), map_link[9.9] @ link_opt, atol=1e-12)
    latest = map_base[10.4] @ base_link @ link_opt
    for stamp in (10.4, 0.0):
        np.testing.assert_allclose(buf.lookup("map", "camera_optical", stamp), latest, atol=1e-12)
        np.testing.assert_allclose(
            buf.lookup("camera_optical", "map", stamp), invert_rigid(latest), atol=1e-12
        )
        np.testing.assert_allclose(
            buf.lookup("base_link", "map", stamp), invert_rigid(map_base[10.4]), atol=1e-12
        )
        np.testing.assert_allclose(buf.lookup("base_link", "camera_optical", stamp), base_link @ link_opt)
    with pytest.raises(TransformUnavailable, match="no data at 10.100"):
        buf.lookup("map", "camera_optical", 10.1)  # between the two edges
