"""The `lingbot_map_node` entry point: the start-up signal handlers (ros/lifecycle/startup_signals.py), then
the node.

Its own module so that neither startup_signals.py (which imports nothing of the package) nor node.py (whose
`python -m` start installs the same handlers) imports the other: no import cycle.
"""

from __future__ import annotations

from .lifecycle.startup_signals import exit_quietly_on_signals


def main() -> int:
    """Install the start-up handlers, then import and run the node's `main` (torch and rclpy: ~2 s)."""
    exit_quietly_on_signals()
    from .node import main as node_main

    return node_main()
