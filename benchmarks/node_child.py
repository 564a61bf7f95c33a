"""What the benchmarks that run the mapping node next to DDS share (node_e2e, soak_node, tf_rates,
session_attacks, node_overhead): the DDS environment, `--set NAME=VALUE` node parameters and the CPU per
thread of the node's process. The node process itself is the package's `tools/node_process.NodeProcess`
(the demo's and the tests' helper too): `NodeProcess.start(log, params, remaps, name=...)`, `.stop()`.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from lingbot_map_ros.tools.live.dds_env import isolated_dds_env  # noqa: E402


def use_isolated_dds() -> dict[str, str]:
    """DDS on this machine in a private domain (`tools.dds.isolated_dds_env`; an exported ROS_DOMAIN_ID is
    kept), written into os.environ before rclpy starts here, so this process and its children share it."""
    exported = os.environ.get("ROS_DOMAIN_ID")
    env = isolated_dds_env(domain_id=int(exported) if exported else None)
    os.environ.update(env)
    return env


def parameter_value(text: str) -> object:
    """A `--set NAME=VALUE` value: JSON when it parses (numbers, booleans, lists), else the string."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def parameter_overrides(items: list[str]) -> dict[str, object]:
    """`--set NAME=VALUE` arguments as node parameters."""
    return {name: parameter_value(value) for name, value in (item.split("=", 1) for item in items)}


def thread_cpu(pid: int) -> dict[int, tuple[str, float]]:
    """CPU seconds (user + system) of every thread of process `pid`, with its name (Linux /proc)."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            stat = (task / "stat").read_text()
            name = (task / "comm").read_text().strip()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        out[int(task.name)] = (name, (int(fields[11]) + int(fields[12])) / tick)
    return out


def thread_shares(before: dict, after: dict, seconds: float) -> list[dict]:
    """Every thread's CPU share over a window between two `thread_cpu` readings (1.0 = one core busy),
    busiest first: `{"tid", "name", "cpu"}`."""
    rows = [
        {"tid": tid, "name": name, "cpu": round((cpu - before.get(tid, (name, 0.0))[1]) / seconds, 3)}
        for tid, (name, cpu) in after.items()
    ]
    return sorted(rows, key=lambda r: -r["cpu"])
