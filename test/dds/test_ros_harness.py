"""The issue-2 two-process test and the node's process-level behaviour (real DDS, node as a subprocess).

* a node subprocess receives an Image over DDS and answers std_srvs/Trigger calls; SIGINT exits cleanly;
* configure failures (bad checkpoint) exit non-zero with one clear error; a bad `-p` value exits non-zero.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from builtin_interfaces.msg import Time
from diagnostic_msgs.msg import DiagnosticArray
from rclpy.qos import QoSProfile, ReliabilityPolicy
from ros_helpers import NodeProcess, RosClient, load_frames, write_params_file
from sensor_msgs.msg import Image
from std_msgs.msg import Header
from std_srvs.srv import Trigger

from lingbot_map_ros.ros.diagnostics.stats import diagnostic_values
from lingbot_map_ros.ros.messages.conversions import rgb_to_image

pytestmark = pytest.mark.dds

RELIABLE = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
TINY = {"model.preset": "tiny", "model.device": "cpu", "model.image_width": 56, "kv_cache.scale_frames": 2}


def test_node_subprocess_receives_image_and_answers_trigger(
    ros_client: RosClient, tmp_path: Path, shared_dir: Path
) -> None:
    ns = "/harness"
    params_file = write_params_file(tmp_path / "params.yaml", {**TINY, "qos.reliability": "reliable"})
    node = NodeProcess.start(
        tmp_path,
        name="lingbot_map",
        namespace=ns,
        params_file=params_file,
        params={"output_dir": str(tmp_path / "out"), "diagnostics_rate": 10.0},
        remaps={"image": "/harness_camera/image_raw"},
    )
    try:
        node.wait_ready(ros_client, [f"{ns}/lingbot_map/reset", f"{ns}/lingbot_map/save_map"])
        diagnostics = ros_client.collect(DiagnosticArray, "/diagnostics", RELIABLE)
        pub = ros_client.publisher(Image, "/harness_camera/image_raw", RELIABLE)
        ros_client.wait_for_subscribers(pub)
        ros_client.wait_for_publishers(diagnostics)
        frame = load_frames(1)[0]
        pub.publish(rgb_to_image(frame, Header(stamp=Time(sec=42), frame_id="harness_cam")))

        def received(msgs: list[DiagnosticArray]) -> bool:
            return any(diagnostic_values(m).get("frames_received") == "1" for m in msgs)

        diagnostics.wait_for(received, timeout=20)
        response = ros_client.call(Trigger, f"{ns}/lingbot_map/reset")
        assert response.success and "anchor phase" in response.message
        saved = ros_client.call(Trigger, f"{ns}/lingbot_map/save_map")  # right after a reset: nothing to save
        assert not saved.success and "the map has 0 points" in saved.message, saved.message
    finally:
        code = node.stop()
    assert code == 0, node.output()
    assert "configured: preset tiny" in node.output()


def test_bad_checkpoint_fails_configure_with_one_clear_error(tmp_path: Path) -> None:
    bogus = tmp_path / "broken.pt"
    bogus.write_bytes(b"this is not a checkpoint")
    node = NodeProcess.start(
        tmp_path, name="lingbot_map_bad", params={**TINY, "model.checkpoint": str(bogus)}
    )
    try:
        node.proc.wait(60)
    finally:
        node.stop()
    out = node.output()
    assert node.proc.returncode == 1, out
    assert out.count("configure failed") == 1 and str(bogus) in out, out
    assert "autostart failed" in out


@pytest.mark.parametrize(
    ("override", "reasons"),
    [
        ({"kv_cache.sliding_window": 5000}, ["kv_cache.sliding_window"]),  # descriptor range (rclpy)
        (  # the node's own checks report every problem at once
            {"kv_cache.sliding_window": 999, "attention.backend": "cudnn", "model.image_width": 100},
            ["must be <= kv_cache.max_window (128)", "attention.backend must be one of", "multiple of 14"],
        ),
    ],
)
def test_invalid_parameter_on_the_command_line_exits_with_reason(
    tmp_path: Path, override: dict[str, object], reasons: list[str]
) -> None:
    node = NodeProcess.start(tmp_path, name="lingbot_map_badparam", params={**TINY, **override})
    try:
        node.proc.wait(60)
    finally:
        node.stop()
    out = node.output()
    assert node.proc.returncode == 2, out
    assert "invalid parameter" in out.lower() and all(reason in out for reason in reasons), out
    assert "Traceback" not in out, out
