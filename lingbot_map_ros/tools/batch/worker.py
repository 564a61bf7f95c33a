"""`batch`'s worker: a Ray actor that loads the model once and maps bag after bag; the output folder rules.

Each bag is mapped by `run_bag.run_bag` (the one function behind `lingbot-map-ros run`) with the actor's
already built model, so its files are those `run` writes for that bag with the same options. A bag's outputs
go to `OUT/.partial/<name>/` first; when the run is complete a done-marker (`batch_done.json`: the row and
the options) is written into it and the folder is renamed to `OUT/<name>/`, so `OUT/<name>/` exists only for
a complete bag. A failure inside the run (unreadable bag, no camera topic, out of memory) is returned as a
failed row and the actor goes on; the driver (tools/batch/pool.py) replaces an actor that dies.

Process-wide state: the actor sets the persistent torch.compile cache once, the torch thread count once
(`options.threads`), and captures the RNG state right after building the model (what `run` has when its
first frame arrives); before every bag it restores that state, so no bag sees what an earlier bag left behind.
"""

from __future__ import annotations

import random
import threading
from dataclasses import asdict, dataclass, replace

import numpy as np
import ray

from lingbot_map_ros.tools.batch.summary import (
    BagRow,
    finish_bag,
    ground_truth_ate,
    partial_folder,
    remove_partial,
    run_options,
)
from lingbot_map_ros.tools.run.bag import build_session, run_bag
from lingbot_map_ros.tools.run.options import RunConfig


@dataclass
class ProcessState:
    """Process-wide random state: torch (CPU and every CUDA device), numpy's and Python's global RNGs."""

    torch_cpu: object
    torch_cuda: list[object] | None
    numpy: object
    python: object

    @classmethod
    def capture(cls) -> ProcessState:
        import torch

        cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None
        return cls(torch.get_rng_state(), cuda, np.random.get_state(), random.getstate())

    def restore(self) -> None:
        import torch

        torch.set_rng_state(self.torch_cpu)
        if self.torch_cuda is not None:
            torch.cuda.set_rng_state_all(self.torch_cuda)
        np.random.set_state(self.numpy)
        random.setstate(self.python)


@ray.remote(concurrency_groups={"progress": 1})
class BagWorker:
    """One model replica. `map_bag` runs one bag at a time (Ray's default group, one call at a time);
    `progress` answers from its own thread while a bag runs."""

    def __init__(self, options: RunConfig) -> None:
        import os

        import torch

        from lingbot_map_ros.engine.face import compile_cache_dir

        # a Ray actor is its own process: its entry point sets the process-wide settings (architecture.md)
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(compile_cache_dir(""))  # before any compile
        if options.threads is not None:
            torch.set_num_threads(options.threads)
        self._model = build_session(replace(options, progress=False)).model  # seeds, threads, weights
        self._state = ProcessState.capture()
        self._lock = threading.Lock()
        self._frames = 0

    def ready(self) -> bool:
        """True once the model is loaded (the driver waits for every worker before handing out bags)."""
        return True

    @ray.method(concurrency_group="progress")
    def progress(self) -> int:
        """Frames of the current bag pushed through the engine so far."""
        with self._lock:
            return self._frames

    def _count(self, frames: int) -> None:
        with self._lock:
            self._frames = frames

    def map_bag(self, config: RunConfig, name: str, attempts: int) -> BagRow:
        """Map `config.bag` into `OUT/.partial/<name>/`, mark it done and rename it to `OUT/<name>/`
        (`config.output_dir` is OUT/<name>); a failure is returned as a failed row."""
        self._count(0)
        self._state.restore()
        final = config.output_dir
        partial = partial_folder(final.parent, name)
        remove_partial(partial)  # a bag left half-mapped by an earlier (killed) batch
        row = BagRow(str(config.bag), name, "ok", attempts=attempts)
        try:
            result = run_bag(replace(config, output_dir=partial, progress=False), self._model, self._count)
        except Exception as err:  # noqa: BLE001 - any failure of one bag becomes its row; the batch goes on
            remove_partial(partial)
            _release_device_memory()
            row.status, row.frames, row.error = "failed", self._frames, f"{type(err).__name__}: {err}"
            return row
        row.frames, row.posed, row.fps = result.frames, len(result.stamps_s), round(result.fps, 3)
        row.ate, row.error = ground_truth_ate(config.bag, result.files["trajectory"])
        refused = finish_bag(partial, final, {"row": asdict(row), "options": run_options(config)})
        if refused is not None:
            row.status, row.error = "failed", refused
        return row


def _release_device_memory() -> None:
    """After a failed bag (e.g. CUDA out of memory): hand cached blocks back before the next bag."""
    import torch

    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.empty_cache()
