"""tools/batch/: many bags on a Ray pool (docs/architecture.md)."""
