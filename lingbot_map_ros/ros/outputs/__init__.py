"""ros/outputs/: publishers per camera (poses, path, map, loops, tracking state) and their options
(docs/architecture.md)."""
