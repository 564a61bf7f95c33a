"""tools/run/: one bag (or its topics) through the engine, no DDS (docs/architecture.md)."""
