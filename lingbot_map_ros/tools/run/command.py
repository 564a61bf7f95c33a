"""`lingbot-map-ros run BAG -o OUT`: its arguments and dispatch: one camera topic to `run_bag.run_bag`
(tools/run/bag.py, whose module doc is the command's description), several to `run_cameras.run_cameras`
(tools/run/cameras.py). Apart from both so that neither imports the other's caller.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

from lingbot_map_ros.tools.run import bag as run_bag
from lingbot_map_ros.tools.run.cameras import bag_camera_topics, run_cameras
from lingbot_map_ros.tools.run.options import RunConfig, add_run_options, run_config


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Register `run`."""
    p = subparsers.add_parser(
        "run",
        help="engine on a bag without DDS -> TUM, PLY, summary JSON, PNG",
        description=run_bag.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("bag", type=Path)
    p.add_argument("-o", "--output", type=Path, required=True, help="output folder (created)")
    p.add_argument(
        "--topics",
        nargs="+",
        default=None,
        metavar="TOPIC",
        help="several camera topics mapped together (default without --topic: every camera topic of the bag)",
    )
    add_run_options(p)
    p.add_argument(
        "--keep-frames",
        action="store_true",
        help="also write each posed frame's image and intrinsics (frames/, frames.json) for `export`",
    )
    p.add_argument(
        "--load",
        type=Path,
        default=None,
        metavar="SESSION",
        help="continue a saved session folder (docs/session.md) before the bag's frames",
    )
    p.add_argument(
        "--save",
        type=Path,
        default=None,
        metavar="SESSION",
        help="save the session to this new folder at the end (node: session.load_path loads it)",
    )
    p.set_defaults(func=main_args)


def main_args(args: argparse.Namespace) -> int:
    """Run `run` from parsed arguments."""
    config = run_config(args, args.bag, args.output)
    with torch_threads(config.threads):  # process-wide: set by this entry point, restored after the run
        return _run_topics(args, config)


@contextmanager
def torch_threads(threads: int | None) -> Iterator[None]:
    """``torch.set_num_threads(threads)`` for the block (None: unchanged); the previous count is restored
    after it."""
    import torch

    previous = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def _run_topics(args: argparse.Namespace, config: RunConfig) -> int:
    """`run` of one camera topic, or of several (tools/run/cameras.py)."""
    topics = args.topics or ([args.topic] if args.topic else None)
    if topics is None or len(topics) > 1:
        topics = topics or bag_camera_topics(args.bag)
        if len(topics) > 1:
            summary = run_cameras(config, topics)
            print(f"{summary['frames']} frames of {len(topics)} cameras, {summary['fps']:.2f} FPS")
            for name, camera in summary["cameras"].items():
                print(
                    f"  {name:10s} {camera['topic']}: {camera['posed']} posed, {camera['dropped']} "
                    f"dropped, {camera['map_points']} map points -> {args.output / name}"
                )
            return 0
    if args.topics:
        config = replace(config, topic=args.topics[0])
    result = run_bag.run_bag(config)
    print(
        f"{result.frames} frames: {len(result.stamps_s)} posed ({int(result.keyframe.sum())} keyframes), "
        f"{result.dropped} dropped, {result.fps:.2f} FPS, {result.map_points} map points"
        + run_bag.loop_line(result.loop_closure)
    )
    for name, path in result.files.items():
        print(f"  {name:10s} {path}")
    return 0
