"""ros/services/: Trigger services and the saved sessions behind two of them (docs/architecture.md)."""
