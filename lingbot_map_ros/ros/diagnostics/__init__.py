"""ros/diagnostics/: counters, cause log and the /diagnostics message (docs/architecture.md)."""
