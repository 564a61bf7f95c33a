"""The DDS endpoints of the CLI tools (replay, record, demo, the node-process helper), not of the node.

`client.py` (a tool process's rclpy node, executor and Trigger calls), `bag_player.py` (replay's publishers),
`bag_recorder.py` (record's raw subscriptions), `mapping_monitor.py` (the demo watching the node), `qos.py`
(the tools' QoS choices), `message_types.py` (message classes by type name). They live under `ros/` because
rclpy is imported only there; the node imports none of them (docs/architecture.md).
"""
