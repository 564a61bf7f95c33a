"""The mapping node over the kidnapped drifting oracle (tools/loop/reloc_oracle.py): for the tracking-state
DDS test only. test/loop_oracle_node.py's node with a `KidnapOracle`, which also answers a covered (black)
image: the stream's pose stays, its confidence drops, as a real model's would."""

from __future__ import annotations

import sys

from loop_oracle_node import LoopOracleNode

from lingbot_map_ros.ros.lifecycle.shutdown import run_node
from lingbot_map_ros.ros.node import SHUTDOWN_STEP_WAIT_S
from lingbot_map_ros.tools.loop.reloc_oracle import KidnapOracle


class KidnapOracleNode(LoopOracleNode):
    """`LoopOracleNode` whose model is the kidnapped drifting oracle of `oracle_scene()`."""

    ORACLE = KidnapOracle


if __name__ == "__main__":
    sys.exit(run_node(KidnapOracleNode, SHUTDOWN_STEP_WAIT_S, None, True))
