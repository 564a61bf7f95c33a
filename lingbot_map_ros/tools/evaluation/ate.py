"""`lingbot-map-ros ate ESTIMATE REFERENCE`: absolute trajectory error between two trajectories.

Each side is a TUM file (e.g. `~/save_map`'s trajectory, `run`'s trajectory.tum, a ground truth) or a
rosbag2 bag recorded with `lingbot-map-ros record` (its nav_msgs/Odometry topic: header stamp, pose). Poses
are matched by stamp; the estimate is aligned to the reference with a similarity (`--align sim3`, the
monocular default), a rigid motion (`se3`) or not at all (`none`: e.g. two replays of one bag through the
same model, which should agree to rounding).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from lingbot_map_ros.engine.offline import read_tum
from lingbot_map_ros.tools.bags.bag_io import BagError, open_bag, ros2_typestore
from lingbot_map_ros.tools.evaluation.trajectory import ALIGNMENTS, AteResult, matched_ate
from lingbot_map_ros.tools.run.report import TOP_VIEW, plot_alignment

ODOMETRY = "nav_msgs/msg/Odometry"


def load_trajectory(path: Path, topic: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Stamps [N] float64 s and TUM rows [N, 7] (tx ty tz qx qy qz qw) of a TUM file or a bag's odometry."""
    path = Path(path)
    if path.is_file():
        return read_tum(path)
    reader = open_bag(path)
    try:
        odometry = [c for c in reader.connections if c.msgtype == ODOMETRY]
        chosen = [c for c in odometry if topic is None or c.topic == topic]
        if len({c.topic for c in chosen}) != 1:
            raise BagError(
                f"bag {path} has odometry topics {sorted({c.topic for c in odometry}) or 'none'}; "
                + ("pick one with --topic" if topic is None else f"not {topic}")
            )
        ts = ros2_typestore()
        stamps, rows = [], []
        for conn, _, raw in reader.messages(connections=chosen):
            msg = ts.deserialize_cdr(raw, conn.msgtype)
            p, q = msg.pose.pose.position, msg.pose.pose.orientation
            stamps.append(msg.header.stamp.sec + msg.header.stamp.nanosec * 1e-9)
            rows.append((p.x, p.y, p.z, q.x, q.y, q.z, q.w))
    finally:
        reader.close()
    if not rows:
        raise BagError(f"odometry topic {chosen[0].topic} of bag {path} holds no messages")
    return np.array(stamps), np.array(rows, dtype=np.float64)


def compare(
    estimate: Path,
    reference: Path,
    alignment: str = "sim3",
    max_diff_s: float = 0.02,
    topic: str | None = None,
) -> tuple[AteResult, np.ndarray, np.ndarray]:
    """ATE of `estimate` against `reference`, and both centre tracks ([N, 3] aligned estimate, [M, 3])."""
    stamps_e, rows_e = load_trajectory(estimate, topic)
    stamps_r, rows_r = load_trajectory(reference, topic)
    result = matched_ate(stamps_e, rows_e, stamps_r, rows_r, max_diff_s, alignment)
    return result, result.alignment.apply_points(rows_e[:, :3]), rows_r[:, :3]


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Register `ate`."""
    p = subparsers.add_parser(
        "ate",
        help="trajectory error between TUM files / recorded bags",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("estimate", type=Path, help="TUM file or recorded bag")
    p.add_argument("reference", type=Path, help="TUM file or recorded bag (e.g. ground truth)")
    p.add_argument("--align", choices=ALIGNMENTS, default="sim3")
    p.add_argument("--max-diff", type=float, default=0.02, help="stamp association tolerance in seconds")
    p.add_argument("--topic", default=None, help="odometry topic of a bag (default: its only one)")
    p.add_argument("--plot", type=Path, default=None, help="write a PNG of both tracks from above")
    p.add_argument(
        "--frame",
        choices=sorted(TOP_VIEW),
        default="ros",
        help="axes of the reference for the plot: ros (map, z up) or optical (y down)",
    )
    p.set_defaults(func=main_args)


def main_args(args: argparse.Namespace) -> int:
    """Run `ate` from parsed arguments."""
    result, estimate, reference = compare(
        args.estimate, args.reference, args.align, args.max_diff, args.topic
    )
    print(
        f"ATE ({args.align} alignment, {result.matched} matched poses, units of the reference): "
        f"RMSE {result.rmse:.6g}, mean {result.mean:.6g}, median {result.median:.6g}, "
        f"max {result.max:.6g}; alignment scale {result.alignment.scale:.6g}"
    )
    if args.plot is not None:
        title = f"ATE RMSE {result.rmse:.4g} ({args.align}, {result.matched} poses)"
        path = plot_alignment(args.plot, estimate, reference, title, args.frame)
        print(f"plot: {path}")
    return 0
