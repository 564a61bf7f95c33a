"""Long-run soak of `StreamingSession`: memory stays flat and the trajectory continuous over many frames.

Streams ``--frames`` frames of ../shared/data/loop (played forwards and backwards, so consecutive frames are
always neighbours of the recording) through the engine with the tiny preset (synthetic weights, seeded) and
records, every ``--sample-every`` frames: process RSS (psutil) and, on CUDA, allocated / reserved GPU memory.
After the window has filled (``scale_frames + max_stored_frames`` frames: the KV pools, the camera history and
the re-anchor keyframes are all at their bound) memory must not grow; the growth from then to the end is
reported against ``--max-growth-mb``.

Trajectory continuity across the long-stream boundary (re-anchor every ``max_stored_frames`` stored frames,
docs/engine.md): for every frame the camera-centre step and rotation step from the previous frame; the steps
at re-anchor boundaries are compared with the steps of ordinary frames (ratio to their median and their 99th
percentile). Synthetic weights make the poses arbitrary but deterministic; what is measured is that the
boundary adds no jump beyond an ordinary frame-to-frame step.

Usage (docs/reliability.md)::

    .venv/bin/python benchmarks/soak.py --frames 10000 --width 56            # CPU, about 4 minutes
    .venv/bin/python benchmarks/soak.py --frames 10000 --device cuda --width 518
    .venv/bin/python benchmarks/soak.py --frames 400 --max-stored-frames 40  # smoke

Prints a table, writes ``<out>/soak_<device>.png`` and ``<out>/soak_<device>.json``; exit code 1 when memory
grew more than allowed or a boundary jump exceeded ``--max-jump-ratio`` times the ordinary median step.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import psutil
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from lingbot_map_ros.engine.builder import EngineSpec, build_engine  # noqa: E402
from lingbot_map_ros.engine.config import (  # noqa: E402
    DEFAULT_MAX_WINDOW,
    DEFAULT_SLIDING_WINDOW,
    SessionConfig,
)
from lingbot_map_ros.engine.geometry import rotation_angle  # noqa: E402
from lingbot_map_ros.model import PrecisionPolicy  # noqa: E402

FRAMES_DIR = REPO.parent / "shared" / "data" / "loop"


@dataclass(frozen=True)
class SoakConfig:
    """What to run: frame count, network width, stream policy, device and the pass criteria."""

    frames: int = 10_000
    width: int = 56
    source_width: int = 112  # frames are pre-resized to this width (the session resizes to `width`)
    scale_frames: int = 8
    sliding_window: int = DEFAULT_SLIDING_WINDOW
    max_window: int = DEFAULT_MAX_WINDOW
    max_stored_frames: int = 320
    device: str = "cpu"
    sample_every: int = 50
    max_growth_mb: float = 64.0
    max_jump_ratio: float = 10.0
    seed: int = 0


@dataclass
class SoakReport:
    """Measurements of one soak (memory in MiB, steps in model units / radians)."""

    config: SoakConfig
    frames: int = 0
    seconds: float = 0.0
    samples: list[tuple[int, float, float, float]] = field(default_factory=list)  # frame, rss, gpu alloc, res
    window_full_frame: int = 0
    rss_at_window_mb: float = 0.0
    rss_end_mb: float = 0.0
    rss_growth_mb: float = 0.0
    gpu_growth_mb: float = 0.0
    reanchors: int = 0
    boundary_frames: list[int] = field(default_factory=list)
    ordinary_step_median: float = 0.0
    ordinary_step_p99: float = 0.0
    boundary_step_median: float = 0.0
    boundary_step_max: float = 0.0
    ordinary_rot_median: float = 0.0
    ordinary_rot_p99: float = 0.0
    boundary_rot_median: float = 0.0
    boundary_rot_max: float = 0.0
    failures: list[str] = field(default_factory=list)
    centres: np.ndarray | None = field(default=None, repr=False)  # [frames, 3] camera centres (plot only)
    steps: np.ndarray | None = field(default=None, repr=False)  # [frames - 1] centre steps (plot only)

    @property
    def passed(self) -> bool:
        return not self.failures


def load_loop_frames(source_width: int) -> list[np.ndarray]:
    """The recording's frames as [H, W, 3] uint8 RGB at `source_width`, played forwards then backwards."""
    import cv2

    files = sorted(FRAMES_DIR.glob("*.png"))
    if not files:
        raise FileNotFoundError(f"no frames in {FRAMES_DIR} (../shared/data/loop beside the repository)")
    frames = []
    for f in files:
        bgr = cv2.imread(str(f), cv2.IMREAD_COLOR)
        height = round(bgr.shape[0] * source_width / bgr.shape[1])
        frames.append(
            cv2.cvtColor(
                cv2.resize(bgr, (source_width, height), interpolation=cv2.INTER_AREA), cv2.COLOR_BGR2RGB
            )
        )
    return frames + frames[-2:0:-1]


def memory_mb(device: torch.device) -> tuple[float, float, float]:
    """(process RSS, CUDA allocated, CUDA reserved) in MiB (the CUDA values are 0 on CPU)."""
    rss = psutil.Process().memory_info().rss / 2**20
    if device.type != "cuda":
        return rss, 0.0, 0.0
    return rss, torch.cuda.memory_allocated(device) / 2**20, torch.cuda.memory_reserved(device) / 2**20


def run_soak(config: SoakConfig, progress: bool = True) -> SoakReport:
    """Stream `config.frames` frames through a tiny-preset session and measure memory and continuity."""
    device = torch.device(config.device)
    session = build_engine(
        EngineSpec(
            preset="tiny",
            device=device,
            precision=PrecisionPolicy(),  # float32 everywhere, on CUDA too
            seed=config.seed,
            session=SessionConfig(
                scale_frames=config.scale_frames,
                sliding_window=config.sliding_window,
                max_window=config.max_window,
                image_width=config.width,
                max_stored_frames=config.max_stored_frames,
            ),
        )
    ).only
    loop = load_loop_frames(config.source_width)
    report = SoakReport(config=config)
    report.window_full_frame = config.scale_frames + config.max_stored_frames
    centres = np.zeros((config.frames, 3))
    rotations = np.zeros((config.frames, 3, 3))
    segments = np.zeros(config.frames, dtype=np.int64)
    start = time.perf_counter()
    published = 0
    for i in range(config.frames):
        for result in session.push(loop[i % len(loop)], meta=i):
            centres[result.meta] = result.pose_c2w[:3, 3]
            rotations[result.meta] = result.pose_c2w[:3, :3]
            segments[result.meta] = result.segment
            published += 1
        if (i + 1) % config.sample_every == 0 or i + 1 == config.frames:
            report.samples.append((i + 1, *memory_mb(device)))
            if progress and (i + 1) % (20 * config.sample_every) == 0:
                rate = (i + 1) / (time.perf_counter() - start)
                print(
                    f"  {i + 1:6d} frames  {rate:6.1f} fps  RSS {report.samples[-1][1]:7.1f} MiB", flush=True
                )
    report.seconds = time.perf_counter() - start
    report.frames = published
    report.reanchors = int(session.stats().reanchors_total)
    _summarise(report, centres, rotations, segments)
    return report


def _summarise(report: SoakReport, centres: np.ndarray, rotations: np.ndarray, segments: np.ndarray) -> None:
    cfg = report.config
    samples = np.array(report.samples)
    after = samples[samples[:, 0] >= report.window_full_frame]
    if len(after) < 2:
        report.failures.append(f"too few frames to fill the window ({report.window_full_frame})")
        return
    report.rss_at_window_mb = float(after[0, 1])
    report.rss_end_mb = float(after[-1, 1])
    report.rss_growth_mb = float(after[:, 1].max() - after[0, 1])
    report.gpu_growth_mb = float(after[:, 3].max() - after[0, 3])
    steps = np.linalg.norm(np.diff(centres, axis=0), axis=1)
    rots = np.array([rotation_angle(rotations[k + 1] @ rotations[k].T) for k in range(len(rotations) - 1)])
    boundary = np.flatnonzero(np.diff(segments) != 0)  # step k goes from frame k to k + 1
    report.boundary_frames = [int(k + 1) for k in boundary]
    ordinary = np.setdiff1d(np.arange(len(steps)), boundary)
    report.ordinary_step_median = float(np.median(steps[ordinary]))
    report.ordinary_step_p99 = float(np.percentile(steps[ordinary], 99))
    report.ordinary_rot_median = float(np.median(rots[ordinary]))
    report.ordinary_rot_p99 = float(np.percentile(rots[ordinary], 99))
    if len(boundary):
        report.boundary_step_median = float(np.median(steps[boundary]))
        report.boundary_step_max = float(steps[boundary].max())
        report.boundary_rot_median = float(np.median(rots[boundary]))
        report.boundary_rot_max = float(rots[boundary].max())
    if report.rss_growth_mb > cfg.max_growth_mb:
        report.failures.append(f"RSS grew {report.rss_growth_mb:.1f} MiB after the window filled")
    if report.gpu_growth_mb > cfg.max_growth_mb:
        report.failures.append(f"GPU reserved memory grew {report.gpu_growth_mb:.1f} MiB")
    limit = cfg.max_jump_ratio * max(report.ordinary_step_median, 1e-9)
    if report.boundary_step_max > limit:
        report.failures.append(
            f"a re-anchor boundary jumped {report.boundary_step_max:.4g} > {cfg.max_jump_ratio} x median step"
        )
    report.centres = centres
    report.steps = steps


def print_table(report: SoakReport) -> None:
    cfg = report.config
    med = max(report.ordinary_step_median, 1e-12)
    rows = [
        ("frames streamed / published", f"{cfg.frames} / {report.frames}"),
        ("device, network width", f"{cfg.device}, {cfg.width}"),
        ("throughput", f"{report.frames / report.seconds:.1f} fps ({report.seconds:.0f} s)"),
        ("window full at frame", f"{report.window_full_frame}"),
        ("RSS at window full / end", f"{report.rss_at_window_mb:.1f} / {report.rss_end_mb:.1f} MiB"),
        ("RSS max growth after window full", f"{report.rss_growth_mb:.1f} MiB (limit {cfg.max_growth_mb})"),
        ("GPU reserved growth", f"{report.gpu_growth_mb:.1f} MiB"),
        ("re-anchors (long-stream boundaries)", f"{report.reanchors}"),
        (
            "centre step: ordinary median / p99",
            f"{report.ordinary_step_median:.4g} / {report.ordinary_step_p99:.4g}",
        ),
        (
            "centre step at boundaries: median / max",
            f"{report.boundary_step_median:.4g} / {report.boundary_step_max:.4g} "
            f"({report.boundary_step_max / med:.2f}x ordinary median)",
        ),
        (
            "rotation step: ordinary median / p99",
            f"{np.degrees(report.ordinary_rot_median):.2f} / {np.degrees(report.ordinary_rot_p99):.2f} deg",
        ),
        (
            "rotation step at boundaries: median / max",
            f"{np.degrees(report.boundary_rot_median):.2f} / {np.degrees(report.boundary_rot_max):.2f} deg",
        ),
        ("result", "PASS" if report.passed else "FAIL: " + "; ".join(report.failures)),
    ]
    width = max(len(k) for k, _ in rows)
    print("\n".join(f"{k:<{width}}  {v}" for k, v in rows))


def write_outputs(report: SoakReport, out_dir: Path) -> tuple[Path, Path]:
    """PNG (memory over frames, trajectory with boundaries, step sizes) and JSON of the report."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    tag = report.config.device.split(":")[0]
    samples = np.array(report.samples)
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.5))
    axes[0].plot(samples[:, 0], samples[:, 1], label="process RSS")
    if report.config.device.startswith("cuda"):
        axes[0].plot(samples[:, 0], samples[:, 3], label="CUDA reserved")
    axes[0].axvline(report.window_full_frame, color="grey", ls="--", label="window full")
    axes[0].set(xlabel="frame", ylabel="MiB", title="memory")
    axes[0].legend()
    centres = report.centres
    axes[1].plot(centres[:, 0], centres[:, 2], lw=0.5)
    b = report.boundary_frames
    axes[1].scatter(centres[b, 0], centres[b, 2], c="red", s=10, zorder=3, label="re-anchor boundary")
    axes[1].set(xlabel="x", ylabel="z", title="camera centres (map frame, top view)")
    axes[1].legend()
    axes[2].semilogy(np.arange(1, len(report.steps) + 1), report.steps + 1e-12, lw=0.3, label="step")
    axes[2].scatter(b, report.steps[np.array(b) - 1] + 1e-12, c="red", s=10, zorder=3, label="at boundary")
    axes[2].set(xlabel="frame", ylabel="camera-centre step", title="frame-to-frame step")
    axes[2].legend()
    fig.suptitle(f"soak: {report.config.frames} frames, tiny preset, {report.config.device}")
    fig.tight_layout()
    png = out_dir / f"soak_{tag}.png"
    fig.savefig(png, dpi=110)
    plt.close(fig)
    data = {k: v for k, v in asdict(report).items() if k not in ("centres", "steps")}
    data["passed"] = report.passed
    data["fps"] = report.frames / report.seconds
    json_path = out_dir / f"soak_{tag}.json"
    json_path.write_text(json.dumps(data, indent=1))
    return png, json_path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    defaults = SoakConfig()
    for name, value in asdict(defaults).items():
        parser.add_argument(f"--{name.replace('_', '-')}", type=type(value), default=value)
    parser.add_argument("--out", type=Path, default=REPO / "output" / "soak")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    args = vars(parser.parse_args(argv))
    out = args.pop("out")
    torch.set_num_threads(args.pop("threads"))
    report = run_soak(SoakConfig(**args))
    print_table(report)
    png, json_path = write_outputs(report, out)
    print(f"wrote {png} and {json_path}")
    return 0 if report.passed else 1


if __name__ == "__main__":
    sys.exit(main())
