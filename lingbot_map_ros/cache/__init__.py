"""lingbot_map_ros.cache (see docs/architecture.md)."""
