"""Per-frame cost of the ROS node beyond the model, on the CPU (no GPU, no model): real rclpy / Fast DDS.

Since issue 13 the node has two paths per frame (ros/outputs/mapping.py, ros/outputs/map_worker.py), timed
separately on synthetic 518x378 frames with the node's default parameters, fed at a camera rate (``--rate``,
default 30 Hz):

* the **pose path** (image -> pose outputs sent), on the threads that carry it in the node:
  ``image_to_rgb`` (the subscription callback), ``queue handoff x2`` (`LaneWorker.submit` -> the worker
  thread picks it up, twice: callback -> inference thread -> pose stage) and ``publish: pose outputs``
  (the pose stage: `CameraTracker.track` + `MappingOutputs.publish`: TF lookup, `Mapper.locate`, TF +
  odometry + camera_pose + camera_info + depth image on real publishers, the map work queued).
  Indented: the depth image message alone.
* the **map thread** of the camera, per work (`MapWorker`: `Mapper.integrate` = the frame's points, voxel-map
  and grid insert of a keyframe, then ``~/frame_cloud`` packed and published), running concurrently;
  its queue's drops are counted.
* the **timers** (`~/path` at `path.publish_rate` with `path.max_length` poses, `~/map_cloud`, `~/grid`), on
  a timer thread as in the node.

``--subscribers`` adds a subscriber node (same process, own thread) on every output so DDS delivers each
message (as with RViz attached); it competes for the GIL, so those numbers are an upper bound.
``--switch-interval`` is Python's GIL switch interval (default: the node's on CUDA, ros/lifecycle/pipeline.py;
Python's own default is 5 ms). The session's own host stages (pre-processing, decoding) are part of
benchmarks/e2e.py, not of this script. Usage::

    .venv/bin/python benchmarks/node_overhead.py --frames 300 [--rate 30] [--subscribers] [--encoding bgr8]
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import threading
import time

import numpy as np
from node_child import use_isolated_dds

use_isolated_dds()
import rclpy  # noqa: E402  (after the DDS environment above)
from builtin_interfaces.msg import Time  # noqa: E402
from rclpy.executors import SingleThreadedExecutor  # noqa: E402
from std_msgs.msg import Header  # noqa: E402

from lingbot_map_ros.engine.lane_worker import LaneWorker  # noqa: E402
from lingbot_map_ros.engine.loop import Keyframe, LoopCloser, Verification  # noqa: E402
from lingbot_map_ros.engine.result import PHASE_STREAMING, FrameResult  # noqa: E402
from lingbot_map_ros.ros.messages.conversions import depth_to_image, image_to_rgb, rgb_to_image  # noqa: E402
from lingbot_map_ros.ros.messages.poses import stamp_seconds  # noqa: E402
from lingbot_map_ros.ros.outputs.config import FRAME_QOS, OutputConfig  # noqa: E402
from lingbot_map_ros.ros.outputs.loop import LoopOutputs  # noqa: E402
from lingbot_map_ros.ros.outputs.mapping import MappingOutputs  # noqa: E402
from lingbot_map_ros.ros.params.declare import (  # noqa: E402
    SPECS,
    declare_parameters,
    field_name,
    loop_closure_config,
    read_parameters,
)
from lingbot_map_ros.ros.tf.listener import TfLookup  # noqa: E402
from lingbot_map_ros.tools.loop.loop_oracle import image_descriptor  # noqa: E402

HW = (378, 518)
PUBLISH = "publish: pose outputs (+ map work queued)"


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
        index=index,
        meta=None,
        is_keyframe=keyframe,
        phase=PHASE_STREAMING,
        pose_c2w=pose,
        intrinsics=intrinsics,
        depth=depth,
        depth_conf=conf,
        rgb=rgb,
        pose_enc=np.zeros(9, np.float32),
    )


def bench_closer(params: object) -> LoopCloser:
    """The node's loop closer without a model: thumbnail descriptors (tools/loop/loop_oracle.py), a verifier
    that rejects every candidate (there is no model to relate two frames); keyframes, map and search as in the
    node, on the closer's own thread."""

    def reject(a: Keyframe, b: Keyframe) -> Verification:
        return Verification(a.key, b.key, False, "no model in this benchmark", None, 0.0, 0.0, 0.0)

    config = loop_closure_config(lambda name: getattr(params, field_name(name)))
    return LoopCloser(config, HW[1], image_descriptor, reject)


class Handoff:
    """Two chained `LaneWorker`s (callback -> inference -> publish thread); records the wall time from
    the first submit to the pick-up on the second worker."""

    def __init__(self) -> None:
        self.samples: list[float] = []
        self._done = threading.Event()
        self._publish = LaneWorker(self._picked_up, queue_size=2, on_error=self._error, name="publish")
        self._infer = LaneWorker(
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


class TimerThread:
    """The node's output timers on one thread (the node's timers share one callback group): `~/path`,
    `~/map_cloud` and `~/grid` at their rates; records how long each call that published took (ms)."""

    def __init__(self, outputs: MappingOutputs, rates: dict[str, float]) -> None:
        self.samples: dict[str, list[float]] = {name: [] for name in rates}
        now = self._now = time.monotonic()
        self._calls = {
            "path": outputs.publish_path,
            "map_cloud": lambda: outputs.publish_map(outputs.last_stamp or Time()) >= 0,
            "grid": outputs.publish_grid,
        }
        self._periods = {name: 1.0 / rate for name, rate in rates.items()}
        self._due = {name: now + period for name, period in self._periods.items()}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="timers", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(max(0.0, min(self._due.values()) - time.monotonic())):
            for name, due in self._due.items():
                if time.monotonic() >= due:
                    start = time.perf_counter()
                    if self._calls[name]():
                        self.samples[name].append(1e3 * (time.perf_counter() - start))
                    self._due[name] = due + self._periods[name]

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def subscribe_all(
    node_name: str, outputs_node: str
) -> tuple[object, SingleThreadedExecutor, threading.Thread]:
    """A node subscribing to every per-frame output of ``outputs_node`` and /tf, spun on its own thread."""
    from nav_msgs.msg import Odometry
    from nav_msgs.msg import Path as PathMsg
    from sensor_msgs.msg import CameraInfo, Image, PointCloud2
    from tf2_msgs.msg import TFMessage

    node = rclpy.create_node(node_name)
    topics = {
        "odometry": Odometry,
        "path": PathMsg,
        "depth": Image,
        "camera_info": CameraInfo,
        "frame_cloud": PointCloud2,
    }
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
        if not sep or not hasattr(config.params, name):
            raise SystemExit(f"--set expects FIELD=VALUE with a NodeParams field, got {item!r}")
        kind = type(getattr(config.params, name))
        changes[name] = value.lower() in ("1", "true", "yes") if kind is bool else kind(value)
    return config.with_params(**changes)


def track_and_publish(outputs: MappingOutputs, result: FrameResult, header: Header) -> None:
    """What the camera pipeline's pose stage does with one result (engine/camera_pipeline.py): track it,
    then publish it."""
    tracked = outputs.state.track(result, outputs.camera_frame(header), stamp_seconds(header.stamp))
    outputs.publish(result, header, tracked)
    outputs.state.posed(result, tracked, tracked.frame.stamp_s)  # a keyframe to the closer's thread


def timed(samples: dict[str, list[float]], name: str, fn, *args):
    start = time.perf_counter()
    out = fn(*args)
    samples.setdefault(name, []).append(1e3 * (time.perf_counter() - start))
    return out


def row(name: str, values: list[float]) -> str:
    if not values:
        return f"| {name} | – | – | – |"
    q = np.percentile(values, [50, 90, 99])
    return f"| {name} | {q[0]:.3f} | {q[1]:.3f} | {q[2]:.3f} |"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--frames", type=int, default=300)
    parser.add_argument(
        "--warmup", type=int, default=1000, help="untimed frames first (default: the path reaches its 1,000)"
    )
    parser.add_argument("--rate", type=float, default=30.0, help="frames per second fed (0: back to back)")
    parser.add_argument("--encoding", default="rgb8", choices=("rgb8", "bgr8"))
    parser.add_argument("--subscribers", action="store_true")
    parser.add_argument("--keyframe-interval", type=int, default=1)
    parser.add_argument("--no-loop-closure", action="store_true", help="without the loop closer's thread")
    parser.add_argument(
        "--switch-interval",
        type=float,
        default=SPECS["inference.gil_switch_interval_ms"].default / 1e3,  # the node's, on CUDA
        help="seconds",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="override a parameter of the outputs (NodeParams field, e.g. path_max_length=100, map_stride=4)",
    )
    args = parser.parse_args()
    sys.setswitchinterval(args.switch_interval)

    rclpy.init()
    node = rclpy.create_node("lingbot_map_overhead")
    declare_parameters(node)
    params = read_parameters(node)
    config = with_overrides(OutputConfig.from_params(params), args.set)
    outputs = MappingOutputs(node, config, TfLookup(node))
    if params.loop_closure_enabled and not args.no_loop_closure:  # the closer's thread runs alongside
        outputs.loop = LoopOutputs(node, outputs, "~/")
        outputs.state.outputs = outputs.loop
        outputs.state.attach_loop(bench_closer(params), threaded=True)
    subscriber = subscribe_all("overhead_subscriber", node.get_name()) if args.subscribers else None
    time.sleep(0.5 if subscriber else 0.0)  # discovery
    handoff = Handoff()
    rates = {"path": params.path_publish_rate, "map_cloud": params.map_publish_rate, "grid": params.grid_rate}
    timers = TimerThread(outputs, rates)
    rng = np.random.default_rng(0)
    images = [rng.integers(0, 256, size=(*HW, 3), dtype=np.uint8) for _ in range(8)]
    samples: dict[str, list[float]] = {}
    pose_path: list[float] = []
    period = 1.0 / args.rate if args.rate > 0 else 0.0
    next_frame = time.monotonic()
    try:
        for index in range(args.warmup + args.frames):
            if index == args.warmup:
                samples.clear()
                handoff.samples.clear()
                outputs.map.drain(30.0)
                before = outputs.map.stats()
                for values in timers.samples.values():
                    values.clear()
            rgb_in = images[index % len(images)]
            header = Header(stamp=Time(sec=index // 30, nanosec=(index % 30) * 33_000_000), frame_id="camera")
            encoded = rgb_in if args.encoding == "rgb8" else np.ascontiguousarray(rgb_in[..., ::-1])
            msg = rgb_to_image(encoded, header, args.encoding)
            result = synthetic_result(index, encoded, rng, keyframe=index % args.keyframe_interval == 0)
            time.sleep(max(0.0, next_frame - time.monotonic()))  # the camera's rate
            next_frame = max(next_frame + period, time.monotonic() - period)
            start = len(handoff.samples)
            rgb = timed(samples, "image_to_rgb", image_to_rgb, msg)
            handoff.run_once()
            result = dataclasses.replace(result, rgb=rgb)
            timed(samples, PUBLISH, track_and_publish, outputs, result, header)
            if index >= args.warmup:
                parts = (samples["image_to_rgb"][-1], *handoff.samples[start:], samples[PUBLISH][-1])
                pose_path.append(sum(parts))
                timed(samples, "  depth image message (part)", depth_to_image, result.depth, header)
        samples["queue handoff x2"] = handoff.samples
        drained = outputs.map.drain(60.0)
    finally:
        timers.stop()
        handoff.stop()
        if subscriber is not None:
            subscriber[1].shutdown()
            subscriber[2].join(timeout=5.0)
            subscriber[0].destroy_node()
        after = outputs.map.stats()
        keyframe_ms, other_ms = outputs.map.recent_ms(True), outputs.map.recent_ms(False)
        outputs.destroy()
        node.destroy_node()
        rclpy.shutdown()

    print(
        f"\n## node overhead, {HW[1]}x{HW[0]} {args.encoding}, {args.frames} frames at "
        f"{f'{args.rate:g} Hz' if period else 'full speed'}, keyframe interval {args.keyframe_interval}, "
        f"subscribers: {'yes' if args.subscribers else 'no'}, GIL switch interval "
        f"{1e3 * args.switch_interval:g} ms, map_stride {config.map_stride}, path_max_length "
        f"{config.path_max_length}, path.publish_rate "
        f"{params.path_publish_rate:g} Hz, publish_depth {config.publish_depth}, frame_cloud "
        f"{config.publish_frame_cloud}, loop closure {'on' if outputs.loop else 'off'}"
    )
    print("\n| stage | p50 ms | p90 ms | p99 ms |\n|---|---|---|---|")
    for name in ("image_to_rgb", "queue handoff x2", PUBLISH, "  depth image message (part)"):
        print(row(name, samples[name]))
    print(row("**pose path per frame** (image -> pose outputs sent)", pose_path))
    print(row(f"map thread per keyframe (integrate + frame cloud), last {len(keyframe_ms)}", keyframe_ms))
    if other_ms:
        print(row(f"map thread per other frame (frame cloud), last {len(other_ms)}", other_ms))
    for name, values in timers.samples.items():
        print(row(f"timer: ~/{name} publish ({len(values)} calls)", values))
    submitted = after["map_worker.submitted"] - before["map_worker.submitted"]
    dropped = after["map_worker.dropped"] - before["map_worker.dropped"]
    print(
        f"\nmap thread: {submitted} works queued, {dropped} dropped (queue of {config.map_queue_size}), "
        f"drained at the end: {drained}"
    )
    q50 = float(np.percentile(pose_path, 50))
    print(
        f"pose path mean {statistics.fmean(pose_path):.3f} ms; target <= 3 ms: "
        f"{'met' if q50 <= 3.0 else 'NOT met'} at p50 ({q50:.3f} ms)"
    )


if __name__ == "__main__":
    main()
