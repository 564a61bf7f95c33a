"""tools/evaluation/: trajectory error of a run or a sequence (docs/architecture.md)."""
