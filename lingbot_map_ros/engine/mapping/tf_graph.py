"""The TF store's frame graph (plain data, no ROS): child -> parent of every stored edge, bounded, with a
journal of its changes.

Every sample the listener stores passes `TfGraph.admit` first (O(1): a dict look-up and an LRU move). The
graph bounds the store: at most `max_dynamic_edges` dynamic edges (the least recently sampled one is evicted
when a new edge would pass the cap: the robot's live tree is sampled all the time and stays; an edge unseen
while that many newer edges arrived goes) and at most `max_static_edges` static ones (a new static edge past
that cap is refused: static edges are never evicted). Counters: `evicted`, `refused_static`.

The one-parent guard (tf_tree.py `TfEdgeGuard`) reads the journal (`changes`): the edges added, re-parented
or removed since its last read, so a check costs what changed since the last check, not the graph's size
(issue 30: 300,000 distinct edges made every published edge copy and scan the whole graph twice).
"""

from __future__ import annotations

import threading
from collections import OrderedDict

__all__ = ["MAX_DYNAMIC_EDGES", "MAX_STATIC_EDGES", "TfGraph"]

#: Default cap on dynamic edges. A robot's TF tree has tens to hundreds of frames; a live edge is evicted only
#: when this many new edges arrive between two of its samples (16,384 in 33 ms at 30 Hz: ~500,000 edges/s, far
#: beyond what the listener takes), and a one-message tree of 10,000 joints still fits.
MAX_DYNAMIC_EDGES = 16_384
#: Default cap on static edges (never evicted: new ones past it are refused).
MAX_STATIC_EDGES = 4096
#: The journal is dropped (readers re-read the graph) when it is this much longer than the graph itself.
_JOURNAL_SLACK = 4096

#: One change of the graph: (child, its new parent), parent None when the edge was removed.
Change = tuple[str, str | None]


class TfGraph:
    """child -> parent of the stored edges (module doc); thread-safe."""

    def __init__(
        self, max_dynamic_edges: int = MAX_DYNAMIC_EDGES, max_static_edges: int = MAX_STATIC_EDGES
    ) -> None:
        if max_dynamic_edges < 1 or max_static_edges < 1:
            raise ValueError("the TF graph needs room for at least one dynamic and one static edge")
        self.max_dynamic_edges = max_dynamic_edges
        self.max_static_edges = max_static_edges
        self.evicted = 0  # dynamic edges dropped to make room
        self.refused_static = 0  # static samples of new edges past the cap
        self._dynamic: OrderedDict[str, str] = OrderedDict()  # least recently sampled first
        self._static: dict[str, str] = {}
        self._journal: list[Change] = []
        self._start = 0  # journal position of self._journal[0]
        self._lock = threading.Lock()

    def admit(self, parent: str, child: str, static: bool) -> tuple[bool, str | None]:
        """Record a sample of `parent -> child` before it is stored: (store it, child of the edge evicted
        to make room or None). O(1)."""
        with self._lock:
            if static:
                return self._admit_static(parent, child), None
            if child in self._dynamic:
                self._dynamic.move_to_end(child)
                if self._dynamic[child] != parent:
                    self._dynamic[child] = parent
                    self._record(child, parent)
                return True, None
            self._static.pop(child, None)  # a dynamic sample replaces a static edge (as the stores do)
            self._dynamic[child] = parent
            self._record(child, parent)
            if len(self._dynamic) <= self.max_dynamic_edges:
                return True, None
            evicted, _ = self._dynamic.popitem(last=False)
            self.evicted += 1
            self._record(evicted, None)
            return True, evicted

    def _admit_static(self, parent: str, child: str) -> bool:
        known = self._static.get(child)
        if known == parent:
            return True
        if known is None and len(self._static) >= self.max_static_edges:
            self.refused_static += 1
            return False
        self._dynamic.pop(child, None)
        self._static[child] = parent
        self._record(child, parent)
        return True

    def _record(self, child: str, parent: str | None) -> None:
        self._journal.append((child, parent))
        if len(self._journal) > 2 * (len(self._dynamic) + len(self._static)) + _JOURNAL_SLACK:
            self._start += len(self._journal)
            self._journal = []

    def static_parent(self, child: str) -> str | None:
        """The parent of `child`'s static edge, or None when `child` has none."""
        with self._lock:
            return self._static.get(child)

    def parent(self, child: str) -> str | None:
        """The stored parent of `child`, or None."""
        with self._lock:
            return self._static.get(child) or self._dynamic.get(child)

    def parents(self) -> dict[str, str]:
        """child -> parent of every edge now (a copy)."""
        with self._lock:
            return {**self._static, **self._dynamic}

    def changes(self, cursor: int) -> tuple[int, list[Change] | None]:
        """(new cursor, the changes after `cursor`), or (new cursor, None) when the journal no longer reaches
        back to `cursor`: then the reader re-reads `parents()` (amortised over the changes it missed)."""
        with self._lock:
            end = self._start + len(self._journal)
            if cursor < self._start:
                return end, None
            return end, self._journal[cursor - self._start :]

    def snapshot(self) -> tuple[int, dict[str, str]]:
        """(cursor, parents) read together."""
        with self._lock:
            return self._start + len(self._journal), {**self._static, **self._dynamic}

    def stats(self) -> dict[str, int]:
        """/diagnostics keys: `tf.edges`, `tf.edges_evicted`, `tf.static_refused`."""
        with self._lock:
            edges = len(self._dynamic) + len(self._static)
        return {"tf.edges": edges, "tf.edges_evicted": self.evicted, "tf.static_refused": self.refused_static}

    def __len__(self) -> int:
        with self._lock:
            return len(self._dynamic) + len(self._static)
