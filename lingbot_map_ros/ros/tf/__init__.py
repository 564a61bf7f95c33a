"""ros/tf/: named like tf2_ros (broadcaster, buffer, listener) + how TF comes in and goes out
(docs/architecture.md)."""
