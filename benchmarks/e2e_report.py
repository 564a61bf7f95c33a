"""Tables and PNG plots of benchmarks/e2e.py results (matplotlib, Agg backend)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import matplotlib
import numpy as np

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

if TYPE_CHECKING:
    from e2e import StreamRun

GIB = float(1 << 30)


def rolling(values: np.ndarray, window: int, q: float) -> np.ndarray:
    """Percentile ``q`` over a trailing window of ``window`` samples (NaN until the window is full)."""
    out = np.full(values.shape, np.nan)
    for end in range(window, values.size + 1, max(1, window // 10)):
        out[end - 1] = np.percentile(values[end - window : end], q)
    return out


def plot_latency(runs: list[StreamRun], path: Path) -> None:
    """Per-frame latency against the frame index, with a rolling p50 and p99 over 200 frames."""
    fig, ax = plt.subplots(figsize=(11, 4.5))
    for run in runs:
        values = np.asarray(run.latency_ms)
        frames = np.arange(values.size)
        ax.plot(frames, values, ",", alpha=0.4)
        window = min(200, max(2, values.size // 5))
        for q, style in ((50, "-"), (99, "--")):
            curve = rolling(values, window, q)
            keep = ~np.isnan(curve)
            ax.plot(frames[keep], curve[keep], style, label=f"{run.mode} p{q} (rolling {window})")
    ax.set_xlabel("streaming frame index")
    ax.set_ylabel("push() latency [ms]")
    ax.set_title("Per-frame latency, image in -> pose/depth out (StreamingSession)")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_memory(runs: list[StreamRun], path: Path) -> None:
    """GPU memory allocated and reserved against the frame index (nothing drawn without samples)."""
    fig, ax = plt.subplots(figsize=(11, 4))
    for run in runs:
        if not run.memory:
            continue
        samples = np.asarray(run.memory, dtype=np.float64)
        ax.plot(samples[:, 0], samples[:, 1] / GIB, label=f"{run.mode} allocated")
        ax.plot(samples[:, 0], samples[:, 2] / GIB, "--", label=f"{run.mode} reserved")
    ax.set_xlabel("frame index")
    ax.set_ylabel("GiB")
    ax.set_title("GPU memory over the stream")
    ax.grid(alpha=0.3)
    if any(run.memory for run in runs):
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_stages(split: dict[str, dict[str, float]], path: Path) -> None:
    """Stacked bars: device time per stage of one streaming step, per path."""
    fig, ax = plt.subplots(figsize=(9, 4.5))
    modes = list(split)
    stages = sorted({s for stages in split.values() for s in stages if s != "step (host wall)"})
    bottom = np.zeros(len(modes))
    for stage in stages:
        values = np.asarray([split[m].get(stage, 0.0) for m in modes])
        ax.bar(modes, values, bottom=bottom, label=stage)
        bottom += values
    ax.set_ylabel("ms per streaming step (median)")
    ax.set_title("Per-stage device time, full window")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def print_tables(summary: dict, runs: list[StreamRun]) -> None:
    """The result tables (markdown), last in the output."""
    print(f"\n## e2e {summary['date']} on {summary['device']} (torch {summary['torch']})")
    for mode, errors in summary.get("check", {}).items():
        print(f"\n| check: {mode} vs plain | max rel. error |\n|---|---|")
        for name, value in errors.items():
            print(f"| {name} | {value:.2e} |")
    if "split" in summary:
        modes = list(summary["split"])
        stages = sorted({s for stages in summary["split"].values() for s in stages})
        print("\n| stage (median ms, full window) | " + " | ".join(modes) + " |")
        print("|---|" + "---|" * len(modes))
        for stage in stages:
            cells = [summary["split"][m].get(stage) for m in modes]
            print(f"| {stage} | " + " | ".join("-" if c is None else f"{c:.2f}" for c in cells) + " |")
        for mode in modes:
            device = sum(v for k, v in summary["split"][mode].items() if k != "step (host wall)")
            print(f"| device total {mode} | {device:.2f} |")
    if runs:
        print(
            "\n| path | frames | kf interval | FPS | p50 | p90 | p99 | p99 [150,250) | p99 last 200 "
            "| anchor step ms | peak alloc GiB | alloc GiB @200 / end | reserved GiB max |"
        )
        print("|---|" + "---|" * 12)
    for run in runs:
        memory = np.asarray(run.memory, dtype=np.float64).reshape(-1, 3)
        at_200 = memory[np.argmin(np.abs(memory[:, 0] - 200)), 1] / GIB if memory.size else float("nan")
        end = memory[-1, 1] / GIB if memory.size else float("nan")
        reserved = memory[:, 2].max() / GIB if memory.size else float("nan")
        print(
            f"| {run.mode} | {run.frames} | {run.keyframe_interval} | {run.fps:.2f} "
            f"| {run.percentile(50):.1f} | {run.percentile(90):.1f} | {run.percentile(99):.1f} "
            f"| {run.percentile(99, 150, 250):.1f} | {run.percentile(99, -200):.1f} | {run.anchor_ms:.0f} "
            f"| {run.peak_allocated / GIB:.2f} | {at_200:.2f} / {end:.2f} | {reserved:.2f} |"
        )
    for run in runs:
        stages = ", ".join(f"{k} {v:.2f}" for k, v in sorted(run.host_stages_ms.items()))
        print(f"host stages {run.mode} (median ms): {stages}")
