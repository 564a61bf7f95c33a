"""ros/lifecycle/: configure/activate/cleanup machinery of the node process (docs/architecture.md)."""
