"""Waiting for the node to finish mapping what the demo sent, with a progress bar of posed frames."""

from __future__ import annotations

import sys
import time

from tqdm import tqdm

from lingbot_map_ros.ros.dds_tools.mapping_monitor import MappingMonitor
from lingbot_map_ros.tools.live.node_process import NodeProcess, NodeProcessError


def wait_until_done(
    monitor: MappingMonitor,
    sent: int,
    node: NodeProcess,
    deadline: float,
    settle_s: float = 1.0,
    lost_after_s: float = 10.0,
) -> None:
    """Block (with a progress bar of posed frames) until `monitor.done(sent)` and no pose for `settle_s`.

    Also returns when the node is idle and no further frame has arrived for `lost_after_s`: the missing frames
    were lost before the node (the report then shows received < sent and fails). NodeProcessError if the node
    exits first, TimeoutError once `deadline` (time.monotonic()) passed."""
    arrived, arrived_at = -1, time.monotonic()
    with tqdm(total=sent, desc="mapping", unit="frame", file=sys.stderr) as bar:
        while True:
            bar.update(monitor.posed - bar.n)
            now = time.monotonic()
            if monitor.arrived() != arrived:
                arrived, arrived_at = monitor.arrived(), now
            settled = now - monitor.last_pose_time >= settle_s
            if settled and (monitor.done(sent) or (monitor.idle() and now - arrived_at >= lost_after_s)):
                return
            if not node.alive():
                raise NodeProcessError(
                    f"the node exited with code {node.proc.returncode} while mapping; "
                    f"its log ends with:\n{node.log_tail()}"
                )
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"the node had not handled all {sent} frames before the timeout "
                    f"(diagnostics: {monitor.diagnostics})"
                )
            time.sleep(0.1)
