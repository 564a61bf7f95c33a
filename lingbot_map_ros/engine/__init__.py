"""lingbot_map_ros.engine: a camera's stream, pose, map, loop closure and policy (no rclpy).

Halves and owners: docs/architecture.md (tree at the top) and docs/engine.md. The node (ros/) and the tools
(tools/) reach this package through its face only: engine/face.py (building a set of cameras, one camera's
`CameraState` and round, the settings dataclasses, the vocabulary a round hands back, sessions and files) and,
for the offline tools alone, engine/offline.py. This module imports nothing, so importing a submodule costs
only that submodule.
"""
