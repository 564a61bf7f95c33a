"""rclpy message classes looked up by their type name, for endpoints whose type is only known at run time
(a bag's connections, the ROS graph)."""

from __future__ import annotations

import importlib


def message_class(msgtype: str) -> type:
    """The rclpy message class of a type name such as `sensor_msgs/msg/Image`.

    Raises ValueError if the name is not `pkg/msg/Name` or the type is not installed."""
    parts = msgtype.split("/")
    if len(parts) != 3:
        raise ValueError(f"message type must look like 'pkg/msg/Name', got {msgtype!r}")
    package, kind, name = parts
    try:
        return getattr(importlib.import_module(f"{package}.{kind}"), name)
    except (ImportError, AttributeError) as err:
        raise ValueError(f"message type {msgtype} is not installed for rclpy ({err})") from err
