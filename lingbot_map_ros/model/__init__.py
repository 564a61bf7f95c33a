"""lingbot_map_ros.model (see docs/architecture.md)."""
