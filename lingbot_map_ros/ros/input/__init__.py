"""ros/input/: messages in -> frames and samples for the engine (docs/architecture.md)."""
