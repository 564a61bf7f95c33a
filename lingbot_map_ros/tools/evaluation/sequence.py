"""`lingbot-map-ros evaluate BAG REFERENCE -o OUT`: ATE of a user's sequence with and without loop closure.

The bag's camera frames go through the engine (the preset's model: a checkpoint with ``--checkpoint``, else
seeded synthetic weights, which make the numbers meaningless) and each result through two engines of a camera
(`CameraState`, engine/camera_state.py, as `run` and the node map with): one without loop closure and one
closing loops (descriptors from the model's own encoder tokens, verification by its two-frame pass:
docs/loop_closure.md; the node's one correction rule, engine/correction.py; `--no-loop-closure`: none).
Written to OUT: ``trajectory_stream.tum`` (no loop closure), ``trajectory_loop_closed.tum`` (loop-corrected,
as `run` writes it) and ``evaluate.json``: ``ate_without`` / ``ate_with`` (RMSE of camera centres against
REFERENCE, a TUM file or recorded bag, after ``--align``), the matched poses, the loop closer's counters and
``loops`` (accepted, rejected, keyframes, correction sizes). Both trajectories are in the `map` frame of `run`
(REP-103).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from lingbot_map_ros.engine.face import CameraState, LoopClosureConfig, loop_closer, write_tum
from lingbot_map_ros.tools.bags.bag_io import iter_frames
from lingbot_map_ros.tools.evaluation.ate import load_trajectory
from lingbot_map_ros.tools.evaluation.trajectory import ALIGNMENTS, check_trajectory, matched_ate
from lingbot_map_ros.tools.run.bag import PosedFrames, bag_camera_topic, build_session, track_frame
from lingbot_map_ros.tools.run.options import RunConfig, add_run_options, run_config


def evaluate_sequence(
    config: RunConfig,
    reference: Path,
    loop_config: LoopClosureConfig | None = None,
    alignment: str = "sim3",
    max_diff_s: float = 0.02,
) -> dict[str, object]:
    """Run the bag of `config` without and with loop closure (module doc); write the two trajectories and the
    JSON to ``config.output_dir``; return the JSON's content."""
    ref_stamps, ref_rows = load_trajectory(reference)  # checked before the sequence runs
    check_trajectory(ref_stamps, ref_rows, f"reference {reference}")
    topic, _ = bag_camera_topic(config)
    session = build_session(config)
    stream, closing = CameraState(config.mapper_config()), CameraState(config.mapper_config())
    if config.loop_closure:
        closer = loop_closer(loop_config or LoopClosureConfig(), config.image_width, session.model)
        closing.attach_loop(closer, threaded=False)
    without, with_loops, stamps_ns = PosedFrames(), PosedFrames(), []
    for frame in iter_frames(config.bag, topic, config.max_frames):
        for result in session.push(frame.rgb, meta=frame.stamp_ns):
            stamps_ns.append(int(result.meta))
            track_frame(stream, result, without)
            track_frame(closing, result, with_loops)
    if len(stamps_ns) < 3:
        raise ValueError(f"topic {topic} of bag {config.bag}: {len(stamps_ns)} posed frames, need >= 3")
    out = config.output_dir
    out.mkdir(parents=True, exist_ok=True)
    stamps = np.array(stamps_ns, np.int64)
    files = {
        "without": write_tum(out / "trajectory_stream.tum", stamps, np.array(without.poses)),
        "with": write_tum(out / "trajectory_loop_closed.tum", stamps, np.array(with_loops.poses)),
    }
    ates = {}
    for name, path in files.items():
        est_stamps, est_rows = load_trajectory(path)
        ates[name] = matched_ate(est_stamps, est_rows, ref_stamps, ref_rows, max_diff_s, alignment)
    summary = {
        "bag": str(config.bag),
        "topic": topic,
        "reference": str(reference),
        "weights": "synthetic" if config.checkpoint is None else str(config.checkpoint),
        "alignment": alignment,
        "posed": len(stamps_ns),
        "matched": ates["without"].matched,
        "ate_without": ates["without"].rmse,
        "ate_with": ates["with"].rmse,
        "loop_closure": closing.loop_stats(),
        "loops": closing.loop_summary(),
        "files": {name: path.name for name, path in files.items()},
    }
    (out / "evaluate.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Register `evaluate`."""
    p = subparsers.add_parser(
        "evaluate",
        help="ATE of a sequence with and without loop closure",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("bag", type=Path)
    p.add_argument("reference", type=Path, help="ground truth: TUM file or recorded bag")
    p.add_argument("-o", "--output", type=Path, required=True, help="output folder (created)")
    p.add_argument("--align", choices=ALIGNMENTS, default="sim3")
    p.add_argument("--max-diff", type=float, default=0.02, help="stamp association tolerance in seconds")
    add_run_options(p)
    p.set_defaults(func=main_args)


def main_args(args: argparse.Namespace) -> int:
    """Run `evaluate` from parsed arguments."""
    config = run_config(args, args.bag, args.output)
    summary = evaluate_sequence(config, args.reference, alignment=args.align, max_diff_s=args.max_diff)
    stats = summary["loop_closure"] or {"verified": 0, "rejected": 0}
    print(
        f"{summary['posed']} posed frames, {summary['matched']} matched ({args.align}): ATE without loop "
        f"closure {summary['ate_without']:.6g}, with {summary['ate_with']:.6g} (units of the reference); "
        f"loops verified {stats['verified']:.0f}, rejected {stats['rejected']:.0f}; "
        f"weights {summary['weights']}"
    )
    if args.checkpoint is None:
        print("note: synthetic weights (no --checkpoint): the numbers say nothing about accuracy")
    print(f"  {args.output / 'evaluate.json'}")
    return 0
