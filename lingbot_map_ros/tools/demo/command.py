"""`lingbot-map-ros demo`: the whole job on one machine: camera bag -> node over DDS -> poses, map, report.

With no arguments it renders its own input (the synthetic textured room of `synthetic_scene`, with a
ground-truth trajectory), starts the mapping node (tiny preset, synthetic weights, CPU) as a child process
on a private DDS domain, replays the bag into it at the recorded rate, records the node's outputs, calls
`~/save_map`, stops the node with SIGINT and prints what happened. `--bag` / `--images` run it on your
data; `--checkpoint` loads real weights, and with a ground truth the Sim(3)-aligned ATE is reported.

Everything lands in OUTPUT/run_<time>/: node.log, outputs/ (recorded bag), map_*.ply, trajectory_*.tum,
demo.png and report.json (the synthetic scene is rendered once into OUTPUT/).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from contextlib import ExitStack
from pathlib import Path

from lingbot_map_ros.engine.face import PRESET_NAMES
from lingbot_map_ros.ros.dds_tools.client import ClientNode
from lingbot_map_ros.ros.dds_tools.mapping_monitor import MappingMonitor
from lingbot_map_ros.tools.bags.bag_io import CAMERA_INFO, COMPRESSED_IMAGE, camera_connection, open_bag
from lingbot_map_ros.tools.bags.make_bag import MakeBagConfig, image_files, read_images, write_camera_bag
from lingbot_map_ros.tools.bags.synthetic_scene import SceneConfig, write_scene_bag
from lingbot_map_ros.tools.demo.analysis import DemoOutcome, analyse, print_report
from lingbot_map_ros.tools.demo.config import DemoConfig, DemoInput, absolute_path
from lingbot_map_ros.tools.live.dds_env import isolated_dds_env
from lingbot_map_ros.tools.live.node_process import NodeProcess
from lingbot_map_ros.tools.live.progress import wait_until_done
from lingbot_map_ros.tools.live.record import RecordConfig, Recorder, node_output_topics
from lingbot_map_ros.tools.live.replay import ReplayConfig, replay

NODE_NAME = "lingbot_map"
DDS_VARIABLES = (
    "ROS_AUTOMATIC_DISCOVERY_RANGE",
    "ROS_DOMAIN_ID",
    "ROS_LOG_DIR",
    "FASTDDS_DEFAULT_PROFILES_FILE",
)

# Reliable KEEP_LAST history of the replay and of the node's image subscription. With 10, a burst of frames
# while the node's executor waits for the GIL (inference thread) overflowed the reader's history and DDS
# dropped frames before the node could count them (seen once in CI); 100 frames of the demo's sizes are
# at most ~15 MB.
DDS_HISTORY_DEPTH = 100


def prepare_input(config: DemoConfig, run_dir: Path) -> DemoInput:
    """Render the synthetic scene (cached in the output folder), convert --images, or open --bag."""
    ground_truth = config.ground_truth
    if config.bag is not None:
        bag, description = config.bag, f"bag {config.bag}"
    elif config.images is not None:
        files = image_files(config.images)
        bag = run_dir / "input"
        print(f"[demo] converting {len(files)} images from {config.images} into {bag}")
        write_camera_bag(
            MakeBagConfig(output=bag, rate_hz=config.rate_hz), read_images(files), total=len(files)
        )
        description = f"{len(files)} images from {config.images} at {config.rate_hz:g} Hz"
    else:
        scene = config.scene
        name = f"scene_{scene.width}x{scene.height}_{scene.frames}f_{config.rate_hz:g}hz"
        bag, ground_truth = config.output_dir / name, config.output_dir / f"{name}.gt.tum"
        if not (bag / "metadata.yaml").is_file() or not ground_truth.is_file():
            print(
                f"[demo] rendering the synthetic textured room ({scene.frames} frames, "
                f"{scene.width}x{scene.height}) into {bag}"
            )
            write_scene_bag(scene, bag, ground_truth, rate_hz=config.rate_hz)
        description = (
            f"synthetic textured room, {scene.frames} frames {scene.width}x{scene.height} at "
            f"{config.rate_hz:g} Hz ({bag})"
        )
    reader = open_bag(bag)
    try:
        camera = camera_connection(reader, config.topic)
        infos = tuple(sorted({c.topic for c in reader.connections if c.msgtype == CAMERA_INFO}))
    finally:
        reader.close()
    return DemoInput(bag, camera.topic, camera.msgtype, infos, ground_truth, description)


def node_parameters(config: DemoConfig, run_dir: Path, compressed: bool) -> dict[str, object]:
    """The node's parameters for the demo: reliable image QoS with a history deep enough for a busy machine
    (nothing lost on the way in; the node's bounded queue is then the only place frames are dropped, and it
    counts them)."""
    params: dict[str, object] = {
        "model.preset": config.preset,
        "model.device": config.device,
        "model.image_width": config.image_width,
        "output_dir": str(absolute_path(run_dir)),
        "queue_size": config.queue_size,
        "qos.reliability": "reliable",
        "qos.depth": DDS_HISTORY_DEPTH,
        "diagnostics_rate": 4.0,
        "image_transport": "compressed" if compressed else "raw",
    }
    if config.checkpoint is not None:
        params["model.checkpoint"] = str(absolute_path(config.checkpoint))
    return params


def run_demo(config: DemoConfig, env: dict[str, str]) -> DemoOutcome:
    """Run the demo with the DDS environment `env` (see `dds.isolated_dds_env`); returns the analysis."""
    run_dir = _new_run_dir(config.output_dir)
    try:
        source = prepare_input(config, run_dir)
    except ValueError:
        shutil.rmtree(run_dir, ignore_errors=True)  # nothing ran: leave no empty run folder behind
        raise
    compressed = source.msgtype == COMPRESSED_IMAGE
    remaps = {"image/compressed" if compressed else "image": source.topic}
    if source.info_topics:
        remaps["camera_info"] = source.info_topics[0]
    with ExitStack() as cleanup:  # unwinds in reverse: node first, rclpy last, also on errors
        client = ClientNode("lingbot_map_demo", private_context=True, spin_threads=2)
        cleanup.callback(client.close)
        recorder = Recorder(
            client, RecordConfig(output=run_dir / "outputs", topics=node_output_topics(NODE_NAME))
        )
        cleanup.callback(recorder.close)
        monitor = MappingMonitor(client.node, f"/{NODE_NAME}/odometry")
        cleanup.callback(monitor.close)
        started = time.monotonic()
        node = NodeProcess.start(
            run_dir / "node.log", node_parameters(config, run_dir, compressed), remaps, env=env
        )
        cleanup.callback(node.stop)
        print(
            f"[demo] node started (pid {node.proc.pid}, ROS_DOMAIN_ID {env['ROS_DOMAIN_ID']}, "
            f"log {node.log_path})"
        )
        node.wait_for_service(client, f"/{NODE_NAME}/save_map", timeout_s=config.timeout_s)
        print(
            f"[demo] node ready after {time.monotonic() - started:.1f} s; replaying {source.topic} "
            f"at x{config.replay_rate:g}"
        )
        topics = (source.topic, *source.info_topics)
        stats = replay(
            client,
            ReplayConfig(
                bag=source.bag,
                rate=config.replay_rate,
                topics=topics,
                qos="reliable",
                depth=DDS_HISTORY_DEPTH,
                wait_for_subscribers_s=30.0,
                await_topics=(source.topic,),
            ),
        )
        wait_until_done(monitor, stats.published[source.topic], node, deadline=started + config.timeout_s)
        response = client.call_trigger(f"/{NODE_NAME}/save_map", timeout_s=60.0)
        print(f"[demo] ~/save_map: {response.message}")
        exit_code = node.stop()
        record_stats = recorder.close()
    return analyse(
        config=config,
        run_dir=run_dir,
        source=source,
        replay_stats=stats,
        record_stats=record_stats,
        diagnostics=monitor.diagnostics,
        save_response=response,
        node_exit_code=exit_code,
    )


def _new_run_dir(output_dir: Path) -> Path:
    """OUTPUT/run_<local time>[_N], created and never shared with an earlier run."""
    output_dir.mkdir(parents=True, exist_ok=True)
    base = time.strftime("run_%Y%m%d_%H%M%S")
    for attempt in range(1, 1000):
        run_dir = output_dir / (base if attempt == 1 else f"{base}_{attempt}")
        try:
            run_dir.mkdir()
            return run_dir
        except FileExistsError:
            continue
    raise RuntimeError(f"cannot create a new run folder in {output_dir}")


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Register `demo`."""
    p = subparsers.add_parser(
        "demo",
        help="the main job: bag -> node over DDS -> poses, map, report",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    source = p.add_mutually_exclusive_group()
    source.add_argument("--bag", type=Path, default=None, help="your rosbag2 bag (default: synthetic scene)")
    source.add_argument("--images", type=Path, default=None, help="a folder of images (name order)")
    p.add_argument("--topic", default=None, help="camera topic of --bag (default: its only camera topic)")
    p.add_argument("--ground-truth", type=Path, default=None, help="TUM ground truth of --bag / --images")
    p.add_argument("-o", "--output-dir", type=Path, default=Path("lingbot_map_demo"))
    p.add_argument("--checkpoint", type=Path, default=None, help="model weights (default: synthetic)")
    p.add_argument("--preset", choices=PRESET_NAMES, default="tiny")
    p.add_argument("--device", default="cpu", help="torch device of the node (cpu, cuda, auto)")
    p.add_argument("--width", type=int, default=224, help="network input width (multiple of 14)")
    p.add_argument("--frames", type=int, default=SceneConfig.frames, help="synthetic scene frames")
    p.add_argument("--fps", type=float, default=5.0, help="frame rate of the scene / --images")
    p.add_argument("--replay-rate", type=float, default=1.0, help="replay speed factor")
    p.add_argument("--queue-size", type=int, default=2, help="node's frame queue (full: oldest dropped)")
    p.add_argument("--timeout", type=float, default=300.0, help="give up after this many seconds")
    p.set_defaults(func=main_args)


def main_args(args: argparse.Namespace) -> int:
    """Run `demo` from parsed arguments."""
    config = DemoConfig(
        output_dir=args.output_dir,
        bag=args.bag,
        images=args.images,
        topic=args.topic,
        ground_truth=args.ground_truth,
        checkpoint=args.checkpoint,
        preset=args.preset,
        device=args.device,
        image_width=args.width,
        scene=SceneConfig(frames=args.frames),
        rate_hz=args.fps,
        replay_rate=args.replay_rate,
        queue_size=args.queue_size,
        timeout_s=args.timeout,
    )
    env = isolated_dds_env()
    os.environ.update({k: env[k] for k in DDS_VARIABLES if k in env})  # this process joins the same domain
    outcome = run_demo(config, env)
    print_report(outcome, sys.stdout)
    return 0 if outcome.ok else 1
