"""tools/live/: tools that talk to a running node over DDS (docs/architecture.md)."""
