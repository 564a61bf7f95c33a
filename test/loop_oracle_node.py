"""The mapping node over the drifting oracle (tools/loop/loop_oracle.py): for the loop closure DDS test only.

`LoopOracleNode` is the production node whose configure step puts a `DriftingOracle` of `oracle_scene()` in
the session's model seam (as test/fault_node.py does with faults) and hands loop closure the oracle's place
descriptor; verification goes through the same model (the oracle's two-frame pass). The test renders the same
scene and publishes its images.
"""

from __future__ import annotations

import sys

from lingbot_map_ros.ros.lifecycle.pipeline import Pipeline
from lingbot_map_ros.ros.lifecycle.shutdown import run_node
from lingbot_map_ros.ros.node import SHUTDOWN_STEP_WAIT_S, LingBotMapNode
from lingbot_map_ros.tools.bags.synthetic_scene import SceneConfig
from lingbot_map_ros.tools.loop.loop_oracle import DriftConfig, DriftingOracle, LoopScene, image_descriptor

#: The scene: 40 frames at 112 x 84 (the network size: the oracle knows frames by their bytes), 1¼ laps.
WIDTH, HEIGHT, FRAMES, TURNS = 112, 84, 40, 1.25
DRIFT = DriftConfig(scale_per_m=0.03, yaw_deg_per_m=3.0)
#: The node's parameters the oracle needs (network width = scene width; 2 anchor frames; tiny window).
ORACLE_PARAMS = {
    "model.image_width": WIDTH,
    "kv_cache.scale_frames": 2,
    "kv_cache.sliding_window": 4,
    "kv_cache.max_window": 4,
    "loop_closure.min_similarity": 0.5,
    "tf.mode": "map_to_camera",
}


def oracle_scene() -> LoopScene:
    return LoopScene.render(
        SceneConfig(width=WIDTH, height=HEIGHT, frames=FRAMES, seed=18, supersample=1), TURNS
    )


class LoopOracleNode(LingBotMapNode):
    """`LingBotMapNode` whose model is an oracle of `oracle_scene()`: `ORACLE` (a `DriftingOracle`; the
    kidnapped one in test/kidnap_oracle_node.py)."""

    ORACLE: type[DriftingOracle] = DriftingOracle

    def build_pipeline(self) -> Pipeline:
        pipeline = super().build_pipeline()
        oracle = self.ORACLE(pipeline.cameras.model, oracle_scene(), DRIFT, seed=0)
        pipeline.model = pipeline.cameras.model = oracle  # the engine's model seam
        pipeline.loop_descriptor = image_descriptor
        self.get_logger().warning(f"test node: the model is the oracle {self.ORACLE.__name__} (tools/)")
        return pipeline


if __name__ == "__main__":
    sys.exit(run_node(LoopOracleNode, SHUTDOWN_STEP_WAIT_S, None, True))
