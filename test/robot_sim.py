"""A simulated robot process for the DDS tests: `python test/robot_sim.py OUT.npz [--no-odom] [--no-static]`.

Publishes the static extrinsics `base_link -> camera_link -> camera_optical` on /tf_static (transient local),
`odom -> base_link` on /tf along the loop of test/robot_scene.py with 5 mm noise (one sample at each image
stamp and one between), and the rendered images of the synthetic room (frame_id `camera_optical`) on
`/robot/camera/image_raw`, once the node subscribes. Stamps start at 1000 s, 0.1 s apart. Writes the
odometry it
published at each image stamp (`odom [N, 4, 4]`, `stamps [N]`) to OUT.npz, then runs until killed.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import rclpy
from builtin_interfaces.msg import Time
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import Image
from std_msgs.msg import Header
from tf2_msgs.msg import TFMessage

sys.path.insert(0, str(Path(__file__).resolve().parent))
from robot_scene import BASE_CAMLINK, CAMLINK_OPTICAL, make_scene  # noqa: E402

from lingbot_map_ros.ros.conversions import depth_to_image, rgb_to_image  # noqa: E402
from lingbot_map_ros.ros.geometry import transform_msg  # noqa: E402
from lingbot_map_ros.ros.tf import TF_QOS  # noqa: E402

IMAGE_TOPIC = "/robot/camera/image_raw"
DEPTH_TOPIC = "/robot/camera/depth/image_raw"
START_S = 1000.0
DT = 0.1
STATIC_QOS = QoSProfile(
    depth=10, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL
)
RELIABLE = QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE)


def stamp(seconds: float) -> Time:
    ns = round(seconds * 1e9)
    return Time(sec=ns // 1_000_000_000, nanosec=ns % 1_000_000_000)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    parser.add_argument("--frames", type=int, default=16)
    parser.add_argument("--no-odom", action="store_true")
    parser.add_argument("--no-static", action="store_true")
    parser.add_argument("--depth", action="store_true", help="also publish the true depth (32FC1 m)")
    parser.add_argument("--period", type=float, default=0.15, help="wall seconds between images")
    args = parser.parse_args()
    scene = make_scene(args.frames, 64, 48)
    rclpy.init()
    node = rclpy.create_node("robot_sim")
    tf_pub = node.create_publisher(TFMessage, "/tf", TF_QOS)
    static_pub = node.create_publisher(TFMessage, "/tf_static", STATIC_QOS)
    image_pub = node.create_publisher(Image, IMAGE_TOPIC, RELIABLE)
    depth_pub = node.create_publisher(Image, DEPTH_TOPIC, RELIABLE)
    if not args.no_static:
        static_pub.publish(
            TFMessage(
                transforms=[
                    transform_msg(BASE_CAMLINK, stamp(0.0), "base_link", "camera_link"),
                    transform_msg(CAMLINK_OPTICAL, stamp(0.0), "camera_link", "camera_optical"),
                ]
            )
        )
    while image_pub.get_subscription_count() < 1:
        time.sleep(0.05)
    time.sleep(0.5)
    rng = np.random.default_rng(1)
    odoms, stamps = [], []
    for i in range(args.frames):
        t = START_S + DT * i
        for k, ts in enumerate((t, t + DT / 2)):
            odom = scene.base[i].copy()
            odom[:3, 3] += rng.normal(0.0, 0.005, 3)
            if k == 0:
                odoms.append(odom)
                stamps.append(t)
            if not args.no_odom:
                tf_pub.publish(TFMessage(transforms=[transform_msg(odom, stamp(ts), "odom", "base_link")]))
        header = Header(stamp=stamp(t), frame_id="camera_optical")
        if args.depth:  # before the image, so the node has it when the frame's results are published
            depth_pub.publish(depth_to_image(scene.depth[i], header))
        image_pub.publish(rgb_to_image(scene.rgb[i], header))
        time.sleep(args.period)
    np.savez(args.out, odom=np.array(odoms), stamps=np.array(stamps))
    print("robot_sim: done", flush=True)
    while True:  # keep serving /tf_static to late joiners until killed
        time.sleep(0.2)


if __name__ == "__main__":
    sys.exit(main())
