"""TF ingestion off the executor: `/tf` and `/tf_static` taken in batches on the listener's own thread, every
sample checked before it is stored.

Why not ordinary subscription callbacks (issue 19): with rclpy every message wakes the executor, which
rebuilds its wait set from all the node's entities in Python (~40 here) and hands the callback to a worker
thread, and rclpy then builds nine nested Python message objects per transform (~160 µs). At a robot's
200 Hz odometry + 100 Hz joints that kept half a core busy with Python under the GIL, and the inference
thread (which gives the GIL back around every torch op) waited for it at each op: 10 → 2–3 odometry/s on this
2-core CPU (docs/benchmarks.md). Here the two subscriptions belong to a callback group that never executes
(`ManualTakeGroup`: the executor leaves them out of its wait set), and `TfIngest`'s thread takes their
messages serialized every `period_s` (`take_message(raw=True)`, ~25 µs each), reads them with
`tf_wire.parse_tf_message` and hands each checked sample to the store (`TfBuffer.add_sample`, or tf2's C++
`BufferCore`): O(1) Python work per transform, no logging per message, one short lock per batch that the
lookups never wait on for long.

`SampleCheck` rejects, and counts per edge (/diagnostics `tf.rejected.<parent> -> <child>` for the
`TOP_REJECTED_EDGES` edges with the most rejections, the rest summed in `tf.rejected_other`; one WARN an edge
for the first `WARNED_EDGES` edges, then one summary line: 20,000 bad edges give neither 20,001 keys nor
20,000 lines, issue 30):
empty or equal frame ids, a non-finite translation or rotation, a quaternion whose norm is not within
`NORM_TOLERANCE` of 1 (those within are normalised), and a dynamic sample stamped more than `tf.max_future_s`
after the node's clock (it would hide every newer sample: tf2 refuses to look up before the newest stamp).
"""

from __future__ import annotations

import heapq
import math
import threading
from collections.abc import Callable

from rclpy.callback_groups import CallbackGroup
from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy

from .layout import TfLayouts
from .wire import ColdSample, TfSample, byte_order, cold_sample, parse_tf_message

#: A unit quaternion's norm may differ from 1 by this much (then it is normalised); beyond it the sample is
#: rejected (a zero quaternion is no rotation; tf2's C++ core raises on one).
NORM_TOLERANCE = 1e-3
#: Rejected edges listed one by one in /diagnostics (those with the most rejections); the rest are summed.
TOP_REJECTED_EDGES = 20
#: Distinct rejected edges counted one by one (later ones only in `tf.rejected_other`).
TRACKED_EDGES = 1000
#: Distinct rejected edges warned about one by one; then one line says later ones are not.
WARNED_EDGES = 20
#: Edges stored whole before ingestion turns selective: past this many, a /tf transform whose child frame no
#: lookup needed (`TfIngest.want`) is kept unread (`tf_wire.parse_tf_message`'s `cold`), issue 30.
FULL_STORE_EDGES = 256
#: Unread transforms kept (their newest sample per child frame); past it the oldest half is dropped.
MAX_COLD_EDGES = 16_384
#: How often the listener thread takes what arrived (s); the DDS history below holds what arrives meanwhile,
#: and a lookup that waits for data takes it at once (`TfLookup.lookup`). Each wake-up hands the GIL over.
TAKE_PERIOD_S = 0.05
#: /tf as tf2_ros subscribes it, with a deeper history (the listener takes every `TAKE_PERIOD_S`).
TF_LISTEN_QOS = QoSProfile(
    depth=1000,
    history=HistoryPolicy.KEEP_LAST,
    reliability=ReliabilityPolicy.RELIABLE,
    durability=DurabilityPolicy.VOLATILE,
)
#: /tf_static as tf2_ros subscribes it (`StaticListenerQoS`).
TF_STATIC_QOS = QoSProfile(
    depth=100,
    history=HistoryPolicy.KEEP_LAST,
    reliability=ReliabilityPolicy.RELIABLE,
    durability=DurabilityPolicy.TRANSIENT_LOCAL,
)

__all__ = [
    "ManualTakeGroup",
    "NORM_TOLERANCE",
    "TOP_REJECTED_EDGES",
    "SampleCheck",
    "TfIngest",
    "check_sample",
]


class ManualTakeGroup(CallbackGroup):
    """A callback group whose entities the executor never waits on nor runs: their owner takes their messages
    itself (`TfIngest`)."""

    def can_execute(self, entity: object) -> bool:
        return False

    def beginning_execution(self, entity: object) -> bool:
        return False

    def ending_execution(self, entity: object) -> None:
        pass


def check_sample(sample: TfSample, static: bool, now_s: float | None, max_future_s: float) -> str | None:
    """Why `sample` must not be stored, or None (then its rotation has been normalised in place).

    Args:
        sample: as received.
        static: from /tf_static (valid at all times: its stamp is not checked).
        now_s: the node's clock in seconds; None when it does not run yet (sim time before /clock).
        max_future_s: the largest accepted `stamp - now` of a dynamic sample.
    """
    if not sample.parent or not sample.child:
        return "empty frame id"
    if sample.parent == sample.child:
        return "parent and child are the same frame"
    if not all(map(math.isfinite, sample.translation)):
        return f"non-finite translation {sample.translation}"
    qx, qy, qz, qw = sample.rotation
    norm = math.sqrt(qx * qx + qy * qy + qz * qz + qw * qw)
    if not math.isfinite(norm):
        return f"non-finite rotation {sample.rotation}"
    if abs(norm - 1.0) > NORM_TOLERANCE:
        return f"quaternion norm {norm:.6g} (expected 1 within {NORM_TOLERANCE:g})"
    if norm != 1.0:
        sample.rotation = tuple(q / norm for q in sample.rotation)
    if not static and now_s is not None and sample.stamp_s - now_s > max_future_s:
        return f"stamped {sample.stamp_s - now_s:.3f} s in the future (tf.max_future_s {max_future_s:g})"
    return None


class SampleCheck:
    """`check_sample` with per-edge rejection counts (at most `TRACKED_EDGES` edges; later edges' samples
    counted in `untracked`) and one WARN per edge for the first `WARNED_EDGES` edges.

    Args:
        warn: logs one line (the node logger's `warning`).
    """

    def __init__(self, warn: Callable[[str], None]) -> None:
        self.warn = warn
        self.rejected: dict[str, int] = {}  # edge -> count (written by the listener thread only)
        self.untracked = 0  # rejected samples on edges past TRACKED_EDGES
        self.accepted = 0
        self.malformed = 0

    def __call__(self, sample: TfSample, static: bool, now_s: float | None, max_future_s: float) -> bool:
        reason = check_sample(sample, static, now_s, max_future_s)
        if reason is None:
            self.accepted += 1
            return True
        edge = sample.edge
        count = self.rejected.get(edge, 0) + 1
        if count == 1 and len(self.rejected) >= TRACKED_EDGES:
            self.untracked += 1
            return False
        self.rejected[edge] = count
        if count == 1 and len(self.rejected) <= WARNED_EDGES:
            kind = "/tf_static" if static else "/tf"
            self.warn(
                f"TF sample rejected on {edge} ({kind}): {reason}; not stored, later ones on this edge "
                f"are counted in /diagnostics (tf.rejected.{edge})"
            )
            if len(self.rejected) == WARNED_EDGES:
                self.warn(
                    f"TF samples rejected on {WARNED_EDGES} edges: rejections on further edges are not "
                    "logged, only counted in /diagnostics (tf.rejected_total, tf.rejected_other)"
                )
        return False

    def stats(self) -> dict[str, int]:
        """/diagnostics keys: `tf.samples`, `tf.rejected_total`, `tf.malformed`, `tf.rejected_edges`
        (distinct edges counted), `tf.rejected.<edge>` for the `TOP_REJECTED_EDGES` edges with the most
        rejections and `tf.rejected_other` (the rejections not listed)."""
        rejected = dict(self.rejected)
        top = heapq.nlargest(TOP_REJECTED_EDGES, rejected.items(), key=lambda item: item[1])
        total = sum(rejected.values()) + self.untracked
        out = {
            "tf.samples": self.accepted,
            "tf.rejected_total": total + self.malformed,
            "tf.malformed": self.malformed,
            "tf.rejected_edges": len(rejected),
            "tf.rejected_other": total - sum(n for _, n in top),
        }
        out.update({f"tf.rejected.{edge}": n for edge, n in sorted(top)})
        return out


class TfIngest:
    """The `/tf` + `/tf_static` subscriptions of `node` and the thread that takes, checks and stores them.

    Args:
        node: the node (or its `NodeFacade`); the subscriptions are created on it, serialized (`raw=True`), in
            a `ManualTakeGroup`.
        store: `(sample, static)` of every accepted sample (on the listener thread, one batch at a time).
        now_s: the node's clock in seconds, None while it does not run (checked once per batch).
        max_future_s: `tf.max_future_s` (read every batch: a live parameter sets the attribute).
        warn: the node logger's `warning`.
        ok: False once the node's context shut down (the thread ends).
        parent_of: the stored parent of a frame (the graph's), to follow a needed frame's chain upwards.
        period_s: time between two batches.

    Cost proportional to what is needed (issue 30: /tf messages of 10,000 joints at 5 Hz cut posing from
    10 to 1.1 frames/s): until `FULL_STORE_EDGES` child frames were stored every sample is read, checked and
    stored (a robot's tree: as before). Past that, a /tf transform is read only when its child frame is
    `hot`: stored before that point, or needed (`want`: the frames a lookup asked for and, as their edges
    arrive, their ancestors). Any other transform costs a dict write of its raw bytes (`cold`, the newest per
    child); a frame that becomes needed is read from there at once, so its edge has a sample before the next
    one arrives. /tf_static is always read whole.
    """

    def __init__(
        self,
        node: object,
        store: Callable[[TfSample, bool], None],
        now_s: Callable[[], float | None],
        max_future_s: float,
        warn: Callable[[str], None],
        ok: Callable[[], bool],
        parent_of: Callable[[str], str | None] = lambda frame: None,
        period_s: float = TAKE_PERIOD_S,
    ) -> None:
        from tf2_msgs.msg import TFMessage

        self.max_future_s = max_future_s
        self.check = SampleCheck(warn)
        self._store, self._now_s, self._ok, self._period_s = store, now_s, ok, period_s
        self._parent_of = parent_of
        self.hot: set[bytes] = set()  # child frames read in full (stored ones and needed ones)
        self.wanted: set[str] = set()  # frames a lookup needed, and their ancestors
        self.cold: dict[bytes, ColdSample] = {}  # child -> its newest transform, unread
        self.layouts = TfLayouts()  # big messages that repeat (layout.py)
        self.unread = 0  # /tf transforms kept unread (no lookup needed their frame)
        group = ManualTakeGroup()
        self._subs = [
            (
                node.create_subscription(
                    TFMessage, "/tf_static", _never_called, TF_STATIC_QOS, callback_group=group, raw=True
                ),
                True,
            ),
            (
                node.create_subscription(
                    TFMessage, "/tf", _never_called, TF_LISTEN_QOS, callback_group=group, raw=True
                ),
                False,
            ),
        ]
        self.lock = threading.Lock()  # held while one batch is stored (tests and lookups may drain too)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="lingbot_map_tf", daemon=True)
        self._thread.start()

    def drain(self) -> int:
        """Take, check and store everything that arrived; the number of samples taken. Static first (a
        batch's dynamic samples may need them)."""
        taken = 0
        now_s: float | None = None
        max_future_s = self.max_future_s
        with self.lock:
            for sub, static in self._subs:
                while True:
                    got = sub.handle.take_message(sub.msg_type, True)
                    if got is None:
                        break
                    if not taken:
                        now_s = self._now_s()  # once per batch, and not at all for an empty one
                    try:
                        taken += self.take(got[0], static, now_s, max_future_s)
                    except Exception as exc:  # noqa: BLE001 - bad bytes (WireError) or a store that refused it
                        self.check.malformed += 1
                        if self.check.malformed == 1:
                            self.check.warn(
                                f"TF message dropped ({type(exc).__name__}: {exc}); later ones are "
                                "counted in /diagnostics (tf.malformed)"
                            )
        return taken

    def take(self, data: bytes, static: bool, now_s: float | None, max_future_s: float) -> int:
        """Check and store one serialized TFMessage (the caller holds `lock`): /tf_static in full, /tf
        selectively (class doc). The number of transforms it held that were new or read."""
        before = len(self.cold)
        order = byte_order(data)
        layout = None if static or order is None else self.layouts.match(data, order)
        if static:
            samples = parse_tf_message(data)
        elif layout is not None:  # the same tree again: only its needed transforms are read
            samples = [cold_sample(layout.cold(start, end)) for start, end in layout.hot(self.hot)]
            for sample in samples:
                self._take(sample, static, now_s, max_future_s)
            self.unread += len(layout.records) - len(samples)
            return len(layout.records)
        else:
            records: list[tuple[bytes, int, int]] = []
            samples = parse_tf_message(data, self.hot, self.cold, FULL_STORE_EDGES, records)
            self.unread += max(0, len(records) - len(samples))
            if order is not None:
                self.layouts.learn(data, order, records)
            if len(self.cold) > MAX_COLD_EDGES:  # the oldest half goes (a needed one waits for its next)
                for key in list(self.cold)[: len(self.cold) // 2]:
                    del self.cold[key]
        for sample in samples:
            self._take(sample, static, now_s, max_future_s)
        return len(samples) + max(0, len(self.cold) - before)

    def want(self, *frames: str) -> None:
        """A lookup needs `frames`: read their transforms (and, as their edges arrive, their ancestors') in
        full from now on; a transform of theirs kept unread is stored at once."""
        if all(frame in self.wanted for frame in frames):
            return
        with self.lock:
            now_s = self._now_s()
            for frame in frames:
                self._want(frame, now_s)

    def _want(self, frame: str | None, now_s: float | None) -> None:
        while frame and frame not in self.wanted:
            self.wanted.add(frame)
            key = frame.encode()
            if key not in self.hot:  # read from now on; the newest of what was kept unread, at once
                self.hot.add(key)
                kept = [self.cold.pop(key)] if key in self.cold else []
                kept += self.layouts.newest(key)
                if kept:
                    newest = max((cold_sample(cold) for cold in kept), key=lambda sample: sample.stamp_s)
                    self._take(newest, False, now_s, self.max_future_s)
            frame = self._parent_of(frame)

    def _take(self, sample: TfSample, static: bool, now_s: float | None, max_future_s: float) -> None:
        """Check and store one sample; a needed frame's parent becomes needed."""
        if not self.check(sample, static, now_s, max_future_s):
            return
        self._store(sample, static)
        if sample.child in self.wanted and sample.parent not in self.wanted:
            self._want(sample.parent, now_s)

    def stats(self) -> dict[str, int]:
        """/diagnostics keys: `SampleCheck.stats`, `tf.unread` (transforms kept unread so far) and
        `tf.unread_edges` (frames whose newest transform is kept unread: no lookup needed them)."""
        return {**self.check.stats(), "tf.unread": self.unread, "tf.unread_edges": len(self.cold)}

    def _run(self) -> None:
        while not self._stop.wait(self._period_s):
            if not self._ok():
                return
            try:
                self.drain()
            except Exception:  # noqa: BLE001 - the listener must outlive anything (a destroyed handle at exit)
                if not self._ok():
                    return

    def stop(self, timeout_s: float = 1.0) -> None:
        self._stop.set()
        self._thread.join(timeout_s)


def _never_called(msg: object) -> None:  # pragma: no cover - a ManualTakeGroup's callbacks never run
    raise AssertionError("TF messages are taken by TfIngest, not by the executor")
