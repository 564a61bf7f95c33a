"""tools/export/: a run or session to COLMAP / nerfstudio (docs/architecture.md)."""
