"""lingbot_map_ros.engine (see docs/architecture.md)."""
