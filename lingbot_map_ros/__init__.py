"""lingbot_map_ros: LingBot-Map streaming 3D reconstruction as a ROS 2 mapping node.

Layers (dependencies point one way, see docs/architecture.md):
cache -> model -> engine -> ros / tools.
"""

__version__ = "0.1.0"
