"""The lock order of engine/lock_order.py, asserted (no DDS): `OrderedLock` refuses an acquisition out of
order, and an in-process tiny node (its inference, publish, map and loop-closure threads running) goes
through frames, /diagnostics, `~/path`, a forced loop-closure pass, `~/save_session`, `~/load_session` and
`~/reset` with every lock taken in the declared order."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import rclpy
from builtin_interfaces.msg import Time
from rclpy.parameter import Parameter
from ros_helpers import TINY_NODE_PARAMS
from std_msgs.msg import Header

from lingbot_map_ros.engine import lock_order
from lingbot_map_ros.engine.lock_order import LOCK_ORDER, LockOrderError, OrderedLock
from lingbot_map_ros.ros.input.intake import InputFrame
from lingbot_map_ros.ros.node import LingBotMapNode

FRAMES = 10


@pytest.fixture
def strict(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    monkeypatch.setattr(lock_order, "STRICT", True)
    monkeypatch.setattr(lock_order, "violations", [])
    yield lock_order.violations


def test_a_lock_out_of_order_is_refused_and_recorded(strict: list[str]) -> None:
    session, publish, pose = (
        OrderedLock(n) for n in ("camera.session_lock", "camera.publish_lock", "pose.lock")
    )
    with session, publish, pose:  # in order
        pass
    with pose, pytest.raises(LockOrderError, match="took camera.publish_lock while holding pose.lock"):
        publish.acquire()
    assert not publish.locked() and strict == [
        "took camera.publish_lock while holding pose.lock (docs: engine/lock_order.py)"
    ]
    other = OrderedLock("camera.session_lock")
    with session, other:  # the same rank: two cameras' session locks (taken in camera order)
        pass
    seen: list[bool] = []
    thread = threading.Thread(target=lambda: seen.append(publish.acquire(timeout=1)))
    with pose:  # another thread's stack is its own
        thread.start()
        thread.join()
    publish.release()
    assert seen == [True] and len(LOCK_ORDER) == len(set(LOCK_ORDER))


def _wait(condition, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_the_nodes_paths_take_their_locks_in_order(strict: list[str], tmp_path: Path) -> None:
    context = rclpy.Context()
    rclpy.init(context=context)
    params = {
        **TINY_NODE_PARAMS,
        "autostart": False,
        "tf.mode": "map_to_camera",
        "session.dir": str(tmp_path),
        "loop_closure.enabled": True,
    }
    node = LingBotMapNode(
        context=context, parameter_overrides=[Parameter(k, value=v) for k, v in params.items()]
    )
    try:
        assert node.autostart()
        camera = node.cameras[""]
        rng = np.random.default_rng(0)
        for i in range(FRAMES):  # through the scheduler: inference, publish and map threads
            rgb = rng.integers(0, 256, (42, 56, 3), dtype=np.uint8)
            header = Header(stamp=Time(sec=100 + i), frame_id="cam")
            assert node._submit("", InputFrame(header, rgb, time.monotonic(), camera.outputs.state.stream))
        _wait(lambda: camera.outputs.frames_published == FRAMES)
        node.publish_diagnostics()
        assert camera.outputs.publish_path()
        (loop,) = node._loops()
        loop.optimize()  # a forced pass: the correction path (apply, path, pose, map, closer locks)
        saved = node.save_session()
        name = re.search(r"session\.load_path:=(\S+)", saved).group(1)
        assert node.set_parameters([Parameter("session.load_path", value=name)])[0].successful
        assert "loaded session" in node.load_session()
        assert node.reset_stream() == 0
        node.trigger_deactivate()
    finally:
        node.trigger_cleanup()
        node.destroy_node()
        rclpy.shutdown(context=context)
    assert strict == []
