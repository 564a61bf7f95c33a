"""ros/cameras/: one camera of the node and the rounds over the cameras (inference thread)
(docs/architecture.md)."""
