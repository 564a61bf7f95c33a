"""A simulated robot process for the DDS tests: `python test/robot_sim.py OUT.npz [--no-odom] [--no-static]`.

`--live` is a robot as it runs (issue 19): wall-clock stamps, `odom -> base_link` from its own thread at
`--odom-rate` Hz (starting `--odom-delay` s after the first image; before it when negative), images looping
over the scene until killed;
`--gap` publishes only `camera_link -> camera_optical` (a URDF without `base_link -> camera_link`);
`--static-delay S` (live) publishes `base_link -> camera_link` only S s after the first image (a
robot_state_publisher started late; the camera driver's `camera_link -> camera_optical` from the start);
`--map-frame-every N` gives every N-th image the frame_id `map` (a misconfigured camera); `--second-camera`
also publishes each image on `/robot/camera2/image_raw` as `camera2_optical` (mounted like `camera_optical`);
`--tf-subscribers N`: publish nothing on /tf before N readers of it matched (the node's listener and each of
the test's recorders: /tf is volatile, a reader that DDS discovery matches late never gets what was published
before; under load discovery of the test's reader can lag the node's image reader by seconds).

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
import threading
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

from lingbot_map_ros.ros.messages.conversions import depth_to_image, rgb_to_image  # noqa: E402
from lingbot_map_ros.ros.messages.poses import transform_msg  # noqa: E402
from lingbot_map_ros.ros.tf.broadcaster import TF_QOS  # noqa: E402

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
    parser.add_argument("--live", action="store_true", help="wall-clock stamps, odometry thread, images loop")
    parser.add_argument("--odom-rate", type=float, default=30.0)
    parser.add_argument("--odom-delay", type=float, default=0.0, help="live: odometry starts this late")
    parser.add_argument("--gap", action="store_true", help="no base_link -> camera_link (a URDF gap)")
    parser.add_argument("--static-delay", type=float, default=0.0, help="live: base_link -> camera_link late")
    parser.add_argument("--map-frame-every", type=int, default=0)
    parser.add_argument("--second-camera", action="store_true")
    parser.add_argument("--tf-subscribers", type=int, default=0, help="wait for N matched /tf readers")
    args = parser.parse_args()
    scene = make_scene(args.frames, 64, 48)
    rclpy.init()
    node = rclpy.create_node("robot_sim")
    tf_pub = node.create_publisher(TFMessage, "/tf", TF_QOS)
    static_pub = node.create_publisher(TFMessage, "/tf_static", STATIC_QOS)
    image_pub = node.create_publisher(Image, IMAGE_TOPIC, RELIABLE)
    depth_pub = node.create_publisher(Image, DEPTH_TOPIC, RELIABLE)
    second_pub = node.create_publisher(Image, "/robot/camera2/image_raw", RELIABLE)
    if not args.no_static:
        static = [transform_msg(CAMLINK_OPTICAL, stamp(0.0), "camera_link", "camera_optical")]
        if not args.gap and args.static_delay <= 0.0:
            static.insert(0, transform_msg(BASE_CAMLINK, stamp(0.0), "base_link", "camera_link"))
        if args.second_camera:
            static.append(transform_msg(CAMLINK_OPTICAL, stamp(0.0), "camera_link", "camera2_optical"))
        static_pub.publish(TFMessage(transforms=static))
    while (
        image_pub.get_subscription_count() < 1
        or (args.second_camera and second_pub.get_subscription_count() < 1)
        or tf_pub.get_subscription_count() < args.tf_subscribers
    ):
        time.sleep(0.05)
    time.sleep(0.5)
    if args.live:
        return live(args, scene, tf_pub, image_pub, static_pub)
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
        if args.second_camera:
            second = Header(stamp=header.stamp, frame_id="camera2_optical")
            second_pub.publish(rgb_to_image(scene.rgb[i], second))
        time.sleep(args.period)
    np.savez(args.out, odom=np.array(odoms), stamps=np.array(stamps))
    print("robot_sim: done", flush=True)
    while True:  # keep serving /tf_static to late joiners until killed
        time.sleep(0.2)


def live(
    args: argparse.Namespace, scene: object, tf_pub: object, image_pub: object, static_pub: object
) -> int:
    """A robot as it runs: wall-clock stamps, odometry at its own rate, images looping until killed. Writes
    OUT.npz (`start`: the first image's stamp, `odom_start`: the first odometry stamp) once odometry runs."""
    state = {"i": 0}
    start = time.time() + max(0.0, -args.odom_delay)  # the first image

    def robot_state_publisher() -> None:  # the whole static tree, late (the last message is what joiners get)
        time.sleep(max(0.0, start + args.static_delay - time.time()))
        static = [
            transform_msg(BASE_CAMLINK, stamp(0.0), "base_link", "camera_link"),
            transform_msg(CAMLINK_OPTICAL, stamp(0.0), "camera_link", "camera_optical"),
        ]
        static_pub.publish(TFMessage(transforms=static))
        print(f"robot_sim: base_link -> camera_link published at {time.time():.3f}", flush=True)

    if args.static_delay > 0.0 and not args.no_static:
        threading.Thread(target=robot_state_publisher, daemon=True).start()

    def odometry() -> None:
        time.sleep(max(0.0, start + args.odom_delay - time.time()))
        first = None
        while True:
            now = time.time()
            first = first or now
            odom = scene.base[state["i"] % len(scene.base)]
            tf_pub.publish(TFMessage(transforms=[transform_msg(odom, stamp(now), "odom", "base_link")]))
            if not args.out.exists():
                np.savez(args.out, start=start, odom_start=first)
                print("robot_sim: odometry runs", flush=True)
            time.sleep(1.0 / args.odom_rate)

    if not args.no_odom:
        threading.Thread(target=odometry, daemon=True).start()
    else:
        np.savez(args.out, start=start, odom_start=0.0)
    time.sleep(max(0.0, start - time.time()))
    i = 0
    while True:
        state["i"] = i
        bad = args.map_frame_every and i % args.map_frame_every == args.map_frame_every - 1
        header = Header(stamp=stamp(time.time()), frame_id="map" if bad else "camera_optical")
        image_pub.publish(rgb_to_image(scene.rgb[i % len(scene.rgb)], header))
        i += 1
        time.sleep(args.period)


if __name__ == "__main__":
    sys.exit(main())
