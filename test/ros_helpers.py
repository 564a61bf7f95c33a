"""Test harness for real-DDS tests: DDS isolation, node subprocesses, and rclpy client helpers.

* `configure_dds_environment()` (called by conftest.py at import, before any rclpy init): DDS stays on this
  machine (`ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST`), a `ROS_DOMAIN_ID` no other test session on the machine
  holds (an flock per id), `ROS_LOG_DIR` in a temp dir, the repo's big-SHM Fast DDS profile.
* `NodeProcess`: the tools' `NodeProcess` (`python -m <module> --ros-args --params-file ... -p ... -r ...`)
  with the inherited (venv) environment, readiness = its services answer, stop = SIGINT and a clean exit code.
* `RosClient`: the tools' `ClientNode` in its own context spun by a background thread, with helpers to
  publish, collect messages, call services and set parameters, every QoS explicit.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from fault_injection import FAULTS_ENV

from lingbot_map_ros.engine.geometry import invert_rigid
from lingbot_map_ros.ros.dds_tools.client import ClientNode
from lingbot_map_ros.ros.tf.buffer import TfBuffer
from lingbot_map_ros.ros.tf.listener import transform_to_matrix
from lingbot_map_ros.tools.live import node_process
from lingbot_map_ros.tools.live.dds_env import allocate_domain_id

REPO = Path(__file__).resolve().parents[1]
FAULT_NODE = Path(__file__).with_name("fault_node.py")  # the node with LINGBOT_MAP_FAULTS injected
SHARED = REPO.parent / "shared"
FRAMES_DIR = SHARED / "data" / "loop"
FASTDDS_PROFILE = REPO / "config" / "fastdds_localhost_big_shm.xml"
#: Base parameters of a node under test: tiny preset on CPU, 4 anchors, a small window, reliable deep input
#: (no frame lost to the test's timing), every confident-or-not pixel on a stride-4 grid in the map.
TINY_NODE_PARAMS: dict[str, Any] = {
    "model.preset": "tiny",
    "model.device": "cpu",
    "model.image_width": 56,
    "kv_cache.scale_frames": 4,
    "kv_cache.sliding_window": 8,
    "kv_cache.max_window": 16,
    "qos.reliability": "reliable",
    "qos.depth": 50,
    "queue_size": 50,
    "map.stride": 4,
    "map.conf_threshold": 0.0,
}
#: The node processes' python: the venv's, or `LINGBOT_NODE_PYTHON` (e.g. a venv with the real tf2_ros).
PYTHON = Path(
    os.environ.get("LINGBOT_NODE_PYTHON")
    or (REPO / ".venv" / "bin" / "python" if (REPO / ".venv" / "bin" / "python").exists() else sys.executable)
)


def configure_dds_environment() -> dict[str, str]:
    """Set the DDS variables in os.environ (children inherit them); returns what was set.

    A ROS_DOMAIN_ID already exported (e.g. by .ci/run) is kept; otherwise a free one is allocated.
    """
    if not FASTDDS_PROFILE.is_file():
        raise RuntimeError(f"the Fast DDS profile {FASTDDS_PROFILE} is missing")
    values = {
        "ROS_AUTOMATIC_DISCOVERY_RANGE": "LOCALHOST",
        "ROS_DOMAIN_ID": os.environ.get("ROS_DOMAIN_ID") or str(allocate_domain_id()),
        "ROS_LOG_DIR": tempfile.mkdtemp(prefix="lingbot_test_roslog_"),
        "FASTDDS_DEFAULT_PROFILES_FILE": str(FASTDDS_PROFILE),
    }
    os.environ.update(values)
    return values


def write_params_file(path: Path, params: dict[str, Any], node: str = "/**") -> Path:
    """A ROS 2 parameters YAML (`<node>: ros__parameters: {...}`), dotted names nested as ROS expects."""
    nested: dict[str, Any] = {}
    for name, value in params.items():
        *parents, leaf = name.split(".")
        level = nested
        for part in parents:
            level = level.setdefault(part, {})
        level[leaf] = value
    path.write_text(yaml.safe_dump({node: {"ros__parameters": nested}}, sort_keys=False))
    return path


class NodeProcess(node_process.NodeProcess):
    """`tools/node_process.NodeProcess` with the tests' defaults: a log file per start in `log_dir`, the
    venv's python, test/fault_node.py while `LINGBOT_MAP_FAULTS` is set, and failures as AssertionError (a
    node that dies before it is ready, or ignores SIGINT, fails the test). Each node runs in its own process
    group and is listed in `STARTED`: conftest's session fixture kills (SIGKILL, the whole group) and reports
    any still alive when the session ends, so no node outlives the suite (issue 20)."""

    STARTED: list[NodeProcess] = []

    @classmethod
    def start(  # type: ignore[override] - a log folder instead of a log file
        cls,
        log_dir: Path,
        module: str = node_process.NODE_MODULE,
        name: str | None = None,
        namespace: str | None = None,
        params_file: Path | None = None,
        params: dict[str, Any] | None = None,
        remaps: dict[str, str] | None = None,
        script: Path | None = None,
    ) -> NodeProcess:
        """Start `python -m module --ros-args` (`-r __node:=`, `-r __ns:=`, `--params-file`, `-p`, `-r`);
        `script`: a test's node script instead (e.g. test/loop_oracle_node.py)."""
        faults = module == node_process.NODE_MODULE and bool(os.environ.get(FAULTS_ENV))
        log_path = log_dir / f"{name or module.rsplit('.', 1)[-1]}_{int(time.time() * 1e3)}.log"
        proc = super().start(
            log_path,
            params,
            remaps,
            name=name,
            namespace=namespace,
            params_file=params_file,
            module=module,
            script=script or (FAULT_NODE if faults else None),
            python=PYTHON,
            env=os.environ.copy(),
            new_session=True,
        )
        cls.STARTED.append(proc)
        return proc

    def wait_ready(self, client: RosClient, services: Iterable[str], timeout: float = 60.0) -> None:
        """Wait until every (std_srvs/Trigger) service is available; fail fast if the process dies."""
        try:
            super().wait_ready(client, services, timeout)
        except node_process.NodeProcessError as exc:
            raise AssertionError(f"node not ready: {exc}\n{self.output()}") from None

    def stop(self, timeout: float = 20.0) -> int:
        """SIGINT, wait for the exit, return its code (kills and raises if it hangs)."""
        code = super().stop(timeout)
        if self.killed:
            raise AssertionError(f"node ignored SIGINT for {timeout} s:\n{self.output()}")
        return code


def start_tiny_node(
    tmp: Path,
    name: str,
    *params: Mapping[str, Any],
    namespace: str | None = None,
    client: RosClient | None = None,
    ready: Iterable[str] = ("reset",),
    faults: str | None = None,
    script: Path | None = None,
) -> NodeProcess:
    """The one way the DDS tests start a mapping node: `<namespace>/<name>` (namespace default `/<name>`)
    with `TINY_NODE_PARAMS` updated by each of `params` in order.

    `client`: wait until the node's `ready` services answer. `faults`: `LINGBOT_MAP_FAULTS` for this node
    only (it runs as test/fault_node.py; this process's environment is unchanged). `script`: another test
    node script (test/loop_oracle_node.py).
    """
    namespace = namespace or f"/{name}"
    merged = dict(TINY_NODE_PARAMS)
    for overrides in params:
        merged.update(overrides)
    saved = os.environ.get(FAULTS_ENV)
    if faults is not None:
        os.environ[FAULTS_ENV] = faults
    try:
        proc = NodeProcess.start(tmp, name=name, namespace=namespace, params=merged, script=script)
    finally:
        if saved is None:
            os.environ.pop(FAULTS_ENV, None)
        else:
            os.environ[FAULTS_ENV] = saved
    if client is not None:
        proc.wait_ready(client, [f"{namespace.rstrip('/')}/{name}/{service}" for service in ready])
    return proc


@contextlib.contextmanager
def in_process_node(params: Mapping[str, Any]) -> Iterator[Any]:
    """A `LingBotMapNode` in this process, in its own rclpy context, with `TINY_NODE_PARAMS` updated by
    `params`, configured and active (not spinning: no callbacks run); deactivated, cleaned up and destroyed
    on exit."""
    import rclpy
    from rclpy.parameter import Parameter

    from lingbot_map_ros.ros.node import LingBotMapNode

    context = rclpy.Context()
    rclpy.init(context=context)
    merged = {**TINY_NODE_PARAMS, **params}
    node = LingBotMapNode(
        context=context, parameter_overrides=[Parameter(k, value=v) for k, v in merged.items()]
    )
    assert node.autostart()
    yield node
    node.trigger_deactivate()
    node.trigger_cleanup()
    node.destroy_node()
    rclpy.shutdown(context=context)


class Collector:
    """Messages received on one subscription, with blocking waits."""

    def __init__(self) -> None:
        self.subscription: Any = None
        self.messages: list[Any] = []
        self._cond = threading.Condition()

    def __call__(self, msg: Any) -> None:
        with self._cond:
            self.messages.append(msg)
            self._cond.notify_all()

    def __len__(self) -> int:
        with self._cond:
            return len(self.messages)

    def clear(self) -> None:
        with self._cond:
            self.messages.clear()

    def wait_for(self, predicate: Callable[[list[Any]], bool] | int, timeout: float = 30.0) -> list[Any]:
        """Wait until `predicate(messages)` (or `len(messages) >= n`); returns a copy.

        Raises:
            AssertionError: on timeout.
        """
        check = (lambda msgs: len(msgs) >= predicate) if isinstance(predicate, int) else predicate
        deadline = time.monotonic() + timeout
        with self._cond:
            while not check(self.messages):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise AssertionError(f"timed out after {timeout} s with {len(self.messages)} message(s)")
                self._cond.wait(min(remaining, 0.1))
            return list(self.messages)


class RosClient(ClientNode):
    """The tools' `ClientNode` in a private context, spun by a background thread, with the tests' helpers:
    publish, collect, call any service, set and get remote parameters (use as a context manager)."""

    def __init__(self, name: str = "lingbot_test_client") -> None:
        super().__init__(name, private_context=True, spin_threads=1)
        self._clients: dict[tuple[type, str], Any] = {}

    def publisher(self, msg_type: type, topic: str, qos: Any) -> Any:
        return self.node.create_publisher(msg_type, topic, qos)

    def collect(self, msg_type: type, topic: str, qos: Any) -> Collector:
        """Subscribe and collect every message of `topic` into a `Collector`."""
        collector = Collector()
        collector.subscription = self.node.create_subscription(msg_type, topic, collector, qos)
        return collector

    def wait_for_publishers(self, *collectors: Collector, count: int = 1, timeout: float = 20.0) -> None:
        """Wait until each collector's subscription matched `count` publishers (volatile topics lose what
        is published before the match)."""
        deadline = time.monotonic() + timeout
        for collector in collectors:
            while collector.subscription.get_publisher_count() < count:
                if time.monotonic() > deadline:
                    raise AssertionError(
                        f"no publisher matched {collector.subscription.topic_name} in {timeout} s"
                    )
                time.sleep(0.02)

    def wait_for_subscribers(self, publisher: Any, count: int = 1, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while publisher.get_subscription_count() < count:
            if time.monotonic() > deadline:
                raise AssertionError(f"no subscriber matched {publisher.topic_name} within {timeout} s")
            time.sleep(0.02)

    def client(self, srv_type: type, name: str) -> Any:
        key = (srv_type, name)
        if key not in self._clients:
            self._clients[key] = self.node.create_client(srv_type, name)
        return self._clients[key]

    def call(self, srv_type: type, name: str, request: Any = None, timeout: float = 30.0) -> Any:
        """Call a service and return the response (AssertionError when it is unavailable or times out)."""
        client = self.client(srv_type, name)
        if not client.wait_for_service(timeout_sec=timeout):
            raise AssertionError(f"service {name} not available within {timeout} s")
        future = client.call_async(request if request is not None else srv_type.Request())
        return self._wait(future, timeout, f"service {name}")

    def set_parameters(self, node_name: str, values: dict[str, Any], timeout: float = 20.0) -> list[Any]:
        """Set parameters of a remote node (AsyncParameterClient); returns one SetParametersResult each."""
        from rclpy.parameter import Parameter
        from rclpy.parameter_client import AsyncParameterClient

        client = AsyncParameterClient(self.node, node_name)
        if not client.wait_for_services(timeout_sec=timeout):
            raise AssertionError(f"parameter services of {node_name} not available within {timeout} s")
        params = [Parameter(name, value=value) for name, value in values.items()]
        return list(self._wait(client.set_parameters(params), timeout, "set_parameters").results)

    def get_parameters(self, node_name: str, names: list[str], timeout: float = 20.0) -> dict[str, Any]:
        from rclpy.parameter import parameter_value_to_python
        from rclpy.parameter_client import AsyncParameterClient

        client = AsyncParameterClient(self.node, node_name)
        if not client.wait_for_services(timeout_sec=timeout):
            raise AssertionError(f"parameter services of {node_name} not available within {timeout} s")
        response = self._wait(client.get_parameters(names), timeout, "get_parameters")
        return {n: parameter_value_to_python(v) for n, v in zip(names, response.values, strict=True)}

    @staticmethod
    def _wait(future: Any, timeout: float, what: str) -> Any:
        deadline = time.monotonic() + timeout
        while not future.done():
            if time.monotonic() > deadline:
                raise AssertionError(f"{what} timed out after {timeout} s")
            time.sleep(0.005)
        if future.exception() is not None:
            raise future.exception()
        return future.result()


def load_frames(count: int, step: int = 1) -> list[Any]:
    """The first `count` frames of ../shared/data/loop (every `step`-th) as `[H, W, 3]` uint8 RGB arrays."""
    import cv2

    files = sorted(FRAMES_DIR.glob("*.png"))[::step][:count]
    if len(files) < count:
        raise AssertionError(f"expected {count} frames in {FRAMES_DIR}, found {len(files)}")
    return [cv2.cvtColor(cv2.imread(str(f), cv2.IMREAD_COLOR), cv2.COLOR_BGR2RGB) for f in files]


class BufferLookup:
    """`TfLookup`'s interface over a plain `TfBuffer` (no waiting)."""

    def __init__(self, buffer: TfBuffer) -> None:
        self.buffer = buffer

    def lookup(self, target: str, source: str, stamp_s: float, timeout_s: float) -> np.ndarray:
        return self.buffer.lookup(target, source, stamp_s)

    def parents(self) -> dict[str, str]:
        return self.buffer.frames()


def camera_position_in_map(
    transform: Any, camera: str = "camera", map_frame: str = "map"
) -> np.ndarray | None:
    """The camera's position in `map_frame` [3] from a TF edge between the two, in either direction: the
    node publishes `<camera> -> map` for a bare camera (docs/robot.md: the inverted edge), `map -> <camera>`
    is read the same way; None for any other edge."""
    edge = (transform.header.frame_id, transform.child_frame_id)
    if edge == (map_frame, camera):
        return transform_to_matrix(transform.transform)[:3, 3]
    if edge == (camera, map_frame):  # T_camera_map
        return invert_rigid(transform_to_matrix(transform.transform))[:3, 3]
    return None
