"""Run reports: the PNG (trajectory from above + per-frame latency) and the JSON summary writer.

Poses are camera-to-world [N, 4, 4] either in the model's world frame (`frame="optical"`, OpenCV axes:
x right, y down, z forward; "from above" is the x-z plane) or in the node's `map` frame (`frame="ros"`,
REP-103: x forward, y left, z up; "from above" is the x-y plane).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after choosing the non-interactive backend)
import numpy as np  # noqa: E402

from lingbot_map_ros.engine.offline import atomic_write  # noqa: E402

# frame -> (horizontal axis, vertical axis, their labels) of the view from above
TOP_VIEW = {
    "optical": (0, 2, "x (right of first camera)", "z (forward of first camera)"),
    "ros": (0, 1, "x (forward of first camera)", "y (left of first camera)"),
}


def plot_run(
    path: Path,
    poses: np.ndarray,
    latency_ms: np.ndarray,
    keyframe: np.ndarray,
    title: str,
    reference: np.ndarray | None = None,
    reference_label: str = "ground truth (Sim(3)-aligned)",
    frame: str = "optical",
    latency_title: str = "per-frame latency (anchor frames share their step)",
) -> Path:
    """Write a two-panel PNG.

    Args:
        poses: [N, 4, 4] estimated camera-to-world poses.
        latency_ms: [N] per-frame latency (ms), NaN where unknown; `latency_title` says which latency.
        keyframe: [N] bool, the frame was stored in the cache.
        reference: optional [M, 3] camera centres already in the estimate's frame (e.g. aligned ground truth).
        frame: "optical" or "ros", the axes convention of `poses` (see the module docstring).
    """
    if frame not in TOP_VIEW:
        raise ValueError(f"frame must be one of {sorted(TOP_VIEW)}, got {frame!r}")
    h, v, h_label, v_label = TOP_VIEW[frame]
    poses, latency_ms, keyframe = np.asarray(poses), np.asarray(latency_ms, float), np.asarray(keyframe, bool)
    if poses.ndim != 3 or poses.shape[1:] != (4, 4) or not len(latency_ms) == len(poses) == len(keyframe):
        raise ValueError(
            f"expected poses [N, 4, 4] and N latencies/keyframe flags, got {poses.shape}, "
            f"{latency_ms.shape}, {keyframe.shape}"
        )
    fig, (top, lat) = plt.subplots(1, 2, figsize=(11, 4.6), gridspec_kw={"width_ratios": [1, 1.25]})
    centres = poses[:, :3, 3]
    if reference is not None:
        top.plot(reference[:, h], reference[:, v], color="0.6", lw=2.5, label=reference_label)
    top.plot(centres[:, h], centres[:, v], color="tab:blue", lw=1.2, label="estimate")
    top.scatter(centres[keyframe, h], centres[keyframe, v], s=6, color="tab:blue")
    top.scatter(centres[:1, h], centres[:1, v], s=50, marker="*", color="tab:green", label="start", zorder=3)
    heading = poses[:, :3, 2]  # the camera's optical axis
    step = max(1, len(poses) // 20)
    scale = 0.08 * max(float(np.ptp(centres[:, [h, v]], axis=0).max()), 1e-6)
    top.quiver(
        centres[::step, h],
        centres[::step, v],
        heading[::step, h] * scale,
        heading[::step, v] * scale,
        angles="xy",
        scale_units="xy",
        scale=1,
        color="tab:orange",
        width=0.004,
        label="view direction",
    )
    top.set_xlabel(h_label)
    top.set_ylabel(v_label)
    top.set_title("trajectory from above")
    top.set_aspect("equal", adjustable="datalim")
    top.legend(loc="best", fontsize=8)
    top.grid(alpha=0.3)

    index = np.arange(len(latency_ms))
    lat.plot(index, latency_ms, color="tab:red", lw=1.0)
    if not keyframe.all():
        lat.scatter(
            index[~keyframe], latency_ms[~keyframe], s=8, color="tab:purple", label="non-keyframe", zorder=3
        )
    finite = latency_ms[np.isfinite(latency_ms)]
    if finite.size:
        p50 = float(np.median(finite))
        lat.axhline(p50, color="0.4", ls="--", lw=0.8, label=f"median {p50:.0f} ms")
        lat.set_ylim(0, float(finite.max()) * 1.1 + 1)
    lat.set_xlabel("posed frame")
    lat.set_ylabel("latency (ms)")
    lat.set_title(latency_title)
    lat.legend(loc="best", fontsize=8)
    lat.grid(alpha=0.3)
    fig.suptitle(title, fontsize=10)
    return save_png(fig, path)


def write_json(path: Path, data: dict[str, object]) -> Path:
    """Write `data` as indented JSON (atomic); non-finite floats become null, unknown objects strings."""
    text = json.dumps(_finite(data), indent=2, default=str) + "\n"
    return atomic_write(path, lambda f: f.write(text.encode()))


def latency_summary(latency_ms: np.ndarray) -> dict[str, float]:
    """mean / p50 / p95 / max of the finite latencies (ms), rounded to 0.1 ms."""
    finite = np.asarray(latency_ms, float)
    finite = finite[np.isfinite(finite)]
    if not finite.size:
        return {}
    return {
        name: round(float(value), 1)
        for name, value in (
            ("mean", finite.mean()),
            ("p50", np.median(finite)),
            ("p95", np.percentile(finite, 95)),
            ("max", finite.max()),
        )
    }


def _finite(value: object) -> object:
    if isinstance(value, dict):
        return {str(k): _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    if isinstance(value, float | np.floating):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, np.integer):
        return int(value)
    return value


def plot_alignment(
    path: Path, estimate: np.ndarray, reference: np.ndarray, title: str, frame: str = "ros"
) -> Path:
    """PNG of two trajectories from above: `estimate` [N, 3] (already aligned) over `reference` [M, 3]."""
    if frame not in TOP_VIEW:
        raise ValueError(f"frame must be one of {sorted(TOP_VIEW)}, got {frame!r}")
    h, v, h_label, v_label = TOP_VIEW[frame]
    fig, ax = plt.subplots(figsize=(6, 5.4))
    ax.plot(reference[:, h], reference[:, v], color="0.6", lw=2.5, label="reference")
    ax.plot(estimate[:, h], estimate[:, v], color="tab:blue", lw=1.2, label="estimate (aligned)")
    ax.scatter(
        reference[:1, h], reference[:1, v], s=50, marker="*", color="tab:green", label="start", zorder=3
    )
    ax.set_xlabel(h_label)
    ax.set_ylabel(v_label)
    ax.set_aspect("equal", adjustable="datalim")
    ax.legend(loc="best", fontsize=8)
    ax.grid(alpha=0.3)
    ax.set_title(title, fontsize=9)
    return save_png(fig, path)


def save_png(fig: plt.Figure, path: Path) -> Path:
    """Lay out `fig`, write it as a 90 dpi PNG to `path` (atomic: temp file + rename) and close it."""
    fig.tight_layout()
    atomic_write(path, lambda f: fig.savefig(f, format="png", dpi=90))
    plt.close(fig)
    return Path(path)
