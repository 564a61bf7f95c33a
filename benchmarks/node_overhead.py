"""Per-frame cost of the ROS node beyond the model, on the CPU (no GPU, no model): real rclpy / Fast DDS.

What the node does for every frame besides `StreamingSession.push` (ros/node.py), each timed separately on
synthetic 518x378 frames with the node's default parameters:

* ``image_to_rgb``: sensor_msgs/Image (rgb8 / bgr8) -> [H, W, 3] uint8 (the subscription callback);
* ``queue handoff x2``: `InferenceWorker.submit` -> the worker thread picks the frame up, twice (callback ->
  inference thread -> publish thread), as in the node;
* ``publish``: `MappingOutputs.publish` on real publishers: pose -> TF + odometry + camera_info, depth image,
  point decoding (``FrameResult.points``), PointCloud2 packing, path, voxel-map insert on keyframes.
  Parts of it are also timed alone (indented rows): the points with their PointCloud2, the depth image
  message, building the Path message (the outputs' private pose history is read for this only) and
  publishing it on a second topic, and the voxel-map insert of a keyframe's points into a second map.

``--subscribers`` adds a subscriber node (same process, own thread) on every output so DDS delivers each
message (as with RViz attached); it competes for the GIL, so those numbers are an upper bound.
The session's own host stages (pre-processing, decoding to the original resolution) are part of the
end-to-end numbers of benchmarks/e2e.py, not of this script. Usage::

    .venv/bin/python benchmarks/node_overhead.py --frames 300 [--subscribers] [--encoding bgr8]
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import random
import statistics
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
os.environ.setdefault("ROS_DOMAIN_ID", str(random.randint(1, 100)))
os.environ.setdefault("ROS_LOG_DIR", tempfile.mkdtemp(prefix="node_overhead_ros_log_"))
os.environ.setdefault("FASTDDS_DEFAULT_PROFILES_FILE", str(REPO / "config" / "fastdds_localhost_big_shm.xml"))

import rclpy  # noqa: E402  (after the DDS environment above)
from builtin_interfaces.msg import Time  # noqa: E402
from nav_msgs.msg import Path as PathMsg  # noqa: E402
from rclpy.executors import SingleThreadedExecutor  # noqa: E402
from std_msgs.msg import Header  # noqa: E402

from lingbot_map_ros.engine.frames import FrameChain, camera_rest_pose  # noqa: E402
from lingbot_map_ros.engine.mapping import VoxelMap  # noqa: E402
from lingbot_map_ros.engine.result import PHASE_STREAMING, FrameResult  # noqa: E402
from lingbot_map_ros.ros.conversions import (  # noqa: E402
    depth_to_image,
    image_to_rgb,
    points_to_cloud,
    rgb_to_image,
)
from lingbot_map_ros.ros.outputs import FRAME_QOS, MappingOutputs, OutputConfig  # noqa: E402
from lingbot_map_ros.ros.params import declare_parameters, read_parameters  # noqa: E402
from lingbot_map_ros.ros.tf_listener import TfLookup  # noqa: E402
from lingbot_map_ros.ros.worker import InferenceWorker  # noqa: E402

HW = (378, 518)


def synthetic_result(index: int, rgb: np.ndarray, rng: np.random.Generator, keyframe: bool) -> FrameResult:
    """A frame result as the session returns it: a camera moving along x over a slanted plane."""
    height, width = rgb.shape[:2]
    pose = np.eye(4)
    pose[0, 3] = 0.02 * index
    rows = np.linspace(1.5, 4.0, height, dtype=np.float32)[:, None]
    depth = (rows + 0.01 * rng.standard_normal((height, width))).astype(np.float32)
    conf = (1.0 + 4.0 * rng.random((height, width))).astype(np.float32)
    focal = 0.8 * width
    intrinsics = np.array([[focal, 0, width / 2], [0, focal, height / 2], [0, 0, 1.0]])
    return FrameResult(
        index=index, meta=None, is_keyframe=keyframe, phase=PHASE_STREAMING, pose_c2w=pose,
        intrinsics=intrinsics, depth=depth, depth_conf=conf, rgb=rgb, pose_enc=np.zeros(9, np.float32),
    )


class Handoff:
    """Two chained `InferenceWorker`s (callback -> inference -> publish thread); records the wall time from
    the first submit to the pick-up on the second worker."""

    def __init__(self) -> None:
        self.samples: list[float] = []
        self._done = threading.Event()
        self._publish = InferenceWorker(self._picked_up, queue_size=2, on_error=self._error, name="publish")
        self._infer = InferenceWorker(
            lambda item: self._publish.submit(item, block=True), queue_size=2, on_error=self._error
        )

    def _picked_up(self, start: float) -> None:
        self.samples.append(1e3 * (time.perf_counter() - start))
        self._done.set()

    @staticmethod
    def _error(item: object, exc: Exception) -> None:
        raise SystemExit(f"worker failed: {exc}")

    def run_once(self) -> None:
        self._done.clear()
        self._infer.submit(time.perf_counter())
        if not self._done.wait(5.0):
            raise SystemExit("queue handoff timed out")

    def stop(self) -> None:
        self._infer.stop()
        self._publish.stop()


def subscribe_all(
    node_name: str, outputs_node: str
) -> tuple[object, SingleThreadedExecutor, threading.Thread]:
    """A node subscribing to every per-frame output of ``outputs_node`` and /tf, spun on its own thread."""
    from nav_msgs.msg import Odometry
    from nav_msgs.msg import Path as PathMsg
    from sensor_msgs.msg import CameraInfo, Image, PointCloud2
    from tf2_msgs.msg import TFMessage

    node = rclpy.create_node(node_name)
    topics = {"odometry": Odometry, "path": PathMsg, "depth": Image, "camera_info": CameraInfo,
              "frame_cloud": PointCloud2}
    for topic, kind in topics.items():
        node.create_subscription(kind, f"/{outputs_node}/{topic}", lambda msg: None, FRAME_QOS)
    node.create_subscription(TFMessage, "/tf", lambda msg: None, 100)
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    thread = threading.Thread(target=executor.spin, daemon=True)
    thread.start()
    return node, executor, thread


def with_overrides(config: OutputConfig, overrides: list[str]) -> OutputConfig:
    """``FIELD=VALUE`` strings applied to ``config`` (values parsed as the field's current type)."""
    changes = {}
    for item in overrides:
        name, sep, value = item.partition("=")
        if not sep or not hasattr(config, name):
            raise SystemExit(f"--set expects FIELD=VALUE with an OutputConfig field, got {item!r}")
        kind = type(getattr(config, name))
        changes[name] = value.lower() in ("1", "true", "yes") if kind is bool else kind(value)
    return dataclasses.replace(config, **changes)


def path_message(outputs: MappingOutputs, header: Header) -> object:
    """The nav_msgs/Path that `publish` builds each frame from its pose history (serialised by rclpy)."""
    return PathMsg(header=header, poses=outputs.path_poses())


def timed(samples: dict[str, list[float]], name: str, fn, *args):
    start = time.perf_counter()
    out = fn(*args)
    samples.setdefault(name, []).append(1e3 * (time.perf_counter() - start))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--frames", type=int, default=300)
    parser.add_argument(
        "--warmup", type=int, default=1000, help="untimed frames first (default: the path reaches its 1,000)"
    )
    parser.add_argument("--encoding", default="rgb8", choices=("rgb8", "bgr8"))
    parser.add_argument("--subscribers", action="store_true")
    parser.add_argument("--keyframe-interval", type=int, default=1)
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="override an output option (OutputConfig field, e.g. path_max_length=100, map_stride=4)",
    )
    args = parser.parse_args()

    rclpy.init()
    node = rclpy.create_node("lingbot_map_overhead")
    declare_parameters(node)
    params = read_parameters(node)
    config = with_overrides(OutputConfig.from_params(params), args.set)
    outputs = MappingOutputs(node, config, TfLookup(node))
    subscriber = subscribe_all("overhead_subscriber", node.get_name()) if args.subscribers else None
    time.sleep(0.5 if subscriber else 0.0)  # discovery
    handoff = Handoff()
    path_publisher = node.create_publisher(PathMsg, "~/path_timing", FRAME_QOS)  # a copy, timed alone
    voxel_map = VoxelMap(config.voxel_map_config())
    rng = np.random.default_rng(0)
    images = [rng.integers(0, 256, size=(*HW, 3), dtype=np.uint8) for _ in range(8)]
    samples: dict[str, list[float]] = {}
    try:
        for index in range(args.warmup + args.frames):
            if index == args.warmup:
                samples.clear()
                handoff.samples.clear()
            rgb_in = images[index % len(images)]
            header = Header(stamp=Time(sec=index // 30, nanosec=(index % 30) * 33_000_000), frame_id="camera")
            encoded = rgb_in if args.encoding == "rgb8" else np.ascontiguousarray(rgb_in[..., ::-1])
            msg = rgb_to_image(encoded, header, args.encoding)
            rgb = timed(samples, "image_to_rgb", image_to_rgb, msg)
            handoff.run_once()
            result = synthetic_result(index, rgb, rng, keyframe=index % args.keyframe_interval == 0)
            start = time.perf_counter()
            xyz, colors = result.points(config.map_conf_threshold, config.map_stride)
            points_to_cloud(FrameChain(np.eye(4), camera_rest_pose()).world_points(xyz), colors, header)
            samples.setdefault("  points + PointCloud2 packing (part)", []).append(
                1e3 * (time.perf_counter() - start)
            )
            timed(samples, "  depth image message (part)", depth_to_image, result.depth, header)
            path = timed(samples, "  path message (part)", path_message, outputs, header)
            timed(samples, "  path publish (part)", path_publisher.publish, path)
            if result.is_keyframe:
                timed(samples, "  voxel-map insert, keyframes (part)", voxel_map.insert, xyz, colors)
            timed(samples, "publish (all outputs)", outputs.publish, result, header)
        samples["queue handoff x2"] = handoff.samples
    finally:
        handoff.stop()
        if subscriber is not None:
            subscriber[1].shutdown()
            subscriber[2].join(timeout=5.0)
            subscriber[0].destroy_node()
        outputs.destroy()
        node.destroy_node()
        rclpy.shutdown()

    print(
        f"\n## node overhead, {HW[1]}x{HW[0]} {args.encoding}, {args.frames} frames, keyframe interval "
        f"{args.keyframe_interval}, subscribers: {'yes' if args.subscribers else 'no'}, map_stride "
        f"{config.map_stride}, path_max_length {config.path_max_length}, publish_depth "
        f"{config.publish_depth}, frame_cloud {config.publish_frame_cloud}"
    )
    print("\n| stage | p50 ms | p90 ms | p99 ms |\n|---|---|---|---|")
    for name, values in samples.items():
        q = np.percentile(values, [50, 90, 99])
        print(f"| {name} | {q[0]:.3f} | {q[1]:.3f} | {q[2]:.3f} |")
    parts = ("image_to_rgb", "queue handoff x2", "publish (all outputs)")
    per_frame = [sum(values) for values in zip(*(samples[p] for p in parts), strict=True)]
    q = np.percentile(per_frame, [50, 90, 99])
    print(f"| **total per frame** (convert + handoffs + publish) | {q[0]:.3f} | {q[1]:.3f} | {q[2]:.3f} |")
    print(f"\nmean total {statistics.fmean(per_frame):.3f} ms; target <= 3 ms: "
          f"{'met' if q[0] <= 3.0 else 'NOT met'} at p50")


if __name__ == "__main__":
    main()
