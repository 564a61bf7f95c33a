"""ros/messages/: numpy <-> message builders, both directions (docs/architecture.md)."""
