"""The mapping node with `LINGBOT_MAP_FAULTS` injected into its model: for tests only (docs/reliability.md).

`ros_helpers.NodeProcess.start` runs this script instead of `lingbot_map_ros.ros.node` while the variable is
set. It is the production node (`LingBotMapNode`, same entry point, same shutdown) whose configure step wraps
the session's model in a `FaultInjectingModel`; an invalid spec fails configure with the reason.
"""

from __future__ import annotations

import sys

from fault_injection import FAULTS_ENV, FaultInjectingModel, faults_from_env

from lingbot_map_ros.ros.lifecycle.pipeline import ConfigureError, Pipeline
from lingbot_map_ros.ros.lifecycle.shutdown import run_node
from lingbot_map_ros.ros.node import SHUTDOWN_STEP_WAIT_S, LingBotMapNode


class FaultInjectingNode(LingBotMapNode):
    """`LingBotMapNode` whose session steps obey the fault plan of `LINGBOT_MAP_FAULTS`."""

    def build_pipeline(self) -> Pipeline:
        try:
            faults = faults_from_env()
        except ValueError as exc:
            raise ConfigureError(str(exc)) from exc
        pipeline = super().build_pipeline()
        if faults:
            self.get_logger().warning(f"{FAULTS_ENV} is set: injecting faults into model.step: {faults}")
            pipeline.model = pipeline.cameras.model = FaultInjectingModel(pipeline.cameras.model, faults)
        return pipeline


if __name__ == "__main__":
    sys.exit(run_node(FaultInjectingNode, SHUTDOWN_STEP_WAIT_S, None, True))
