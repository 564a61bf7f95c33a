"""lingbot_map_ros.ros (see docs/architecture.md)."""
