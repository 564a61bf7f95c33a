"""`lingbot-map-ros batch INPUTS... -o OUT`: many bags through a pool of model replicas on Ray, resumable.

INPUTS are bags (rosbag2 folders), folders of bags (every bag below, found by its metadata.yaml, .mcap or
.db3; one without metadata.yaml gets a failed row naming `ros2 bag reindex`) or text files of such paths
(one a line, `#` comments, relative to the file). OUT must lie apart from every input (not equal, inside
or around one: refused before anything starts), and `batch` removes only what it created (OUT/.partial/
carries its marker; an OUT/<name>/ it did not write gets a failed row and is left as it is).

Each bag is mapped as `lingbot-map-ros run BAG -o OUT/<bag folder name>` with the same options would map it
(tools/run/bag.py, the same function), by one of `--workers` Ray actors (tools/batch/worker.py) that each
load the model once (bags handed out one at a time, longest first). Without `--address` a local Ray instance
is started for the job and stopped at its end; with it the job runs on that cluster (`ray start --head` /
`ray start --address HEAD:6379`; bag and output paths must be the same on every machine: a shared file
system).

A bag's folder OUT/<name>/ appears only complete (written under OUT/.partial/ and renamed, with the
done-marker batch_done.json). `--resume` keeps complete bags and maps the rest again (partial or failed);
without it, an OUT that holds a complete bag is refused. A bag that fails (unreadable, no camera topic, out
of memory, ...) gets a failed row with its reason and the others go on; a worker that dies is replaced and
its bag retried once. At the end: OUT/summary.json, OUT/summary.csv, OUT/summary.png
(tools/batch/summary.py). Exit status 0 when every bag is mapped, 1 when one failed, 2 for bad input.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import math
import os
import shutil
import signal
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

from lingbot_map_ros.tools.bags.bag_io import BagError
from lingbot_map_ros.tools.batch.pool import BagJob, BatchConfig, WorkerPool
from lingbot_map_ros.tools.batch.summary import (
    PARTIAL_DIR,
    BagRow,
    claim_partial_dir,
    read_done,
    remove_partial,
    run_options,
    write_summary,
)
from lingbot_map_ros.tools.run.bag import bag_camera_topic
from lingbot_map_ros.tools.run.options import add_run_options, run_config

#: Files of a rosbag2 storage plugin (mcap, sqlite3).
STORAGE_SUFFIXES = (".mcap", ".db3")
#: Ray's shared-memory object store for a local instance: the job passes only configs and rows through it.
LOCAL_OBJECT_STORE_BYTES = 100 * 2**20


def find_bags(inputs: tuple[Path, ...]) -> list[Path]:
    """Every bag named by `inputs` (bags, folders of bags, text files of paths), in order, each once. A bag
    is a folder with a metadata.yaml, or with a .mcap/.db3 file but no metadata.yaml (what a killed `ros2
    bag record` leaves: it gets a failed row naming `ros2 bag reindex`, never skipped); a .mcap or .db3
    file given as an input stands for its folder."""
    bags: list[Path] = []
    for path in map(Path, inputs):
        if path.suffix in STORAGE_SUFFIXES:
            bags.append(path.parent)
        elif path.is_file():
            lines = (line.split("#", 1)[0].strip() for line in path.read_text().splitlines())
            listed = [path.parent / line for line in lines if line]
            bags += [bag for entry in listed for bag in _bags_at(entry)]
        else:
            bags += _bags_at(path)
    unique = list(dict.fromkeys(bag.resolve() for bag in bags))
    if not unique:
        raise BagError(f"no bags in {', '.join(map(str, inputs))}")
    names: dict[str, Path] = {}
    for bag in unique:
        if bag.name in names:
            raise ValueError(
                f"two bags would map to OUT/{bag.name}/: {names[bag.name]} and {bag}; rename one"
            )
        names[bag.name] = bag
    return unique


def _bags_at(path: Path) -> list[Path]:
    if _is_bag(path):
        return [path]
    if not path.is_dir():
        raise BagError(f"input {path} is neither a bag, a folder of bags nor a text file of paths")
    found = sorted({file.parent for file in path.rglob("*") if _bag_file(file)})
    if not found:
        raise BagError(f"no bags (folders with a metadata.yaml, .mcap or .db3) below {path}")
    return found


def _bag_file(path: Path) -> bool:
    return (path.name == "metadata.yaml" or path.suffix in STORAGE_SUFFIXES) and path.is_file()


def _is_bag(path: Path) -> bool:
    return path.is_dir() and any(_bag_file(file) for file in path.iterdir())


def refuse_overlap(output: Path, inputs: tuple[Path, ...], bags: list[Path]) -> None:
    """ValueError when `output` equals, contains or lies inside an input or a bag (a bag's folder would be
    its own output, and the inputs are never written to): checked before anything is created or started."""
    out = Path(output).resolve()
    for path in [*map(Path, inputs), *bags]:
        where = path.resolve()
        if out == where:
            relation = "is"
        elif where in out.parents:
            relation = "lies inside"
        elif out in where.parents:
            relation = "contains"
        else:
            continue
        raise ValueError(
            f"output folder {output} {relation} the input {path}: `batch` never writes into or around "
            "its inputs; choose an output folder apart from them"
        )


def plan(config: BatchConfig, bags: list[Path]) -> tuple[dict[int, BagRow], list[BagJob]]:
    """Rows known before any worker runs (complete from an earlier batch; unreadable bags) and the jobs."""
    options = run_options(config.options)
    rows: dict[int, BagRow] = {}
    jobs: list[BagJob] = []
    for index, bag in enumerate(bags):
        done = read_done(config.output / bag.name)
        if done is None and (config.output / bag.name).exists():
            error = f"{config.output / bag.name} exists and was not written by `batch`; move it away"
            rows[index] = BagRow(str(bag), bag.name, "failed", error=error, attempts=0)
            continue
        if done is not None:
            if not config.resume:
                raise ValueError(
                    f"{config.output / bag.name} holds a bag mapped by an earlier batch: pass "
                    "--resume to keep it, or choose another output folder"
                )
            changed = {
                k: (done["options"].get(k), v) for k, v in options.items() if done["options"].get(k) != v
            }
            if changed:
                raise ValueError(
                    f"{config.output / bag.name} was mapped with other options (earlier, now: "
                    f"{changed}); choose another output folder"
                )
            rows[index] = BagRow(**{**done["row"], "attempts": 0})
            continue
        try:
            _, frames = bag_camera_topic(replace(config.options, bag=bag))
        except BagError as err:
            rows[index] = BagRow(
                str(bag), bag.name, "failed", error=f"{type(err).__name__}: {err}", attempts=0
            )
            continue
        jobs.append(BagJob(index, bag, bag.name, frames))
    return rows, jobs


def start_ray(config: BatchConfig) -> Path | None:
    """Connect to `config.address`, or start a light local instance (CPUs for the workers, no dashboard,
    a small object store, its temp dir under /tmp: returned, to be removed after `ray.shutdown()`).
    RuntimeError when the cluster has fewer CPUs or GPUs than one worker asks for (it would wait forever)."""
    import ray

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    temp = None
    if config.address:
        ray.init(address=config.address, logging_level=logging.WARNING)
    else:
        temp = Path(tempfile.mkdtemp(prefix="lmr-ray-", dir="/tmp"))  # short: Ray's socket paths live in it
        ray.init(
            num_cpus=max(1, math.ceil(config.workers * config.cpus_per_worker)),
            include_dashboard=False,
            object_store_memory=LOCAL_OBJECT_STORE_BYTES,
            _temp_dir=str(temp),
            logging_level=logging.WARNING,
        )
    have = ray.cluster_resources()
    for name, need in (("CPU", config.cpus_per_worker), ("GPU", config.gpus_per_worker)):
        if need > have.get(name, 0.0):
            ray.shutdown()
            if temp is not None:
                shutil.rmtree(temp, ignore_errors=True)
            raise RuntimeError(
                f"the Ray cluster has {have.get(name, 0.0):g} {name}s; a worker asks for {need:g}"
            )
    return temp


@contextlib.contextmanager
def sigint_deferred() -> Iterator[Callable[[], bool]]:
    """SIGINT inside the block is remembered, not raised there; the block's value says whether one came.
    Around Ray's start-up: a KeyboardInterrupt inside `ray.init` was swallowed (the job ran to its end) or
    cut the start-up half-way (its agents outlived the job by 60-100 s); deferred, the start-up completes and
    the caller stops the job and Ray cleanly. Off the main thread (no signal handlers there): nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield lambda: False
        return
    received: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: received.append(signum))
    try:
        yield lambda: bool(received)
    finally:
        signal.signal(signal.SIGINT, previous)


def run_batch(config: BatchConfig) -> list[BagRow]:
    """Map every bag of `config` (module doc); returns the rows in input order and writes the summaries."""
    bags = find_bags(config.inputs)
    refuse_overlap(config.output, config.inputs, bags)
    config.output.mkdir(parents=True, exist_ok=True)
    rows, jobs = plan(config, bags)
    claim_partial_dir(config.output)
    start = time.perf_counter()
    if jobs:
        import ray

        with sigint_deferred() as interrupted:
            temp = start_ray(config)
        try:
            if interrupted():
                raise KeyboardInterrupt  # Ctrl-C during the start-up: stop now (exit 130), Ray shut down
            rows.update(WorkerPool(config, len(bags)).run(jobs, len(rows)))
        finally:
            ray.shutdown()
            if temp is not None:
                shutil.rmtree(temp, ignore_errors=True)
    remove_partial(config.output / PARTIAL_DIR)
    ordered = [rows[i] for i in range(len(bags))]
    wall_s = time.perf_counter() - start
    mapped = sum(r.frames for r in ordered if r.status == "ok" and r.attempts)
    write_summary(
        config.output,
        ordered,
        {
            "ok": sum(r.status == "ok" for r in ordered),
            "failed": sum(r.status != "ok" for r in ordered),
            "workers": config.workers,
            "ray": config.address or "local",
            "wall_s": round(wall_s, 3),
            "frames_mapped_now": mapped,
            "fps": round(mapped / wall_s, 3) if wall_s > 0 else 0.0,
            "options": run_options(config.options),
        },
    )
    return ordered


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Register `batch`."""
    p = subparsers.add_parser(
        "batch",
        help="many bags on a Ray pool of model replicas -> OUT/<bag>/, summary",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("inputs", type=Path, nargs="+", metavar="INPUT", help="bag, folder of bags, or list file")
    p.add_argument("-o", "--output", type=Path, required=True, help="output folder (OUT/<bag name>/ per bag)")
    p.add_argument("--address", default=None, help="Ray cluster to join (HEAD:6379); default: a local one")
    p.add_argument("--workers", type=int, default=1, help="model replicas (Ray actors)")
    p.add_argument("--gpus-per-worker", type=float, default=0.0, help="GPUs per worker (0.5: two per GPU)")
    p.add_argument("--cpus-per-worker", type=float, default=1.0, help="CPUs Ray reserves per worker")
    p.add_argument("--resume", action="store_true", help="keep complete bags of OUT, map the others")
    add_run_options(p)
    p.set_defaults(func=main_args)


def main_args(args: argparse.Namespace) -> int:
    """Run `batch` from parsed arguments."""
    config = BatchConfig(
        inputs=tuple(args.inputs),
        output=args.output,
        options=run_config(args, Path(), Path()),
        address=args.address,
        workers=args.workers,
        gpus_per_worker=args.gpus_per_worker,
        cpus_per_worker=args.cpus_per_worker,
        resume=args.resume,
    )
    rows = run_batch(config)
    for row in rows:
        what = f"{row.posed}/{row.frames} posed, {row.fps:.2f} FPS" if row.status == "ok" else row.error
        ate = f", ATE {row.ate:.4g}" if row.ate is not None else ""
        kept = " (kept)" if row.status == "ok" and row.attempts == 0 else ""
        print(f"  {row.status:6s} {row.name}: {what}{ate}{kept}")
    failed = sum(r.status != "ok" for r in rows)
    print(f"{len(rows) - failed} of {len(rows)} bags mapped -> {args.output}/summary.json, .csv, .png")
    return 1 if failed else 0
