"""Long-run soak of the `lingbot_map` NODE over real DDS: its RSS stays flat and no frame is lost.

The node runs as a subprocess (tiny preset, synthetic weights) on the frames of ../shared/data/loop (played
forwards and backwards, pre-resized to ``--source-width``); this process publishes them as sensor_msgs/Image
with closed-loop flow control (at most ``--in-flight`` frames without odometry, so nothing is dropped and
every frame is mapped), samples the node's RSS (psutil on its pid) every ``--sample-every`` frames, collects
~/odometry and /diagnostics, and stops the node with SIGINT at the end. The map budget and the path length are
set small so that every bounded structure is full long before the end; growth after the window has filled is
reported against ``--max-growth-mb``. What stays unbounded by design is the trajectory log for ~/save_map
(about 160 B a frame, docs/reliability.md).

Usage (docs/reliability.md)::

    .venv/bin/python benchmarks/soak_node.py --frames 10000     # CPU, about 5 minutes
    .venv/bin/python benchmarks/soak_node.py --frames 300       # smoke

Prints a table and writes ``<out>/soak_node.png`` and ``<out>/soak_node.json``; exit code 1 when RSS grew more
than allowed, a frame was lost, an inference failed or the node did not exit cleanly.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import psutil
from node_child import REPO, use_isolated_dds
from soak import load_loop_frames

from lingbot_map_ros.cache.config import DEFAULT_SLIDING_WINDOW
from lingbot_map_ros.tools.live.node_process import NodeProcess

NODE = "soak_node"


@dataclass(frozen=True)
class NodeSoakConfig:
    """Frames, node parameters and pass criteria of a node soak."""

    frames: int = 10_000
    width: int = 56
    source_width: int = 112
    scale_frames: int = 8
    sliding_window: int = DEFAULT_SLIDING_WINDOW
    max_map_points: int = 20_000
    path_length: int = 500
    in_flight: int = 10
    sample_every: int = 100
    max_growth_mb: float = 64.0
    timeout_s: float = 60.0


@dataclass
class NodeSoakReport:
    """Measurements of one node soak (memory in MiB)."""

    config: NodeSoakConfig
    seconds: float = 0.0
    odometry: int = 0
    samples: list[tuple[int, float]] = field(default_factory=list)  # (frames published, node RSS MiB)
    window_full_frame: int = 0
    rss_at_window_mb: float = 0.0
    rss_end_mb: float = 0.0
    rss_growth_mb: float = 0.0
    diagnostics: dict[str, str] = field(default_factory=dict)
    exit_code: int | None = None
    exit_s: float = 0.0
    step_median: float = 0.0
    step_max: float = 0.0
    failures: list[str] = field(default_factory=list)
    positions: np.ndarray | None = field(default=None, repr=False)

    @property
    def passed(self) -> bool:
        return not self.failures


def node_parameters(config: NodeSoakConfig) -> dict[str, object]:
    return {
        "model.preset": "tiny",
        "model.device": "cpu",
        "model.image_width": config.width,
        "kv_cache.scale_frames": config.scale_frames,
        "kv_cache.sliding_window": config.sliding_window,
        "qos.reliability": "reliable",
        "qos.depth": 50,
        "queue_size": 50,
        "map.max_points": config.max_map_points,
        "path.max_length": config.path_length,
        "publish.frame_cloud": False,
        "diagnostics_rate": 2.0,
    }


def run_node_soak(config: NodeSoakConfig, out_dir: Path) -> NodeSoakReport:
    """Start the node, stream `config.frames` frames through it with flow control, measure, stop it."""
    out_dir.mkdir(parents=True, exist_ok=True)
    env = use_isolated_dds()
    import rclpy
    from builtin_interfaces.msg import Time
    from diagnostic_msgs.msg import DiagnosticArray
    from nav_msgs.msg import Odometry
    from rclpy.context import Context
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.qos import QoSProfile, ReliabilityPolicy
    from sensor_msgs.msg import Image
    from std_msgs.msg import Header

    from lingbot_map_ros.ros.messages.conversions import rgb_to_image

    report = NodeSoakReport(config=config, window_full_frame=config.scale_frames + config.sliding_window)
    loop = load_loop_frames(config.source_width)
    messages = [rgb_to_image(rgb, Header(frame_id="soak_cam")) for rgb in loop]
    proc = NodeProcess.start(out_dir / "soak_node.log", node_parameters(config), name=NODE, env=env)
    context = Context()
    rclpy.init(context=context)
    client = rclpy.create_node("soak_client", context=context)
    executor = SingleThreadedExecutor(context=context)
    executor.add_node(client)
    spinner = threading.Thread(target=lambda: _spin(executor, context), daemon=True)
    spinner.start()
    cond = threading.Condition()
    positions: list[tuple[float, float, float]] = []
    diagnostics: dict[str, str] = {}

    def on_odometry(msg: Odometry) -> None:
        p = msg.pose.pose.position
        with cond:
            positions.append((p.x, p.y, p.z))
            cond.notify_all()

    def on_diagnostics(msg: DiagnosticArray) -> None:
        for status in msg.status:
            if status.name == f"{NODE}: mapping":
                diagnostics.clear()
                diagnostics.update({kv.key: kv.value for kv in status.values})

    reliable = QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE)
    client.create_subscription(Odometry, f"/{NODE}/odometry", on_odometry, reliable)
    client.create_subscription(DiagnosticArray, "/diagnostics", on_diagnostics, reliable)
    pub = client.create_publisher(Image, "/image", reliable)
    try:
        deadline = time.monotonic() + config.timeout_s
        while pub.get_subscription_count() < 1:
            if not proc.alive() or time.monotonic() > deadline:
                raise RuntimeError(
                    f"the node did not subscribe (exit {proc.proc.poll()}); see {proc.log_path}"
                )
            time.sleep(0.05)
        node = psutil.Process(proc.pid)
        start = time.monotonic()
        for i in range(config.frames):
            msg = messages[i % len(messages)]
            msg.header.stamp = Time(sec=i // 30, nanosec=(i % 30) * 33_333_333)
            pub.publish(msg)
            needed = i + 1 - config.in_flight
            with cond:  # closed loop: at most `in_flight` frames without odometry
                if not cond.wait_for(lambda n=needed: len(positions) >= n, config.timeout_s):
                    raise RuntimeError(f"no odometry for frame {needed - 1} within {config.timeout_s} s")
            if (i + 1) % config.sample_every == 0:
                report.samples.append((i + 1, node.memory_info().rss / 2**20))
                if (i + 1) % (20 * config.sample_every) == 0:
                    rate = (i + 1) / (time.monotonic() - start)
                    print(f"  {i + 1:6d} frames  {rate:6.1f} fps  node RSS {report.samples[-1][1]:7.1f} MiB")
        with cond:
            cond.wait_for(lambda: len(positions) >= config.frames, config.timeout_s)
        report.seconds = time.monotonic() - start
        time.sleep(1.5)  # one more /diagnostics
        report.diagnostics = dict(diagnostics)
    finally:
        t0 = time.monotonic()
        report.exit_code = proc.stop(20)
        report.exit_s = time.monotonic() - t0
        rclpy.try_shutdown(context=context)
        spinner.join(5)
    report.odometry = len(positions)
    report.positions = np.array(positions)
    _summarise(report)
    return report


def _spin(executor: object, context: object) -> None:
    from rclpy.executors import ExternalShutdownException

    try:
        while context.ok():
            executor.spin_once(timeout_sec=0.05)
    except (ExternalShutdownException, RuntimeError):
        return


def _summarise(report: NodeSoakReport) -> None:
    cfg = report.config
    samples = np.array(report.samples) if report.samples else np.zeros((0, 2))
    after = samples[samples[:, 0] >= max(report.window_full_frame, 1000)] if len(samples) else samples
    if len(after) >= 2:
        report.rss_at_window_mb = float(after[0, 1])
        report.rss_end_mb = float(after[-1, 1])
        report.rss_growth_mb = float(after[:, 1].max() - after[0, 1])
    else:
        report.failures.append("too few RSS samples after the window filled")
    if len(report.positions) > 1:
        steps = np.linalg.norm(np.diff(report.positions, axis=0), axis=1)
        report.step_median, report.step_max = float(np.median(steps)), float(steps.max())
    d = report.diagnostics
    if report.rss_growth_mb > cfg.max_growth_mb:
        report.failures.append(f"node RSS grew {report.rss_growth_mb:.1f} MiB after the window filled")
    if report.odometry != cfg.frames:
        report.failures.append(f"{report.odometry} odometry messages for {cfg.frames} frames")
    if d.get("frames_dropped", "0") != "0" or d.get("failed_total", "0") != "0":
        report.failures.append(f"dropped {d.get('frames_dropped')}, failed {d.get('failed_total')}")
    if report.exit_code != 0:
        report.failures.append(f"node exit code {report.exit_code}")


def print_table(report: NodeSoakReport) -> None:
    cfg, d = report.config, report.diagnostics
    rows = [
        ("frames published / odometry received", f"{cfg.frames} / {report.odometry}"),
        (
            "throughput (closed loop)",
            f"{report.odometry / max(report.seconds, 1e-9):.1f} fps ({report.seconds:.0f} s)",
        ),
        ("node RSS from frame 1000 / at end", f"{report.rss_at_window_mb:.1f} / {report.rss_end_mb:.1f} MiB"),
        (
            "node RSS max growth after frame 1000",
            f"{report.rss_growth_mb:.1f} MiB (limit {cfg.max_growth_mb})",
        ),
        (
            "dropped / rejected / failed",
            f"{d.get('frames_dropped')} / {d.get('rejected_total')} / {d.get('failed_total')}",
        ),
        ("re-anchors, map points", f"{d.get('session.reanchors_total')}, {d.get('map_points')}"),
        ("odometry centre step: median / max", f"{report.step_median:.4g} / {report.step_max:.4g}"),
        ("SIGINT -> exit", f"code {report.exit_code} after {report.exit_s:.2f} s"),
        ("result", "PASS" if report.passed else "FAIL: " + "; ".join(report.failures)),
    ]
    width = max(len(k) for k, _ in rows)
    print("\n".join(f"{k:<{width}}  {v}" for k, v in rows))


def write_outputs(report: NodeSoakReport, out_dir: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    samples = np.array(report.samples)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.5))
    axes[0].plot(samples[:, 0], samples[:, 1])
    axes[0].set(xlabel="frames published", ylabel="node RSS (MiB)", title="node memory")
    if len(report.positions):
        axes[1].plot(report.positions[:, 0], report.positions[:, 1], lw=0.4)
    axes[1].set(xlabel="x (map)", ylabel="y (map)", title="~/odometry positions (top view)")
    fig.suptitle(f"node soak: {report.config.frames} frames over DDS, tiny preset, cpu")
    fig.tight_layout()
    png = out_dir / "soak_node.png"
    fig.savefig(png, dpi=110)
    plt.close(fig)
    data = {k: v for k, v in asdict(report).items() if k != "positions"}
    data["passed"] = report.passed
    (out_dir / "soak_node.json").write_text(json.dumps(data, indent=1))
    return png


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    for name, value in asdict(NodeSoakConfig()).items():
        parser.add_argument(f"--{name.replace('_', '-')}", type=type(value), default=value)
    parser.add_argument("--out", type=Path, default=REPO / "output" / "soak")
    args = vars(parser.parse_args(argv))
    out = args.pop("out")
    report = run_node_soak(NodeSoakConfig(**args), out)
    print_table(report)
    print(f"wrote {write_outputs(report, out)}")
    return 0 if report.passed else 1


if __name__ == "__main__":
    sys.exit(main())
