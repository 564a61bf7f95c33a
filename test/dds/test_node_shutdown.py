"""Stopping the node (issue 19, item 7), over real DDS with the node as a subprocess (tiny preset, CPU).

* A stop while frames flow logs no ERROR: the context's shutdown destroyed the publishers while the map
  thread still integrated and published (`[ERROR] map_worker failed (InvalidHandle)`, ~1 stop in 15 with a
  light map). Here the map work is heavy (every pixel mapped), so a stop nearly always finds it busy.
* `deactivate` and `cleanup` while 30 Hz frames flow answer within the spec's bounds (1 s, 2 s; issue 29)
  times a margin for a loaded CI machine.
* Two SIGINTs 0.1 s apart (what one Ctrl-C under a non-interactive `ros2 launch` delivers: from the terminal
  and again from launch) are one request: the clean shutdown runs to its end (rc 0, "clean shutdown
  complete"), where the second signal used to take the fast exit.
"""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path

import pytest
from attack_helpers import RELIABLE, collect, warm_up
from builtin_interfaces.msg import Time
from lifecycle_msgs.msg import Transition
from lifecycle_msgs.srv import ChangeState
from nav_msgs.msg import Odometry
from ros_helpers import RosClient, load_frames, start_tiny_node
from sensor_msgs.msg import Image
from std_msgs.msg import Header

from lingbot_map_ros.ros.lifecycle.shutdown import SAME_REQUEST_S
from lingbot_map_ros.ros.messages.conversions import rgb_to_image

pytestmark = pytest.mark.dds

#: Heavy map work: a 112-px-wide network input, every pixel mapped, frame clouds published, a deep map queue.
BUSY_MAP_PARAMS = {
    "model.image_width": 112,
    "map.stride": 1,
    "map.conf_threshold": 0.0,
    "publish.frame_cloud": True,
    "publish.depth": False,
    "queue_size": 4,
}
STOPS = (1, 2, 2)  # signals per stop: one SIGINT, then twice two SIGINTs 0.1 s apart
SECOND_SIGNAL_GAP_S = 0.1


class FrameStream:
    """Publishes frames on a background thread every `period_s` until `stop`."""

    def __init__(self, pub: object, frames: list, period_s: float = 0.05) -> None:
        self._pub, self._frames, self._period_s = pub, frames, period_s
        self._stop = threading.Event()
        self.sent = 0
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self._period_s):
            frame = self._frames[self.sent % len(self._frames)]
            stamp = Time(sec=1000 + self.sent // 20, nanosec=(self.sent % 20) * 50_000_000)
            self._pub.publish(rgb_to_image(frame, Header(stamp=stamp, frame_id="cam")))
            self.sent += 1

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)


def test_stop_while_frames_flow_is_clean_and_a_quick_second_sigint_is_the_same_request(
    ros_client: RosClient, tmp_path: Path
) -> None:
    assert SECOND_SIGNAL_GAP_S < SAME_REQUEST_S
    frames = load_frames(4)
    for run, signals in enumerate(STOPS):
        name = f"stop_flow_{run}"
        node = f"/{name}/{name}"
        proc = start_tiny_node(tmp_path, name, BUSY_MAP_PARAMS, client=ros_client)
        odom = collect(ros_client, Odometry, f"{node}/odometry")
        pub = ros_client.publisher(Image, f"/{name}/image", RELIABLE)
        ros_client.wait_for_subscribers(pub)
        warm_up(
            pub, odom, lambda i: rgb_to_image(frames[i % 4], Header(stamp=Time(sec=10 + i), frame_id="cam"))
        )
        stream = FrameStream(pub, frames)
        try:
            start = len(odom)
            odom.wait_for(start + 3, timeout=60.0)  # frames flow through the node now
            if signals == 2:
                proc.proc.send_signal(signal.SIGINT)
                time.sleep(SECOND_SIGNAL_GAP_S)
            code = proc.stop(timeout=30)  # SIGINT (the second one of a double) and wait
        finally:
            stream.stop()
        out = proc.output()
        assert code == 0, f"run {run}: exit {code}\n{out[-3000:]}"
        errors = [line for line in out.splitlines() if "[ERROR]" in line or "[FATAL]" in line]
        assert not errors, f"run {run}: {errors}"
        assert "Traceback" not in out, out[-3000:]
        assert "SIGINT: clean shutdown complete (exit code 0)" in out, out[-3000:]
        assert "exiting now" not in out, out[-3000:]  # no fast exit: neither the second signal nor the grace
        if signals == 2:
            assert "SIGINT again" in out and "the same request" in out, out[-3000:]
        print(f"\nrun {run}: {signals} SIGINT(s), {stream.sent} frames streamed, clean exit 0, no ERROR")


#: Bounds asserted here: the spec's (deactivate 1 s, cleanup 2 s; issue 29) times a margin for a loaded 2-core
#: CI machine; the precise times are benchmarks/lifecycle_stop.py's (docs/performance.md).
DEACTIVATE_BOUND_S = 3.0
CLEANUP_BOUND_S = 4.0


def test_deactivate_and_cleanup_answer_quickly_while_frames_flow(
    ros_client: RosClient, tmp_path: Path
) -> None:
    name = "stop_lifecycle"
    node = f"/{name}/{name}"
    frames = load_frames(4)
    proc = start_tiny_node(tmp_path, name, BUSY_MAP_PARAMS, client=ros_client)
    odom = collect(ros_client, Odometry, f"{node}/odometry")
    pub = ros_client.publisher(Image, f"/{name}/image", RELIABLE)
    ros_client.wait_for_subscribers(pub)

    def change(transition: int) -> float:
        start = time.monotonic()
        request = ChangeState.Request(transition=Transition(id=transition))
        assert ros_client.call(ChangeState, f"{node}/change_state", request).success
        return time.monotonic() - start

    stream = FrameStream(pub, frames, period_s=1.0 / 30.0)
    try:
        for cycle in range(2):
            start = len(odom)
            odom.wait_for(start + 3, timeout=60.0)  # frames flow through the node now
            deactivate = change(Transition.TRANSITION_DEACTIVATE)
            cleanup = change(Transition.TRANSITION_CLEANUP)
            print(
                f"\ncycle {cycle}: deactivate {deactivate:.2f} s, cleanup {cleanup:.2f} s (frames at 30 Hz)"
            )
            assert deactivate < DEACTIVATE_BOUND_S and cleanup < CLEANUP_BOUND_S
            change(Transition.TRANSITION_CONFIGURE)
            change(Transition.TRANSITION_ACTIVATE)
        code = proc.stop(timeout=30)
    finally:
        stream.stop()
    out = proc.output()
    assert code == 0 and "exiting now" not in out, out[-3000:]
