"""The node's std_srvs/Trigger services: `~/reset` and `~/save_map` (request → action → response message).

`~/reset` calls the node's `reset_stream` (stream generations, docs/node.md "Behaviour"); `~/save_map` writes
the map (binary PLY) and the trajectory (TUM) through `MappingOutputs.save`, atomically (temp file + rename)
into `output_dir`. Both answer "not active" while the node is not active, and log their response message.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from rclpy.callback_groups import CallbackGroup
from rclpy.impl.rcutils_logger import RcutilsLogger
from rclpy.node import Node
from rclpy.service import Service
from std_srvs.srv import Trigger

from .outputs import MappingOutputs
from .params import NodeParams


class MappingServices:
    """Handlers of `~/reset` and `~/save_map`; `create` makes the services on the node (activate).

    Args:
        logger: the node's logger.
        params: returns the current parameter snapshot (`output_dir` is live).
        outputs: returns the active `MappingOutputs`, None while not active.
        reset_stream: starts a new stream; returns the number of queued frames discarded (None: not active).
    """

    def __init__(
        self,
        logger: RcutilsLogger,
        params: Callable[[], NodeParams],
        outputs: Callable[[], MappingOutputs | None],
        reset_stream: Callable[[], int | None],
    ) -> None:
        self._logger = logger
        self._params = params
        self._outputs = outputs
        self._reset_stream = reset_stream
        self._saves = 0  # numbers the files of this process's saves (two saves in one second never collide)

    def create(self, node: Node, group: CallbackGroup) -> list[Service]:
        """Create `~/reset` and `~/save_map` on `node` in callback `group` (the caller destroys them)."""
        return [
            node.create_service(Trigger, "~/reset", self.on_reset, callback_group=group),
            node.create_service(Trigger, "~/save_map", self.on_save_map, callback_group=group),
        ]

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
        out_dir = Path(self._params().output_dir).expanduser()
        self._saves += 1
        try:
            response.message = outputs.save(out_dir, f"{time.strftime('%Y%m%d_%H%M%S')}_{self._saves:03d}")
        except (OSError, ValueError) as exc:
            response.success, response.message = False, f"save_map failed in '{out_dir}': {exc}"
            self._logger.error(response.message)
            return response
        response.success = True
        self._logger.info(f"saved {response.message}")
        return response
