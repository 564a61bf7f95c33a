"""The node's periodic work: `/diagnostics`, `~/path`, `~/map_cloud`, `~/grid`, the `map -> odom` republish.

The timers are created once with the node and kept (entities.py: never destroyed while the executor may wait
on them), run on the steady clock (so they go on under `use_sim_time` without `/clock`, or when `/clock`
jumps back), work on the outputs only while the node is active, and never raise: a failure is counted and
logged (an exception escaping a timer would end the executor's spin). The `map -> odom` republish runs on a
thread of its own (`MapOdomThread`), not through the executor: its consumers look it up at now - a few tens
of ms, and an executor timer ran at ~13 of 20 Hz while the model step and the other callbacks held Python
(issue 29: each dispatch takes the GIL several times; a thread that sleeps on an event takes it once).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Protocol

from builtin_interfaces.msg import Time
from rclpy.callback_groups import CallbackGroup
from rclpy.clock import Clock, ClockType
from rclpy.node import Node

from ..outputs.mapping import MappingOutputs
from ..params.declare import NodeParams
from .entities import guard_callback

#: How long after a parameter change /diagnostics reports it (the changes of one call coalesce into one).
DIAGNOSTICS_SOON_S = 0.05


class MapOutput(Protocol):
    """What publishes a map and a grid: a camera's `MappingOutputs`, or the fused map of several cameras
    (`ros/outputs/fused.py` `FusedMap`)."""

    @property
    def last_stamp(self) -> Time | None: ...

    def publish_map(self, stamp: Time, force: bool = False) -> int: ...

    def publish_grid(self, force: bool = False) -> bool: ...


class NodeTimers:
    """Timers of `node` (module doc).

    Args:
        node: the lifecycle node.
        group: their callback group.
        params: the parameter snapshot at construction (rates; `set_rates` applies new ones).
        outputs: each active camera's outputs (`map -> odom`, `~/path`), empty while not active.
        maps: the active map outputs (each camera's, and the fused map of several), empty while not active.
        diagnostics: publishes /diagnostics.
        ok: False once the node's context is shutting down (failures are then not reported).
        on_failure: `(timer name, exception)` of a failed callback (counted and logged by the node).
    """

    def __init__(
        self,
        node: Node,
        group: CallbackGroup,
        params: NodeParams,
        outputs: Callable[[], Sequence[MappingOutputs]],
        maps: Callable[[], Sequence[MapOutput]],
        diagnostics: Callable[[], None],
        ok: Callable[[], bool],
        on_failure: Callable[[str, Exception], None],
    ) -> None:
        self._node = node
        self._outputs = outputs
        self._maps = maps
        self._ok = ok
        self._on_failure = on_failure
        steady = Clock(clock_type=ClockType.STEADY_TIME)
        bodies = {
            "diagnostics_timer": diagnostics,
            "map_timer": self._publish_map,
            "grid_timer": self._publish_grid,
            "path_timer": lambda: self._each(lambda outputs: outputs.publish_path()),
        }
        self._timers = {
            name: node.create_timer(1.0, self._guarded(name, body), callback_group=group, clock=steady)
            for name, body in bodies.items()
        }
        self._diagnostics = diagnostics
        self._soon = node.create_timer(
            DIAGNOSTICS_SOON_S,
            self._guarded("diagnostics_soon", self._publish_soon),
            callback_group=group,
            clock=steady,
            autostart=False,
        )
        republish = self._guarded("map_odom_timer", lambda: self._each(lambda o: o.republish_map_odom()))
        self.map_odom = MapOdomThread(republish, ok)
        self.set_rates(params)

    def diagnostics_soon(self) -> None:
        """Publish /diagnostics `DIAGNOSTICS_SOON_S` after the last call: one SetParameters call of N
        parameters runs the node's post-set callback N times (rclpy sets them one by one), and publishing at
        each cost ~4 ms of a 58-parameter call's ~7 ms per parameter (issue 30)."""
        self._soon.reset()

    def _publish_soon(self) -> None:
        self._soon.cancel()
        self._diagnostics()

    def set_rates(self, p: NodeParams) -> None:
        """Periods from the rate parameters (at construction and at configure)."""
        rates = {
            "diagnostics_timer": p.diagnostics_rate,
            "map_timer": p.map_publish_rate,
            "grid_timer": p.grid_rate,
            "path_timer": p.path_publish_rate,
        }
        for name, rate in rates.items():
            timer, period_ns = self._timers[name], int(1e9 / rate)
            if timer.timer_period_ns != period_ns:  # the new period from now, not after the old one's tick
                timer.timer_period_ns = period_ns
                timer.reset()
        self.map_odom.period_s = 1.0 / p.tf_publish_rate

    def _guarded(self, name: str, body: Callable[[], object]) -> Callable[[], object]:
        """`body` under the one callback guard (`guard_callback`), its failures reported as `name`'s."""
        return guard_callback(name, body, self._report)

    def _report(self, name: str, exc: Exception) -> None:
        """A timer's failure, not reported once the context is shutting down."""
        if self._ok():
            self._on_failure(name, exc)

    def _each(self, method: Callable[[MappingOutputs], object]) -> None:
        for outputs in self._outputs():  # empty while not active (deactivate may clear them meanwhile)
            method(outputs)

    def _publish_map(self) -> None:
        for output in self._maps():
            output.publish_map(output.last_stamp or self._node.get_clock().now().to_msg())

    def _publish_grid(self) -> None:
        for output in self._maps():
            output.publish_grid()


class MapOdomThread:
    """Runs `body` (the `map -> odom` republish of every active camera) every `period_s` on a daemon thread
    of its own, on a fixed schedule (a late run is not repeated to catch up), until `ok()` is False or `stop`.

    Args:
        body: the republish (never raises: `NodeTimers._guarded`).
        ok: False once the node's context is shutting down.
    """

    def __init__(self, body: Callable[[], None], ok: Callable[[], bool], period_s: float = 0.05) -> None:
        self.period_s = period_s
        self._body, self._ok = body, ok
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="lingbot_map_odom_tf", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        due = time.monotonic()
        while self._ok():
            due = max(due + self.period_s, time.monotonic())  # behind schedule: the next run now, not a burst
            if self._stop.wait(max(0.0, due - time.monotonic())):
                return
            self._body()

    def stop(self, timeout_s: float = 1.0) -> None:
        """End the thread (the node's shutdown, before its publishers are destroyed)."""
        self._stop.set()
        self._thread.join(timeout_s)
