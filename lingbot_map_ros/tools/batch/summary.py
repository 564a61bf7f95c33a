"""`batch`'s per-bag rows, the output-folder rules (done-marker, partial folder, the options it keeps) and
what is written from the rows at the end: OUT/summary.json, .csv and .png. No Ray here: the driver's planning
reads it without starting Ray.

The ATE of a bag is computed when a ground-truth trajectory sits next to it: `<bag folder>.gt.tum` (what
`lingbot-map-ros synthetic-scene -o BAG` writes), TUM, camera-to-world, stamps = image stamps; Sim(3)-aligned
RMSE of the camera centres in ground-truth units (tools/evaluation/trajectory.py, as `lingbot-map-ros ate`).
"""

from __future__ import annotations

import csv
import io
import json
import shutil
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from lingbot_map_ros.engine.offline import atomic_write
from lingbot_map_ros.tools.evaluation.trajectory import absolute_trajectory_error
from lingbot_map_ros.tools.run.options import RunConfig
from lingbot_map_ros.tools.run.report import write_json

#: The done-marker inside a complete bag's folder.
DONE_MARKER = "batch_done.json"
#: Where bags are mapped before their folder is renamed into place (same file system as OUT).
PARTIAL_DIR = ".partial"
#: The file that marks OUT/.partial/ as created by `batch` (only such a folder is ever removed).
OWNED_MARKER = ".lingbot_map_ros_batch"
#: RunConfig fields that differ per bag or do not change the outputs (not compared on --resume).
PER_BAG_FIELDS = ("bag", "output_dir", "progress")


def run_options(config: RunConfig) -> dict[str, object]:
    """The options of `config` that shape every bag's outputs (JSON-friendly), kept in the done-marker."""
    return {name: value for name, value in config.option_values().items() if name not in PER_BAG_FIELDS}


def partial_folder(out: Path, name: str) -> Path:
    return out / PARTIAL_DIR / name


def claim_partial_dir(out: Path) -> Path:
    """OUT/.partial/ with its ownership marker (created here when absent). ValueError when OUT/.partial
    exists without the marker: a folder this tool did not create is never emptied or removed."""
    partial = out / PARTIAL_DIR
    if partial.exists() and not (partial / OWNED_MARKER).is_file():
        raise ValueError(f"{partial} exists and was not created by `batch` (no {OWNED_MARKER}); move it away")
    partial.mkdir(parents=True, exist_ok=True)
    (partial / OWNED_MARKER).touch()
    return partial


def remove_partial(path: Path) -> None:
    """Remove `path` (OUT/.partial or a folder below it) only when OUT/.partial carries the marker."""
    owner = path if path.name == PARTIAL_DIR else path.parent
    if owner.name == PARTIAL_DIR and (owner / OWNED_MARKER).is_file():
        shutil.rmtree(path, ignore_errors=True)


def finish_bag(partial: Path, final: Path, marker: dict[str, object]) -> str | None:
    """Write the done-marker into `partial` and rename it to `final`; never removes `final`. Returns None,
    or why it could not (`final` exists: a folder not written by this job; `partial` is then removed)."""
    (partial / DONE_MARKER).write_text(json.dumps(marker, indent=2) + "\n")
    try:
        if final.exists():
            raise FileExistsError(final)
        partial.rename(final)
    except OSError as err:
        remove_partial(partial)
        return f"{final} exists and was not written by this batch ({type(err).__name__}); move it away"
    return None


def read_done(folder: Path) -> dict[str, object] | None:
    """The done-marker of a complete bag folder, or None (not there, or unreadable: not complete).
    ValueError when it is JSON of the wrong shape (no `row` of BagRow's fields, no `options` mapping)."""
    try:
        done = json.loads((folder / DONE_MARKER).read_text())
    except (OSError, ValueError):
        return None
    row_fields = {f.name for f in fields(BagRow)}
    shaped = (
        isinstance(done, dict)
        and isinstance(done.get("options"), dict)
        and isinstance(done.get("row"), dict)
        and set(done["row"]) == row_fields
    )
    if not shaped:
        raise ValueError(
            f"{folder / DONE_MARKER} is not a done-marker of `batch` (expected a JSON object with 'row': "
            f"{{{', '.join(sorted(row_fields))}}} and 'options': {{...}}); remove it or choose another "
            "output folder"
        )
    return done


#: Suffix of the ground-truth file beside a bag folder (`BAG` -> `BAG.gt.tum`).
GROUND_TRUTH_SUFFIX = ".gt.tum"


@dataclass
class BagRow:
    """One line of the batch summary. `bag`: the bag's path; `name`: its output folder under OUT;
    `status` "ok" | "failed"; `frames` read, `posed` frames, `fps` of the engine loop; `ate` Sim(3) ATE RMSE
    against `<bag>.gt.tum` (None without one); `error`: why the bag failed (or why its ATE is missing);
    `attempts`: workers that ran it in this batch (0: complete from an earlier batch, kept by --resume)."""

    bag: str
    name: str
    status: str
    frames: int = 0
    posed: int = 0
    fps: float | None = None
    ate: float | None = None
    error: str | None = None
    attempts: int = 1


def ground_truth(bag: Path) -> Path:
    """Where the ground truth of `bag` would be: `<bag>.gt.tum` beside the bag folder."""
    bag = Path(bag)
    return bag.with_name(bag.name + GROUND_TRUTH_SUFFIX)


def ground_truth_ate(bag: Path, trajectory: Path) -> tuple[float | None, str | None]:
    """(ATE RMSE, None) of `trajectory` against the bag's ground truth; (None, None) without one; (None,
    reason) when it cannot be computed (e.g. fewer than 3 posed frames match its stamps)."""
    reference = ground_truth(bag)
    if not reference.is_file():
        return None, None
    try:
        return round(absolute_trajectory_error(trajectory, reference).rmse, 6), None
    except (ValueError, OSError) as err:
        return None, f"ATE not computed: {err}"


def write_summary(out: Path, rows: list[BagRow], extra: dict[str, object]) -> dict[str, Path]:
    """OUT/summary.json (`{"bags": [row, ...], **extra}`), OUT/summary.csv (the rows) and OUT/summary.png."""
    files = {"json": write_json(out / "summary.json", {"bags": [asdict(r) for r in rows], **extra})}
    text = io.StringIO()
    writer = csv.DictWriter(text, fieldnames=[f.name for f in fields(BagRow)], lineterminator="\n")
    writer.writeheader()
    writer.writerows(asdict(r) for r in rows)
    files["csv"] = atomic_write(out / "summary.csv", lambda f: f.write(text.getvalue().encode()))
    files["png"] = plot_summary(out / "summary.png", rows)
    return files


def plot_summary(path: Path, rows: list[BagRow]) -> Path:
    """Two bar charts over the bags: FPS (failed bags marked) and ATE (bags without one marked n/a)."""
    from lingbot_map_ros.tools.run.report import plt, save_png

    names = [r.name for r in rows]
    index = range(len(rows))
    fig, (fps_ax, ate_ax) = plt.subplots(2, 1, figsize=(max(6.0, 0.5 * len(rows) + 2), 6.4), sharex=True)
    colours = ["tab:blue" if r.status == "ok" else "tab:red" for r in rows]
    fps_ax.bar(index, [r.fps or 0.0 for r in rows], color=colours)
    for i, r in enumerate(rows):
        if r.status != "ok":
            fps_ax.text(i, 0, "failed", rotation=90, ha="center", va="bottom", fontsize=8, color="tab:red")
    fps_ax.set_ylabel("frames / s")
    fps_ax.set_title(f"{sum(r.status == 'ok' for r in rows)} of {len(rows)} bags mapped (red: failed)")
    ate_ax.bar(index, [r.ate if r.ate is not None else 0.0 for r in rows], color="tab:green")
    for i, r in enumerate(rows):
        if r.ate is None:
            ate_ax.text(i, 0, "n/a", rotation=90, ha="center", va="bottom", fontsize=8, color="0.4")
    ate_ax.set_ylabel("ATE RMSE (Sim(3), gt units)")
    ate_ax.set_xticks(list(index), names, rotation=45, ha="right", fontsize=8)
    for ax in (fps_ax, ate_ax):
        ax.grid(alpha=0.3, axis="y")
    return save_png(fig, path)
