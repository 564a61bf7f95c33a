"""TF ingestion in proportion to what the node needs (issue 30: /tf messages of 10,000 joints at 5 Hz cut
posing from ~10 to 1.1 frames/s). Past `FULL_STORE_EDGES` stored child frames, a transform whose frame no
lookup needed is kept unread (tf_ingest.py `TfIngest`); a frame a lookup needs is read at once from there.
Speed: benchmarks/tf_joints.py."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
import rclpy
from rclpy.serialization import serialize_message
from tf2_msgs.msg import TFMessage

from lingbot_map_ros.ros.messages.poses import seconds_stamp, transform_msg
from lingbot_map_ros.ros.tf.ingest import FULL_STORE_EDGES
from lingbot_map_ros.ros.tf.listener import TfLookup

JOINTS = 10_000


@pytest.fixture
def lookup() -> Iterator[TfLookup]:
    context = rclpy.Context()
    rclpy.init(context=context)
    node = rclpy.create_node("tf_selective_test", context=context)
    lookup = TfLookup(node, use_tf2_ros=False)
    yield lookup
    lookup.destroy()
    node.destroy_node()
    rclpy.shutdown(context=context)


def joints_message(stamp_s: float, renamed: str = "") -> bytes:
    """The robot (`odom -> base_link`, x = stamp) and `JOINTS` joints `base_link -> joint_i` (x = i) in one
    serialized message; `renamed`: joint 9,000's frame id instead."""
    odom = np.eye(4)
    odom[0, 3] = stamp_s
    transforms = [transform_msg(odom, seconds_stamp(stamp_s), "odom", "base_link")]
    for i in range(JOINTS):
        pose = np.eye(4)
        pose[0, 3] = i
        name = renamed if renamed and i == 9000 else f"joint_{i}"
        transforms.append(transform_msg(pose, seconds_stamp(stamp_s), "base_link", name))
    return serialize_message(TFMessage(transforms=transforms))


def test_frames_no_lookup_needs_are_kept_unread_and_read_at_once_when_needed(lookup: TfLookup) -> None:
    first = joints_message(1.0)
    assert lookup.take_message(first, False) == JOINTS + 1
    stats = lookup.stats()  # the first FULL_STORE_EDGES children stored whole, the rest unread
    assert (
        stats["tf.samples"] == FULL_STORE_EDGES and stats["tf.unread_edges"] == JOINTS + 1 - FULL_STORE_EDGES
    )
    lookup.take_message(joints_message(2.0), False)
    assert lookup.stats()["tf.samples"] == 2 * FULL_STORE_EDGES  # the same frames again: only those read
    # a lookup through a frame kept unread reads its newest transform at once (no wait for the next one)
    assert lookup.lookup("odom", "joint_9000", 2.0, 0.0)[0, 3] == pytest.approx(2.0 + 9000)
    # from now on that frame is read in every message, the others still not
    lookup.take_message(joints_message(3.0), False)
    assert lookup.stats()["tf.samples"] == 3 * FULL_STORE_EDGES + 2  # + the one read at the lookup
    assert lookup.lookup("odom", "joint_9000", 2.5, 0.0)[0, 3] == pytest.approx(2.5 + 9000)  # interpolated
    assert lookup.lookup("odom", "joint_5", 3.0, 0.0)[0, 3] == pytest.approx(3.0 + 5)  # stored whole


def test_a_small_tree_is_stored_whole(lookup: TfLookup) -> None:
    """Below `FULL_STORE_EDGES` child frames nothing changes: every sample is read and stored."""
    transforms = [transform_msg(np.eye(4), seconds_stamp(1.0), "base_link", f"wheel_{i}") for i in range(100)]
    lookup.take_message(serialize_message(TFMessage(transforms=transforms)), False)
    assert lookup.stats()["tf.samples"] == 100 and lookup.stats()["tf.unread_edges"] == 0


def test_a_repeated_tree_is_compared_not_parsed_and_a_renamed_frame_is_seen(lookup: TfLookup) -> None:
    """The same tree again (layout.py): one comparison of its frame-id bytes, only the needed transforms
    read; a message of the same size with one frame id changed is another tree: the new frame can be looked
    up at once."""
    for stamp in (1.0, 2.0, 3.0):
        lookup.take_message(joints_message(stamp), False)
    assert lookup.stats()["tf.samples"] == 3 * FULL_STORE_EDGES
    lookup.take_message(joints_message(4.0, renamed="jOint_9000"), False)  # same size, another id
    assert lookup.lookup("odom", "jOint_9000", 4.0, 0.0)[0, 3] == pytest.approx(4.0 + 9000)
    assert lookup.lookup("odom", "joint_9001", 4.0, 0.0)[0, 3] == pytest.approx(4.0 + 9001)
