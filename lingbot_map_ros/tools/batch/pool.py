"""`batch`'s driver side: the bags to map, and a pool of Ray workers that maps them (tools/batch/command.py
runs it).

`WorkerPool.run` starts `workers` actors (tools/batch/worker.py; each loads the model in the background),
hands out one bag at a time to an idle worker (longest bag first), polls the busy workers' progress for one
progress bar, replaces a worker whose process died and retries its bag once, and ends every worker when it
returns. Ray is imported only here, when the pool runs.
"""

from __future__ import annotations

import contextlib
import sys
from collections import deque
from dataclasses import dataclass, replace
from pathlib import Path

from tqdm import tqdm

from lingbot_map_ros.tools.batch.summary import BagRow
from lingbot_map_ros.tools.run.options import RunConfig

#: How often the driver wakes to poll the workers' progress (seconds).
POLL_S = 0.5


@dataclass(frozen=True)
class BatchConfig:
    """A batch: the bags of `inputs` mapped into `output`, every bag with `options` (a `RunConfig` whose
    `bag` and `output_dir` are replaced per bag). `address`: an existing Ray cluster (None: a local
    instance); `workers` actors of `cpus_per_worker` CPUs and `gpus_per_worker` GPUs (fractions share one)."""

    inputs: tuple[Path, ...]
    output: Path
    options: RunConfig
    address: str | None = None
    workers: int = 1
    gpus_per_worker: float = 0.0
    cpus_per_worker: float = 1.0
    resume: bool = False
    progress: bool = True

    def __post_init__(self) -> None:
        if self.workers < 1:
            raise ValueError(f"--workers must be >= 1, got {self.workers}")
        if self.cpus_per_worker <= 0 or self.gpus_per_worker < 0:
            raise ValueError("--cpus-per-worker must be > 0 and --gpus-per-worker >= 0")
        cuda = self.options.device.startswith("cuda")
        if cuda and (self.gpus_per_worker == 0 or self.options.device != "cuda"):
            raise ValueError(
                "on GPUs pass --device cuda with --gpus-per-worker > 0: Ray gives each worker "
                "its GPU(s) and `cuda` is the first of them"
            )


@dataclass
class BagJob:
    """One bag of the batch: position in the summary, path, output folder name, frames to map."""

    index: int
    bag: Path
    name: str
    frames: int
    attempts: int = 0


class WorkerPool:
    """The driver's side: `workers` actors, bags handed out one at a time, progress, replacement."""

    def __init__(self, config: BatchConfig, bags: int) -> None:
        from lingbot_map_ros.tools.batch.worker import BagWorker

        self.config = config
        self.bags = bags
        self._worker_class = BagWorker
        self._spawned: list[object] = []

    def _spawn(self) -> object:
        """A new worker (its model loads in the background; calls queue until it has)."""
        options = {"num_cpus": self.config.cpus_per_worker, "num_gpus": self.config.gpus_per_worker}
        self._spawned.append(self._worker_class.options(**options).remote(self.config.options))
        return self._spawned[-1]

    def run(self, jobs: list[BagJob], known: int) -> dict[int, BagRow]:
        """Map `jobs` (rows by job index); every worker is ended on return, so none outlives the batch."""
        import ray
        from ray.exceptions import RayError

        try:
            return self._run(jobs, known)
        finally:
            for worker in self._spawned:
                with contextlib.suppress(RayError):
                    ray.kill(worker)

    def _run(self, jobs: list[BagJob], known: int) -> dict[int, BagRow]:
        import ray
        from ray.exceptions import RayActorError, RayError

        pending = deque(sorted(jobs, key=lambda job: -job.frames))  # longest first: the shortest makespan
        starting = {
            (w := self._spawn()).ready.remote(): w for _ in range(min(self.config.workers, len(jobs)))
        }
        idle: list[object] = []
        busy: dict[object, tuple[object, BagJob]] = {}
        rows: dict[int, BagRow] = {}
        handled = 0  # frames of finished jobs
        bar = tqdm(
            total=sum(j.frames for j in jobs),
            desc="batch",
            unit="frame",
            file=sys.stderr,
            disable=not self.config.progress,
        )
        while pending or busy:
            while idle and pending:
                worker, job = idle.pop(), pending.popleft()
                job.attempts += 1
                config = replace(self.config.options, bag=job.bag, output_dir=self.config.output / job.name)
                busy[worker.map_bag.remote(config, job.name, job.attempts)] = (worker, job)
            ready, _ = ray.wait([*starting, *busy], num_returns=1, timeout=POLL_S)
            for ref in ready:
                if ref in starting:
                    worker = starting.pop(ref)
                    try:
                        ray.get(ref)
                    except RayError as err:
                        raise RuntimeError(f"a worker could not load the model: {err}") from err
                    if not idle and not busy:
                        bar.reset()  # the rate and ETA count from the first loaded model on
                    idle.append(worker)
                    continue
                worker, job = busy.pop(ref)
                try:
                    row = ray.get(ref)
                    idle.append(worker)
                except RayActorError as err:  # the process died (killed, out of host memory, crashed)
                    idle.append(self._spawn())
                    if job.attempts < 2:
                        pending.appendleft(job)
                        bar.write(f"worker died while mapping {job.bag}; retrying it on a new worker")
                        continue
                    row = BagRow(
                        str(job.bag),
                        job.name,
                        "failed",
                        attempts=job.attempts,
                        error=f"the worker died twice while mapping it: {_first_line(err)}",
                    )
                except RayError as err:
                    idle.append(worker)
                    row = BagRow(
                        str(job.bag), job.name, "failed", attempts=job.attempts, error=_first_line(err)
                    )
                rows[job.index] = row
                handled += job.frames
                if row.status != "ok":
                    bar.write(f"failed: {job.bag}: {row.error}")
            bar.n = handled + self._in_flight(busy)
            failed = sum(r.status != "ok" for r in rows.values())
            status = [f"bags {known + len(rows)}/{self.bags}"]
            status += [f"{failed} failed"] if failed else []
            status += [f"{len(starting)} workers loading the model"] if starting else []
            bar.set_postfix_str(", ".join(status))
        bar.close()
        return rows

    @staticmethod
    def _in_flight(busy: dict[object, tuple[object, BagJob]]) -> int:
        """Frames the busy workers have pushed of their current bags (0 for one that does not answer)."""
        import ray
        from ray.exceptions import RayError

        if not busy:
            return 0
        refs = {worker.progress.remote(): job for worker, job in busy.values()}
        ready, _ = ray.wait(list(refs), num_returns=len(refs), timeout=POLL_S)
        frames = 0
        for ref in ready:
            with contextlib.suppress(RayError):  # the worker died: its bag counts again when retried
                frames += min(int(ray.get(ref)), refs[ref].frames)
        return frames


def _first_line(err: BaseException) -> str:
    lines = [line for line in str(err).splitlines() if line.strip()]
    return f"{type(err).__name__}: {lines[0] if lines else ''}"
