"""The mapping node over the kidnapped drifting oracle (tools/reloc_oracle.py): for the tracking-state DDS
test only. As test/loop_oracle_node.py, with a `KidnapOracle`, which also answers a covered (black) image:
the stream's pose stays, its confidence drops, as a real model's would."""

from __future__ import annotations

import sys

from loop_oracle_node import DRIFT, oracle_scene

from lingbot_map_ros.ros.node import SHUTDOWN_STEP_WAIT_S, LingBotMapNode
from lingbot_map_ros.ros.pipeline import Pipeline
from lingbot_map_ros.ros.shutdown import run_node
from lingbot_map_ros.tools.loop_oracle import image_descriptor
from lingbot_map_ros.tools.reloc_oracle import KidnapOracle


class KidnapOracleNode(LingBotMapNode):
    """`LingBotMapNode` whose model is the kidnapped drifting oracle of `oracle_scene()`."""

    def build_pipeline(self) -> Pipeline:
        pipeline = super().build_pipeline()
        oracle = KidnapOracle(pipeline.cameras.model, oracle_scene(), DRIFT, seed=0)
        pipeline.model = pipeline.cameras.model = oracle  # the engine's model seam
        pipeline.loop_descriptor = image_descriptor
        self.get_logger().warning("test node: the model is the kidnapped oracle (tools/reloc_oracle.py)")
        return pipeline


if __name__ == "__main__":
    sys.exit(run_node(KidnapOracleNode, SHUTDOWN_STEP_WAIT_S, None, True))
