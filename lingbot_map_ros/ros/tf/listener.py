"""TF lookups for the node: tf2's C++ `BufferCore` (through `tf2_ros.Buffer`) when tf2_ros is importable, as
on every robot, else the package's `TfBuffer` (tf/buffer.py); both fed by `TfIngest` (tf/ingest.py: `/tf` and
`/tf_static` taken in batches on the listener's own thread, off the executor, every sample checked first).

`TfLookup.lookup(target, source, stamp_s, timeout_s)` returns `T_target_source` [4, 4] or raises
`TransformUnavailable` naming the missing edge, after waiting up to `timeout_s` for the data (the caller's
thread polls; the listener thread stores). History: `cache_s` (`tf.cache_time`) in both backends; a lookup
that fails at a stamp more than `cache_s` behind the newest dynamic sample raises `FrameTooOld` at once (the
data was pruned: no waiting, never reported as an extrapolation into the past). `stats()` gives the
/diagnostics keys (`tf.backend`, `tf.samples`, `tf.rejected_total`, `tf.rejected.<edge>`, `tf.malformed`, and
the graph's `tf.edges`, `tf.edges_evicted`, `tf.static_refused`).

`graph` (engine/mapping/tf_graph.py `TfGraph`) is the stored edges' child -> parent map that every sample
passes first, bounded; the one-parent guard reads it incrementally, and a static parent in it wins over a
dynamic sample of the same child from another parent (`store`). With tf2's C++ core an evicted edge stays in
tf2 (it has no call to drop one frame) but leaves the graph, so the node's own per-edge work stays bounded.
"""

from __future__ import annotations

import time
from types import SimpleNamespace

import numpy as np
from geometry_msgs.msg import Quaternion, Transform, Vector3
from rclpy.node import Node

from ...engine.face import FrameTooOld, TfGraph, pose_from_quat
from .buffer import TfBuffer, TransformUnavailable
from .ingest import TF_STATIC_QOS, TfIngest
from .wire import TfSample

try:
    from tf2_msgs.msg import TFMessage
except ImportError:  # PyPI wheels without tf2_msgs (scripts/build_tf2_msgs.py): no robot TF can be read
    TFMessage = None

try:  # pragma: no cover - only on a real ROS install
    import tf2_ros
    from rclpy.duration import Duration
    from rclpy.time import Time as RclTime
except ImportError:
    tf2_ros = None

POLL_S = 0.005
#: Default of `tf.max_future_s` for a `TfLookup` made without it (the parameter table's is the node's).
MAX_FUTURE_S = 5.0

__all__ = ["TF_STATIC_QOS", "TfLookup", "TransformUnavailable", "transform_to_matrix"]


def transform_to_matrix(tf: Transform) -> np.ndarray:
    """geometry_msgs/Transform -> [4, 4] float64."""
    t, q = tf.translation, tf.rotation
    return pose_from_quat([t.x, t.y, t.z], [q.x, q.y, q.z, q.w])


class _Tf2Store:  # pragma: no cover - only on a real ROS install
    """Checked samples into tf2's C++ core. tf2_py reads a TransformStamped by attribute and insists only on
    the types of translation and rotation, so one reusable stand-in carries each sample (no message built)."""

    def __init__(self, buffer: object, graph: TfGraph) -> None:
        self._buffer = buffer
        self._graph = graph
        self._stamp = SimpleNamespace(sec=0, nanosec=0)
        self._header = SimpleNamespace(stamp=self._stamp, frame_id="")
        self._t, self._q = Vector3(), Quaternion()
        self._msg = SimpleNamespace(
            header=self._header,
            child_frame_id="",
            transform=SimpleNamespace(translation=self._t, rotation=self._q),
        )

    def __call__(self, sample: TfSample, static: bool) -> None:
        if not self._graph.admit(sample.parent, sample.child, static)[0]:
            return
        ns = round(sample.stamp_s * 1e9)
        self._stamp.sec, self._stamp.nanosec = ns // 1_000_000_000, ns % 1_000_000_000
        self._header.frame_id, self._msg.child_frame_id = sample.parent, sample.child
        t, q = self._t, self._q
        t.x, t.y, t.z = sample.translation
        q.x, q.y, q.z, q.w = sample.rotation
        if static:
            self._buffer.set_transform_static(self._msg, "default_authority")
        else:
            self._buffer.set_transform(self._msg, "default_authority")


class TfLookup:
    """TF listener of `node` (module doc). `use_tf2_ros=False` forces the package's own buffer (tests).

    Args:
        node: the node (or its `NodeFacade`): the subscriptions are created on it.
        use_tf2_ros: use tf2's C++ core when importable.
        cache_s: seconds of history kept per edge (`tf.cache_time`).
        max_future_s: `tf.max_future_s` (later changes: set `max_future_s`).
        map_frame: the node's own map frame: its edges (`map -> odom`, republished stamped now; the cameras'
            `<map>_<camera>`) heard back do not count as the robot's newest TF (`FrameTooOld`'s age check).
    """

    def __init__(
        self,
        node: Node,
        use_tf2_ros: bool = True,
        cache_s: float = 10.0,
        max_future_s: float = MAX_FUTURE_S,
        map_frame: str = "map",
    ) -> None:
        self._tf2 = None
        self.buffer: TfBuffer | None = None
        self._ingest: TfIngest | None = None
        self.cache_s = cache_s
        self.map_frame = map_frame
        self.newest_s = 0.0  # stamp of the newest dynamic sample stored (s), not counting map -> *
        logger = node.get_logger()
        if use_tf2_ros and tf2_ros is not None:  # pragma: no cover - only on a real ROS install
            self._tf2 = tf2_ros.Buffer(cache_time=Duration(seconds=cache_s))
            self.graph = TfGraph()
            self._store_sample = _Tf2Store(self._tf2, self.graph)
            self.backend = "tf2_ros BufferCore (C++)"
        else:
            self.buffer = TfBuffer(cache_s)
            self.graph = self.buffer.graph
            self._store_sample = self.buffer.add_sample
            self.backend = "lingbot_map_ros TfBuffer"
        if TFMessage is None:
            logger.error(
                "neither tf2_ros nor tf2_msgs is importable: the robot's TF cannot be read, so tf.mode auto "
                "maps as a bare camera and the robot modes drop every frame (tf_unavailable); build tf2_msgs "
                "with scripts/build_tf2_msgs.py"
            )
            return
        clock = node.get_clock()

        def now_s() -> float | None:
            ns = clock.now().nanoseconds
            return ns * 1e-9 if ns > 0 else None  # sim time before /clock: no future check

        context = node.context
        self._ingest = TfIngest(
            node, self.store, now_s, max_future_s, logger.warning, context.ok, parent_of=self.graph.parent
        )
        logger.info(f"TF backend {self.backend}; /tf and /tf_static taken on the listener thread")

    @property
    def max_future_s(self) -> float:
        return self._ingest.max_future_s if self._ingest is not None else MAX_FUTURE_S

    @max_future_s.setter
    def max_future_s(self, value: float) -> None:
        if self._ingest is not None:
            self._ingest.max_future_s = value

    def store(self, sample: TfSample, static: bool) -> None:
        """Store one checked sample in the backend (the listener thread; tests) and note the newest stamp.
        A static parent wins over a dynamic one of the same child: the node's own `map -> camera_link`, heard
        back, must not hide the robot's `base_link -> camera_link` published later (issue 29)."""
        if not static and self.graph.static_parent(sample.child) not in (None, sample.parent):
            return
        self._store_sample(sample, static)
        ours = sample.parent == self.map_frame or sample.parent.startswith(f"{self.map_frame}_")
        if not static and not ours and sample.stamp_s > self.newest_s:
            self.newest_s = sample.stamp_s

    def drain(self) -> int:
        """Store what arrived now (the listener thread does it every few ms; tests call it not to wait)."""
        return self._ingest.drain() if self._ingest is not None else 0

    def take_message(self, data: bytes, static: bool) -> int:
        """Check and store one serialized TFMessage as the listener thread does (tests, benchmarks)."""
        if self._ingest is None:
            return 0
        with self._ingest.lock:
            now_s = self._ingest._now_s()
            return self._ingest.take(data, static, now_s, self._ingest.max_future_s)

    def stats(self) -> dict[str, object]:
        """/diagnostics keys of the listener (module doc)."""
        values: dict[str, object] = {"tf.backend": self.backend, **self.graph.stats()}
        if self._ingest is not None:
            values.update(self._ingest.stats())
        return values

    def lookup(self, target: str, source: str, stamp_s: float, timeout_s: float) -> np.ndarray:
        """`T_target_source` at `stamp_s` (0: latest), waiting up to `timeout_s`.

        Raises:
            TransformUnavailable: still missing after the timeout (its `edge` names what is missing).
        """
        deadline = time.monotonic() + timeout_s
        if self._ingest is not None:
            self._ingest.want(target, source)  # their transforms are read in full (tf/ingest.py)
        while True:
            stored = self._stored()
            try:
                return self._lookup_now(target, source, stamp_s)
            except TransformUnavailable as exc:
                self._raise_if_pruned(target, source, stamp_s, exc)
                if time.monotonic() >= deadline:
                    raise
            # Waiting anyway: take what arrived (the listener thread would only in its next batch), and look
            # up again only once something new was stored (a lookup costs far more than an empty take).
            while self._stored() == stored and time.monotonic() < deadline:
                if not self.drain():
                    time.sleep(POLL_S)

    def _raise_if_pruned(self, target: str, source: str, stamp_s: float, exc: TransformUnavailable) -> None:
        """`FrameTooOld` when `stamp_s` lies more than `cache_s` behind the newest dynamic sample."""
        age = self.newest_s - stamp_s
        if stamp_s > 0.0 and age > self.cache_s:
            raise FrameTooOld(
                f"image stamp {stamp_s:.3f} s is {age:.1f} s behind the newest TF, beyond the TF history "
                f"kept (tf.cache_time {self.cache_s:g} s): dropped at once; raise tf.cache_time or shorten "
                "the queue (queue_size) so frames are posed sooner",
                f"{target} -> {source}",
            ) from exc

    def _stored(self) -> int:
        return self._ingest.check.accepted if self._ingest is not None else 0

    def _lookup_now(self, target: str, source: str, stamp_s: float) -> np.ndarray:
        if self._tf2 is None:
            return self.buffer.lookup(target, source, stamp_s)
        try:  # pragma: no cover - only on a real ROS install
            tf = self._tf2.lookup_transform_core(target, source, RclTime(nanoseconds=round(stamp_s * 1e9)))
        except (
            tf2_ros.LookupException,
            tf2_ros.ExtrapolationException,
            tf2_ros.ConnectivityException,
            tf2_ros.InvalidArgumentException,
        ) as exc:
            raise TransformUnavailable(str(exc), f"{target} -> {source}") from exc
        return transform_to_matrix(tf.transform)

    def destroy(self) -> None:
        """Stop the listener thread (the subscriptions are the node's: kept until it is destroyed)."""
        if self._ingest is not None:
            self._ingest.stop()
        self._tf2 = None
