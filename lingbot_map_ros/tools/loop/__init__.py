"""tools/loop/: loop closure and relocalisation on the drifting oracle (docs/architecture.md)."""
