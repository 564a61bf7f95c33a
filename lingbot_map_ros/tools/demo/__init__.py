"""tools/demo/: the whole job on one machine (docs/architecture.md)."""
