"""ros/params/: the parameter table, its row type, the generated snapshot and docs, declaration
(docs/architecture.md)."""
