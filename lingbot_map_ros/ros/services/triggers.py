"""The node's std_srvs/Trigger services: `~/reset`, `~/save_map`, `~/save_session`, `~/load_session`,
`~/reject_loop` (`create_reject_loop_service`: each camera's loop closer undoes its last loop, issue 30).

`~/reset` calls the node's `reset_stream` (the stream token, docs/node.md "Behaviour"); `~/save_map` writes
the map (binary PLY) and the trajectory (TUM) through `MappingOutputs.save`, atomically (temp file + rename)
into `output_dir`, and a session too with `session.save_with_map`; `~/save_session` / `~/load_session` call
the node's `save_session` / `load_session` (docs/session.md). All answer "not active" while the node is not
active, and log their response message.

Neither handler raises: any failure is answered with `success: false` and the reason (an exception escaping a
service callback would end the executor's spin, issue 16). The services are created once, with a request
queue of `SERVICE_QUEUE_DEPTH` (the default of 10 silently dropped the 11th of 50 concurrent calls).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from rclpy.callback_groups import CallbackGroup, MutuallyExclusiveCallbackGroup
from rclpy.impl.rcutils_logger import RcutilsLogger
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy
from rclpy.service import Service
from std_srvs.srv import Trigger

from ..lifecycle.entities import guard_callback, service_failure
from ..outputs.mapping import MappingOutputs
from ..params.declare import NodeParams, resolve_directory

#: Requests a service holds while earlier ones are served: a burst of 50 concurrent callers is all answered.
SERVICE_QUEUE_DEPTH = 256
SERVICE_QOS = QoSProfile(
    depth=SERVICE_QUEUE_DEPTH,
    history=HistoryPolicy.KEEP_LAST,
    reliability=ReliabilityPolicy.RELIABLE,
    durability=DurabilityPolicy.VOLATILE,
)


class MappingServices:
    """Handlers of the node's Trigger services; `create` makes them on the node (once, at construction).

    Args:
        logger: the node's logger.
        params: returns the current parameter snapshot (`output_dir` is live).
        outputs: returns the active `MappingOutputs`, None while not active.
        reset_stream: starts a new stream; returns the number of queued frames discarded (None: not active).
        save_session / load_session: the node's; return the report line, raise (SessionError, OSError, ...)
            with the reason.
        on_failure: called with `(service name, exception)` when a handler failed unexpectedly (counted).
    """

    def __init__(
        self,
        logger: RcutilsLogger,
        params: Callable[[], NodeParams],
        outputs: Callable[[], MappingOutputs | None],
        reset_stream: Callable[[], int | None],
        save_session: Callable[[], str],
        load_session: Callable[[], str],
        on_failure: Callable[[str, Exception], None] = lambda where, exc: None,
    ) -> None:
        self._logger = logger
        self._params = params
        self._outputs = outputs
        self._reset_stream = reset_stream
        self._sessions = {"save_session": save_session, "load_session": load_session}
        self._on_failure = on_failure
        self._saves = 0  # numbers the files of this process's saves (two saves in one second never collide)

    def create(self, node: Node) -> list[Service]:
        """Create the services on `node`, each in its own mutually exclusive callback group (queue
        `SERVICE_QUEUE_DEPTH`): a slow `~/load_session` (hashing a large map) never holds `~/save_map` or
        `~/reset` (the node's locks order what must not overlap)."""
        handlers = {
            "reset": self.on_reset,
            "save_map": self.on_save_map,
            "save_session": lambda request, response: self._session_call("save_session", response),
            "load_session": lambda request, response: self._session_call("load_session", response),
        }
        return [
            node.create_service(
                Trigger,
                f"~/{name}",
                guard_callback(f"service_{name}", handler, self._on_failure, service_failure(name)),
                qos_profile=SERVICE_QOS,
                callback_group=MutuallyExclusiveCallbackGroup(),
            )
            for name, handler in handlers.items()
        ]

    def _session_call(self, name: str, response: Trigger.Response) -> Trigger.Response:
        """`~/save_session` / `~/load_session`: the report line, or `success: false` and the reason."""
        if self._outputs() is None:
            response.success, response.message = False, "not active"
            return response
        try:
            response.message = self._sessions[name]()
        except Exception as exc:  # noqa: BLE001 - any failure is an answer (the map is kept)
            response.success, response.message = False, f"{name} failed: {exc}"
            self._logger.error(response.message)
            return response
        response.success = True
        self._logger.info(response.message)
        return response

    def on_reset(self, request: Trigger.Request, response: Trigger.Response) -> Trigger.Response:
        """`~/reset`: new stream (session, path, trajectory and map cleared, queued frames discarded)."""
        discarded = self._reset_stream()
        if discarded is None:
            response.success, response.message = False, "not active"
            return response
        response.success = True
        response.message = (
            f"reset: cache, trajectory and map cleared, {discarded} queued frame(s) discarded; the next "
            f"{self._params().kv_cache_scale_frames} frames form a new anchor phase"
        )
        self._logger.info(response.message)
        return response

    def on_save_map(self, request: Trigger.Request, response: Trigger.Response) -> Trigger.Response:
        """`~/save_map`: `map_<time>_<n>.ply` and `trajectory_<time>_<n>.tum` in `output_dir` (map_frame)."""
        outputs = self._outputs()
        if outputs is None:
            response.success, response.message = False, "not active"
            return response
        text = self._params().output_dir
        self._saves += 1
        tag = f"{time.strftime('%Y%m%d_%H%M%S')}_{self._saves:03d}"
        out_dir = None
        try:
            out_dir = resolve_directory(text)
            out_dir.mkdir(parents=True, exist_ok=True)
            if outputs.map_size() == 0:
                response.success = False
                response.message = f"save_map: nothing saved, the map has 0 points ({_why_empty(outputs)})"
                self._logger.warning(response.message)
                return response
            response.message = outputs.save(out_dir, tag)
            if self._params().session_save_with_map:
                with_session = self._session_call("save_session", Trigger.Response())
                if not with_session.success:
                    raise OSError(with_session.message)
                response.message += f"; {with_session.message}"
        except Exception as exc:  # noqa: BLE001 - any failure is an answer, never an exception out of the callback
            removed = _remove_save(out_dir, tag) if out_dir is not None else 0
            response.success = False
            response.message = (
                f"save_map failed in '{text}': {type(exc).__name__}: {exc}"
                f"{f' ({removed} partial file(s) removed)' if removed else ''}"
            )
            self._logger.error(response.message)
            return response
        response.success = True
        self._logger.info(f"saved {response.message}")
        return response


def _why_empty(outputs: MappingOutputs) -> str:
    """Why the map is empty: the stats that explain it (anchor phase / scale not converged / out of range)."""
    stats = outputs.trajectory_stats()
    parts = [f"{stats.get('trajectory_poses', 0)} poses"]
    if stats.get("map.points_out_of_range"):
        parts.append(f"{stats['map.points_out_of_range']} points outside the voxel key range")
    if not stats.get("scale_converged", True):
        parts.append(f"{stats.get('held_keyframes', 0)} keyframes held until the scale converges")
    return ", ".join(parts)


def _remove_save(out_dir: Path, tag: str) -> int:
    """Remove the files of the save `tag` (a full disk leaves every file of a save or none)."""
    removed = 0
    for path in (
        out_dir / f"map_{tag}.ply",
        out_dir / f"trajectory_{tag}.tum",
        out_dir / f"map_{tag}.pgm",
        out_dir / f"map_{tag}.yaml",
    ):
        try:
            path.unlink()
            removed += 1
        except OSError:
            pass
    return removed


class LoopRejecter(Protocol):
    """What `~/reject_loop` calls per camera (`LoopOutputs.reject_last_loop`: its report line)."""

    def reject_last_loop(self) -> str: ...


def create_reject_loop_service(
    node: Node,
    group: CallbackGroup,
    loops: Callable[[], list[LoopRejecter]],
    on_failure: Callable[[str, Exception], None],
) -> None:
    """`~/reject_loop` (std_srvs/Trigger): every camera's closer removes its last accepted loop and the map,
    path and correction from before it are published (`LoopCloser.reject_last_loop`); `success` false when
    none had a loop to remove, or "not active" while no closer runs."""

    def handle(request: Trigger.Request, response: Trigger.Response) -> Trigger.Response:
        try:
            active = loops()
            if not active:
                return Trigger.Response(success=False, message="not active (or loop_closure.enabled false)")
            messages = [loop.reject_last_loop() for loop in active]
            removed = any(m.startswith("last loop removed") for m in messages)
            return Trigger.Response(success=removed, message="; ".join(messages))
        except Exception as exc:  # noqa: BLE001 - a raising service callback would end the executor's spin
            on_failure("service_reject_loop", exc)
            return Trigger.Response(success=False, message=f"reject_loop failed: {type(exc).__name__}: {exc}")

    node.create_service(Trigger, "~/reject_loop", handle, qos_profile=SERVICE_QOS, callback_group=group)
