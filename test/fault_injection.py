"""Fault injection between `StreamingSession` and the model, for tests only (docs/reliability.md).

Reliability tests must make a running node meet the faults a robot meets (CUDA out-of-memory in a step, a
model that emits NaN, a step that takes seconds) without patching production code inside the node process.
The test harness starts `test/fault_node.py` instead of the node when `LINGBOT_MAP_FAULTS` is set: the same
node, whose configure step wraps the session's model in a `FaultInjectingModel` (with a loud warning).
Nothing in `lingbot_map_ros/` reads the variable.

Spec grammar: comma-separated `KIND@CALLS[:SECONDS]`.

* KIND: `oom` (raise `torch.cuda.OutOfMemoryError`), `error` (raise `RuntimeError`), `nan` (run the step,
  then replace its pose and depth with NaN), `delay` (sleep SECONDS, then run the step).
* CALLS: 1-based index of the `model.step` call (`5`), a range (`5-7`), or `*` (every call).

Example: `LINGBOT_MAP_FAULTS="oom@6,nan@9,delay@*:0.5"`.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, replace

import torch

from lingbot_map_ros.cache.shared_pool import SharedKVPool
from lingbot_map_ros.engine.stream.session import StreamingModel
from lingbot_map_ros.model import StreamConfig, StreamState

#: Environment variable read by test/fault_node.py at configure.
FAULTS_ENV = "LINGBOT_MAP_FAULTS"
FAULT_KINDS = ("oom", "error", "nan", "delay")


@dataclass(frozen=True)
class Fault:
    """One fault: `kind` on `model.step` calls `first..last` (1-based, inclusive; `last` None = forever)."""

    kind: str
    first: int
    last: int | None
    seconds: float = 0.0

    def applies(self, call: int) -> bool:
        return call >= self.first and (self.last is None or call <= self.last)


def parse_faults(spec: str) -> tuple[Fault, ...]:
    """Parse a `LINGBOT_MAP_FAULTS` value (grammar in the module doc).

    Raises:
        ValueError: naming the malformed entry and the expected form.
    """
    faults = []
    for entry in (e.strip() for e in spec.split(",")):
        if not entry:
            continue
        expected = f"expected KIND@CALLS[:SECONDS] with KIND in {list(FAULT_KINDS)}, got '{entry}'"
        kind, sep, rest = entry.partition("@")
        if not sep or kind not in FAULT_KINDS:
            raise ValueError(f"{FAULTS_ENV}: {expected}")
        calls, _, seconds = rest.partition(":")
        try:
            if calls == "*":
                first, last = 1, None
            else:
                low, dash, high = calls.partition("-")
                first, last = int(low), int(high if dash else low)
            delay = float(seconds) if seconds else 0.0
        except ValueError:
            raise ValueError(f"{FAULTS_ENV}: {expected}") from None
        if first < 1 or (last is not None and last < first) or delay < 0:
            raise ValueError(f"{FAULTS_ENV}: call indices start at 1 and seconds are >= 0, got '{entry}'")
        faults.append(Fault(kind, first, last, delay))
    return tuple(faults)


def faults_from_env() -> tuple[Fault, ...]:
    """The faults requested by `LINGBOT_MAP_FAULTS` (empty when unset)."""
    return parse_faults(os.environ.get(FAULTS_ENV, ""))


class FaultInjectingModel:
    """Wraps a `LingBotMap` for the session: `step` obeys the fault plan, everything else is the model's.

    Args:
        model: the real model (its `step` runs unless the fault raises).
        faults: the plan (from `parse_faults`).
    Attributes:
        calls: `model.step` calls so far; `injected`: faults fired so far, by kind.
    """

    def __init__(self, model: StreamingModel, faults: tuple[Fault, ...]) -> None:
        self.model = model
        self.faults = faults
        self.config = model.config
        self.calls = 0
        self.injected: dict[str, int] = {}
        self._lock = threading.Lock()

    @property
    def device(self) -> torch.device:
        return self.model.device

    def __getattr__(self, name: str) -> object:
        """Everything else is the model's (`precision`, `aggregator`: the loop closer's descriptor)."""
        if name == "model":  # not set yet (unpickling, a failed __init__): never recurse
            raise AttributeError(name)
        return getattr(self.model, name)

    def new_stream(self, config: StreamConfig | None = None, pool: SharedKVPool | None = None) -> StreamState:
        return self.model.new_stream(config, pool)

    def new_pool(self, *args: object, **kwargs: object) -> object:
        return self.model.new_pool(*args, **kwargs)

    def step_batch(self, *args: object, **kwargs: object) -> object:
        """Batched steps of several cameras run unfaulted (the plan counts `step` calls only)."""
        return self.model.step_batch(*args, **kwargs)

    def step(self, images: torch.Tensor, state: object, keyframe: bool = True, **kwargs: object) -> object:
        """`model.step` with the faults of this call (delay first, then raise or run, then NaN)."""
        with self._lock:
            self.calls += 1
            active = [f for f in self.faults if f.applies(self.calls)]
            for fault in active:
                self.injected[fault.kind] = self.injected.get(fault.kind, 0) + 1
        kinds = {f.kind for f in active}
        for fault in active:
            if fault.kind == "delay":
                time.sleep(fault.seconds)
        if "oom" in kinds:
            raise torch.cuda.OutOfMemoryError(
                f"CUDA out of memory (injected by {FAULTS_ENV} at model.step call {self.calls})"
            )
        if "error" in kinds:
            raise RuntimeError(f"model failure (injected by {FAULTS_ENV} at model.step call {self.calls})")
        out = self.model.step(images, state, keyframe=keyframe, **kwargs)
        if "nan" in kinds:
            nan = float("nan")
            depth = None if out.depth is None else torch.full_like(out.depth, nan)  # None: no depth head
            out = replace(out, pose_enc=torch.full_like(out.pose_enc, nan), depth=depth)
        return out
