"""The mapping node over the drifting oracle in twin rooms (tools/loop/loop_oracle.py "Twin rooms"): for the
twin rooms DDS test only (test/dds/test_node_twin_rooms.py).

As test/loop_oracle_node.py, with `twin_scene(apart_m)`: the camera laps one room, then an identical room
`apart_m` along x, and a verification pass across the rooms returns the look-alike's pose. The room distance
comes from `TWIN_ROOMS_M` in the environment (the test sets it per node). `TWIN_ROOMS_UNGATED=1` turns the
closer's consistency checks off (chi-square gate and odometry check at values that refuse nothing): the
control that shows what the checks prevent (issue 30: the rooms merge). Verification passes may take all of
the inference thread's spare time (`GpuGaps(budget=1.0)`, a GPU idle between camera frames): with the node's
3 % on this CPU every pass waits for the end of the stream, and the corrections could not be seen one by one.
"""

from __future__ import annotations

import os
import sys
from dataclasses import replace

from lingbot_map_ros.engine.gpu_gaps import GpuGaps
from lingbot_map_ros.engine.loop.config import LoopClosureConfig
from lingbot_map_ros.ros.lifecycle.pipeline import Pipeline
from lingbot_map_ros.ros.lifecycle.shutdown import run_node
from lingbot_map_ros.ros.node import SHUTDOWN_STEP_WAIT_S, LingBotMapNode
from lingbot_map_ros.ros.outputs import loop as loop_outputs
from lingbot_map_ros.tools.bags.synthetic_scene import SceneConfig
from lingbot_map_ros.tools.loop.loop_oracle import DriftConfig, DriftingOracle, LoopScene, image_descriptor

#: 80 frames at 112 x 84 (the network size), 1¼ laps a room: `loop-eval --seed 11 --frames 80 --twin-rooms-m`.
WIDTH, HEIGHT, FRAMES, TURNS = 112, 84, 80, 2.5
DRIFT = DriftConfig(scale_per_m=0.02, yaw_deg_per_m=1.0)
APART_ENV, UNGATED_ENV = "TWIN_ROOMS_M", "TWIN_ROOMS_UNGATED"


def twin_scene(apart_m: float) -> LoopScene:
    return LoopScene.twin_rooms(
        SceneConfig(width=WIDTH, height=HEIGHT, frames=FRAMES, seed=18, supersample=1), TURNS, apart_m
    )


def _ungated(value: object) -> LoopClosureConfig:
    """The node's loop closure configuration with the consistency checks refusing nothing (the control)."""
    config = _configured(value)
    return replace(config, max_loop_chi2=1e12, odometry_tolerance_m=1e9)


_configured = loop_outputs.loop_closure_config


class TwinRoomsNode(LingBotMapNode):
    """`LingBotMapNode` whose model is the drifting oracle of `twin_scene($TWIN_ROOMS_M)`."""

    def build_pipeline(self) -> Pipeline:
        pipeline = super().build_pipeline()
        scene = twin_scene(float(os.environ[APART_ENV]))
        oracle = DriftingOracle(pipeline.cameras.model, scene, DRIFT, seed=0)
        pipeline.model = pipeline.cameras.model = oracle  # the engine's model seam
        pipeline.loop_descriptor = image_descriptor
        pipeline.gaps = GpuGaps(budget=1.0)  # module doc: each correction while the rooms stream
        if os.environ.get(UNGATED_ENV) == "1":
            loop_outputs.loop_closure_config = _ungated
            self.get_logger().warning("test node: loop consistency checks off (the control)")
        self.get_logger().warning("test node: the model is the drifting oracle in twin rooms")
        return pipeline


if __name__ == "__main__":
    sys.exit(run_node(TwinRoomsNode, SHUTDOWN_STEP_WAIT_S, None, True))
