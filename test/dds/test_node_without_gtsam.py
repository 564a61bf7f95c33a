"""The node in an install without gtsam and evo (issue 29): a real node process over DDS whose Python cannot
import them (test/without_module.py) configures, poses frames and reports loop closure off (one WARN, the
reason in /diagnostics), although `loop_closure.enabled` is true (the default)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from attack_helpers import RELIABLE, collect, status_of, warm_up
from builtin_interfaces.msg import Time
from diagnostic_msgs.msg import DiagnosticArray
from geometry_msgs.msg import PoseStamped
from ros_helpers import RosClient, start_tiny_node
from sensor_msgs.msg import Image
from std_msgs.msg import Header
from without_module import hide_modules

from lingbot_map_ros.ros.messages.conversions import rgb_to_image

pytestmark = pytest.mark.dds


def test_node_without_gtsam_maps_with_loop_closure_off(
    ros_client: RosClient, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = "no_gtsam"
    with monkeypatch.context() as env:  # the node's environment only
        env.setenv("PYTHONPATH", hide_modules(tmp_path / "hook", "gtsam", "evo"))
        proc = start_tiny_node(
            tmp_path, name, {"loop_closure.enabled": True, "diagnostics_rate": 10.0}, client=ros_client
        )
    try:
        poses = collect(ros_client, PoseStamped, f"/{name}/{name}/camera_pose")
        diagnostics = collect(ros_client, DiagnosticArray, "/diagnostics")
        pub = ros_client.publisher(Image, f"/{name}/image", RELIABLE)
        ros_client.wait_for_subscribers(pub)
        frames = np.random.default_rng(0).integers(0, 256, (4, 48, 64, 3), dtype=np.uint8)
        warm_up(
            pub, poses, lambda i: rgb_to_image(frames[i % 4], Header(stamp=Time(sec=10 + i), frame_id="cam"))
        )

        def off_while_posing(msg: DiagnosticArray) -> dict[str, str] | None:
            values = (status_of(msg, name) or (0, "", {}))[2]
            published = int(values.get("frames_published", 0))
            return values if "loop_closure_off" in values and published >= 1 else None

        statuses = diagnostics.wait_for(lambda msgs: any(map(off_while_posing, msgs)))
        reason = next(v for v in map(off_while_posing, statuses) if v)["loop_closure_off"]
        assert "No module named 'gtsam'" in reason and "pip install gtsam" in reason, reason
    finally:
        assert proc.stop() == 0
    log = proc.output()
    assert "No module named 'gtsam' (hidden by the test)" in log, log[-3000:]
    assert log.count("loop closure off") == 1, log[-3000:]
