"""What the demo measured: frame accounting, stamps, latency, map, ATE; the report it prints and writes.

Latency here is end to end: from the moment the replay published a frame to the moment its odometry came
back over DDS (both clocks are this process's system clock).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

import numpy as np
from rosbags.rosbag2 import Reader

from lingbot_map_ros.engine.face import quat_xyzw_to_matrix
from lingbot_map_ros.engine.offline import read_ply, read_tum
from lingbot_map_ros.tools.bags.bag_io import ros2_typestore
from lingbot_map_ros.tools.evaluation.trajectory import absolute_trajectory_error, associate
from lingbot_map_ros.tools.live.record import RecordStats
from lingbot_map_ros.tools.live.replay import ReplayStats
from lingbot_map_ros.tools.run.report import latency_summary, plot_run, write_json

if TYPE_CHECKING:
    from lingbot_map_ros.tools.demo.config import DemoConfig, DemoInput


@dataclass
class DemoOutcome:
    """The numbers and files of one demo run (`report.json` holds the same)."""

    description: str
    model: str
    sent: int
    received: int
    posed: int
    dropped: int
    rejected: int
    failed: int
    pending_anchor: int
    stamps_match: bool
    throughput_fps: float
    node_fps: float
    latency_ms: dict[str, float]
    map_points: int
    trajectory_poses: int
    node_exit_code: int
    recorded: dict[str, int]
    ate: dict[str, float] | None = None
    ate_note: str = ""
    files: dict[str, str] = field(default_factory=dict)

    @property
    def accounted(self) -> bool:
        """Every sent frame is posed, or counted as dropped / rejected / failed / waiting for anchors."""
        return self.posed + self.dropped + self.rejected + self.failed + self.pending_anchor == self.sent

    @property
    def ok(self) -> bool:
        """The run is consistent end to end."""
        return (
            self.accounted
            and self.stamps_match
            and self.node_exit_code == 0
            and self.posed > 0
            and self.trajectory_poses == self.posed
            and self.map_points > 0
        )


def _stamps_and_log_times(bag: Path, topic: str) -> tuple[list[int], list[int]]:
    """Header stamps (ns) and log times (ns) of every message on `topic`, in log order."""
    ts = ros2_typestore()
    stamps, log_times = [], []
    with Reader(bag) as reader:
        conns = [c for c in reader.connections if c.topic == topic]
        for conn, log_time, raw in reader.messages(connections=conns):
            stamp = ts.deserialize_cdr(raw, conn.msgtype).header.stamp
            stamps.append(stamp.sec * 1_000_000_000 + stamp.nanosec)
            log_times.append(log_time)
    return stamps, log_times


def _read_trajectory(tum: Path | None) -> tuple[np.ndarray, np.ndarray]:
    """Stamps [N] and rows [N, 7] of a TUM file; empty arrays for no file or a file without poses."""
    lines = tum.read_text().splitlines() if tum is not None else []
    if not any(line.strip() and not line.startswith("#") for line in lines):
        return np.zeros(0), np.zeros((0, 7))
    return read_tum(tum)


def _newest(run_dir: Path, pattern: str) -> Path | None:
    found = sorted(run_dir.glob(pattern), key=lambda p: p.stat().st_mtime)
    return found[-1] if found else None


def analyse(
    config: DemoConfig,
    run_dir: Path,
    source: DemoInput,
    replay_stats: ReplayStats,
    record_stats: RecordStats,
    diagnostics: dict[str, str],
    save_response: object,
    node_exit_code: int,
) -> DemoOutcome:
    """Compare what went in with what came out, write demo.png and report.json."""
    input_stamps, _ = _stamps_and_log_times(source.bag, source.topic)
    sent_times = replay_stats.publish_times_ns[source.topic]
    publish_time = dict(zip(input_stamps, sent_times, strict=True))
    odom_stamps, odom_times = _stamps_and_log_times(run_dir / "outputs", "/lingbot_map/odometry")
    stamps_match = set(odom_stamps) <= set(publish_time) and odom_stamps == sorted(odom_stamps)
    latency = np.array(
        [
            (t - publish_time[s]) / 1e6 if s in publish_time else np.nan
            for s, t in zip(odom_stamps, odom_times, strict=True)
        ]
    )
    span_s = (max(odom_times) - min(sent_times)) / 1e9 if odom_times else 0.0

    def counter(key: str) -> int:
        return int(float(diagnostics.get(key, "0")))

    ply, tum = _newest(run_dir, "map_*.ply"), _newest(run_dir, "trajectory_*.tum")
    map_points = len(read_ply(ply)[0]) if ply else 0
    stamps, rows = _read_trajectory(tum)
    weights = "synthetic weights" if config.checkpoint is None else f"checkpoint {config.checkpoint}"
    outcome = DemoOutcome(
        description=source.description,
        model=f"preset {config.preset}, {weights}, {config.device}, width {config.image_width}",
        sent=len(sent_times),
        received=counter("frames_received"),
        posed=len(odom_stamps),
        dropped=counter("frames_dropped"),
        rejected=counter("rejected_total"),
        failed=counter("failed_total"),
        pending_anchor=counter("session.pending_anchor_frames"),
        stamps_match=stamps_match,
        throughput_fps=len(odom_stamps) / span_s if span_s > 0 else 0.0,
        node_fps=float(diagnostics.get("fps", "0")),
        latency_ms=latency_summary(latency),
        map_points=map_points,
        trajectory_poses=len(stamps),
        node_exit_code=node_exit_code,
        recorded=dict(sorted(record_stats.recorded.items())),
    )
    outcome.files = {
        "run": str(run_dir),
        "input": str(source.bag),
        "recording": str(run_dir / "outputs"),
        "node_log": str(run_dir / "node.log"),
    }
    if ply:
        outcome.files["map"] = str(ply)
    if tum:
        outcome.files["trajectory"] = str(tum)
    reference = None
    if source.ground_truth is not None and tum is not None and len(stamps) >= 3:
        if config.checkpoint is None:
            outcome.ate_note = "not computed: synthetic weights give no real trajectory (pass --checkpoint)"
        else:
            result = absolute_trajectory_error(tum, source.ground_truth)
            outcome.ate = {
                "rmse": result.rmse,
                "mean": result.mean,
                "median": result.median,
                "max": result.max,
                "matched": result.matched,
            }
            _, gt_rows = read_tum(source.ground_truth)
            align = result.alignment  # estimate -> ground truth; drawn the other way round
            reference = (gt_rows[:, :3] - align.translation) @ align.rotation / align.scale
    elif source.ground_truth is None:
        outcome.ate_note = "no ground truth (pass --ground-truth with --bag / --images)"
    if len(stamps):
        poses = np.tile(np.eye(4), (len(stamps), 1, 1))
        poses[:, :3, :3], poses[:, :3, 3] = quat_xyzw_to_matrix(rows[:, 3:]), rows[:, :3]
        lat = np.full(len(stamps), np.nan)
        pairs = associate(stamps, np.array(odom_stamps) / 1e9, max_diff_s=1e-3)
        lat[pairs[:, 0]] = latency[pairs[:, 1]]
        outcome.files["plot"] = str(
            plot_run(
                run_dir / "demo.png",
                poses,
                lat,
                np.ones(len(stamps), bool),
                f"demo: {outcome.posed}/{outcome.sent} frames posed, {outcome.model}",
                reference=reference,
                frame="ros",
                latency_title="latency: publish -> odometry (DDS + queue + model)",
            )
        )
    outcome.files["report"] = str(run_dir / "report.json")
    write_json(
        run_dir / "report.json",
        {
            **asdict(outcome),
            "accounted": outcome.accounted,
            "ok": outcome.ok,
            "save_map": getattr(save_response, "message", ""),
        },
    )
    return outcome


def print_report(outcome: DemoOutcome, out: TextIO) -> None:
    """The short human report of a demo run."""
    lat = outcome.latency_ms
    lines = [
        "",
        f"LingBot-Map demo: {'OK' if outcome.ok else 'PROBLEMS (see below)'}",
        f"  input       {outcome.description}",
        f"  model       {outcome.model}",
        f"  frames      sent {outcome.sent}, received {outcome.received}, posed {outcome.posed}, "
        f"dropped {outcome.dropped} (node queue full), rejected {outcome.rejected}, failed {outcome.failed}, "
        f"waiting for anchors {outcome.pending_anchor} -> "
        f"{'all accounted for' if outcome.accounted else 'NOT all accounted for'}",
        "  stamps      "
        + ("every output stamp equals its input stamp" if outcome.stamps_match else "MISMATCH"),
        f"  speed       {outcome.throughput_fps:.1f} posed frames/s end to end, "
        f"latency publish->odometry mean {lat.get('mean', float('nan')):.0f} ms, "
        f"p95 {lat.get('p95', float('nan')):.0f} ms",
        f"  map         {outcome.map_points} points  {outcome.files.get('map', '(not saved)')}",
        f"  trajectory  {outcome.trajectory_poses} poses  {outcome.files.get('trajectory', '(not saved)')}",
        "  recorded    "
        + ", ".join(f"{t.rsplit('/', 1)[-1]} {n}" for t, n in outcome.recorded.items())
        + f"  {outcome.files['recording']}",
    ]
    if outcome.ate is not None:
        lines.append(
            f"  ATE         RMSE {outcome.ate['rmse']:.4f} (Sim(3)-aligned, "
            f"{outcome.ate['matched']} poses, ground-truth units)"
        )
    elif outcome.ate_note:
        lines.append(f"  ATE         {outcome.ate_note}")
    lines += [
        f"  plot        {outcome.files.get('plot', '(none)')}",
        f"  report      {outcome.files['report']}",
        f"  node log    {outcome.files['node_log']}",
    ]
    if outcome.node_exit_code != 0:
        lines.append(f"  node exit   {outcome.node_exit_code} (expected 0 after SIGINT)")
    print("\n".join(lines), file=out)
