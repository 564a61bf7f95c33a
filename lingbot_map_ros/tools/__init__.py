"""lingbot_map_ros.tools (see docs/architecture.md)."""
