"""Cost of /tf messages of 10,000 joint transforms (issue 30: at 5 Hz they cut the node's posing from ~10 to
1.1 frames/s): one message taken, checked and stored by the node's TF listener (ros/tf/listener.py
`TfLookup.take_message`, tf_ingest.py), every transform read (before: `FULL_STORE_EDGES` above the tree's
size, no layouts) against the listener as it is (past `FULL_STORE_EDGES` child frames only the frames a
lookup needed are read; a message repeating a known layout is compared in one numpy operation,
ros/tf/layout.py). The node's lookups (`odom -> camera` through `base_link`) are made once before timing.

    python benchmarks/tf_joints.py [--joints 10000] [--messages 20]

Prints ms per message (median, max) and the share of one core that messages at 5 Hz take.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time
from unittest import mock

import numpy as np
import rclpy
from rclpy.serialization import serialize_message
from tf2_msgs.msg import TFMessage

from lingbot_map_ros.ros.messages.poses import seconds_stamp, transform_msg
from lingbot_map_ros.ros.tf import ingest as tf_ingest
from lingbot_map_ros.ros.tf.listener import TfLookup


def message(stamp_s: float, joints: int) -> bytes:
    """`odom -> base_link`, `base_link -> camera` and `joints` joints `base_link -> joint_i`."""
    odom = np.eye(4)
    odom[0, 3] = stamp_s
    stamp = seconds_stamp(stamp_s)
    transforms = [
        transform_msg(odom, stamp, "odom", "base_link"),
        transform_msg(np.eye(4), stamp, "base_link", "camera"),
    ]
    transforms += [transform_msg(np.eye(4), stamp, "base_link", f"joint_{i}") for i in range(joints)]
    return serialize_message(TFMessage(transforms=transforms))


def measure(node: object, joints: int, messages: int, read_all: bool) -> list[float]:
    """ms per message over `messages` messages (after one warm-up message and the node's lookup)."""
    full = joints + 10 if read_all else tf_ingest.FULL_STORE_EDGES
    no_layouts = mock.patch.object(tf_ingest.TfLayouts, "match", return_value=None)
    with (
        mock.patch.object(tf_ingest, "FULL_STORE_EDGES", full),
        no_layouts if read_all else contextlib.nullcontext(),
    ):
        lookup = TfLookup(node, use_tf2_ros=False, cache_s=1e6)
        try:
            data = [message(1.0 + 0.2 * k, joints) for k in range(messages + 1)]
            lookup.take_message(data[0], False)
            lookup.lookup("odom", "camera", 0.0, 0.0)
            times = []
            for k in range(1, messages + 1):
                start = time.perf_counter()
                lookup.take_message(data[k], False)
                times.append(1e3 * (time.perf_counter() - start))
                lookup.lookup("odom", "camera", 0.0, 0.0)  # the newest
            return times
        finally:
            lookup.destroy()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--joints", type=int, default=10_000)
    parser.add_argument("--messages", type=int, default=20)
    args = parser.parse_args()
    context = rclpy.Context()
    rclpy.init(context=context)
    node = rclpy.create_node("tf_joints_benchmark", context=context)
    try:
        print(f"{args.joints} joints a message, {args.messages} messages")
        print("| listener | ms per message (median) | max | one core at 5 Hz |")
        print("|---|---|---|---|")
        for name, read_all in (("every transform read (before)", True), ("needed frames read (now)", False)):
            times = measure(node, args.joints, args.messages, read_all)
            median = statistics.median(times)
            print(f"| {name} | {median:.1f} | {max(times):.1f} | {100 * 5 * median / 1e3:.0f} % |")
    finally:
        node.destroy_node()
        rclpy.shutdown(context=context)


if __name__ == "__main__":
    main()
