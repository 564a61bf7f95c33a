"""The rules of the TF tree the node publishes into (plain data, no ROS): one parent per frame.

A TF tree gives every frame ONE parent (REP-105; tf2 keeps one parent per frame and time, so a second
publisher of another parent makes the tree flip between two shapes). `TfEdgeGuard.check` is asked before EVERY
edge the node publishes (ros/tf/broadcaster.py `TfBroadcaster.send`) and refuses an edge `parent -> child`
when:

* `child == parent` (a self-parent: a camera frame named like the map frame);
* `child` already has another parent in TF, published by anyone but this node (a robot's `odom -> base_link`,
  a URDF's static `camera_link -> camera_optical`, another node's edge): seen once, remembered;
* the same edge is published by another node (another SLAM's `map -> odom`);
* another publisher of this node (another camera) publishes an edge to `child`;
* the edge would close a loop (`child` is above `parent`).

A publisher (one per camera) publishes one edge at a time (its TF mode's): a check of a new edge of an owner
releases the owner's previous one, and an edge of this node that nobody publishes any more does not count
for the loop check (after `auto`'s switch from `map_to_camera`, the old `camera_link -> map` is still in
the graph, and `map -> base_link` must not read as a loop through it; docs/robot.md "late mount").

`subtree_root` is the parent of `map_to_camera`'s inverted edge `<root> -> map` when the camera already has
a parent in TF (a URDF gap: `camera_link -> camera_optical` without `base_link -> camera_link`): the root of
the camera's own subtree, never above it.

The guard follows the TF store's graph incrementally (tf_graph.py `TfGraph.changes`): each check applies
the edges that changed since the previous one, so its cost does not grow with the number of frames in TF.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Mapping

from .tf_graph import TfGraph

__all__ = ["TfEdgeGuard", "subtree_root"]


def subtree_root(frame: str, parents: Mapping[str, str]) -> str:
    """The top of `frame`'s chain in `parents` (child -> parent): `frame` itself when it has no parent.
    A loop in `parents` stops at the last frame before it repeats."""
    seen = {frame}
    while (parent := parents.get(frame)) is not None and parent not in seen:
        seen.add(parent)
        frame = parent
    return frame


class TfEdgeGuard:
    """One-parent check of every edge the node publishes (module doc); thread-safe, shared by the node's
    publishers of TF (one per camera).

    Args:
        graph: the TF graph as the node's listener stores it, child -> parent (its own edges included:
            they come back through /tf); read incrementally.
    """

    def __init__(self, graph: TfGraph) -> None:
        self._graph = graph
        self._cursor = -1  # journal position read so far (-1: nothing yet, the first check reads it all)
        self._lock = threading.Lock()
        self._ours: set[tuple[str, str]] = set()  # (parent, child) of every edge this node ever published
        self._claims: dict[str, tuple[str, Hashable]] = {}  # child -> (parent, publisher) publishing now
        self._foreign: dict[str, set[str]] = {}  # child -> parents seen in TF that this node never published
        self._parents: dict[str, str] = {}  # the graph as of the last check

    def check(self, parent: str, child: str, owner: Hashable) -> str | None:
        """Why `owner` must not publish `parent -> child` now, or None (then the edge counts as `owner`'s)."""
        with self._lock:
            self._observe()
            problem = self._problem(parent, child, owner)
            if problem is None:
                self._ours.add((parent, child))
                self._claims = {c: claim for c, claim in self._claims.items() if claim[1] != owner}
                self._claims[child] = (parent, owner)
            return problem

    def foreign_parents(self, child: str) -> set[str]:
        """Parents of `child` that other nodes publish (as seen so far)."""
        with self._lock:
            self._observe()
            return set(self._foreign.get(child, ()))

    def foreign_graph(self) -> dict[str, str]:
        """The TF graph now without this node's own edges, child -> parent (where a camera's own subtree
        ends: the node's earlier `map -> camera` must not count)."""
        with self._lock:
            self._observe()
            return {c: p for c, p in self._parents.items() if (p, c) not in self._ours}

    def release(self, owner: Hashable) -> None:
        """`owner` publishes none of its edges any more (a new stream, cleanup)."""
        with self._lock:
            self._claims = {c: claim for c, claim in self._claims.items() if claim[1] != owner}

    def _observe(self) -> None:
        """Apply the graph's changes since the last call (all of it the first time, or when its journal
        was dropped); O(changes)."""
        cursor, changes = self._graph.changes(self._cursor)
        if changes is None:
            cursor, self._parents = self._graph.snapshot()
            self._foreign = {c: seen for c, seen in self._foreign.items() if c in self._parents}
            changes = list(self._parents.items())
        for child, parent in changes:
            if parent is None:  # evicted from the store: forgotten
                self._parents.pop(child, None)
                self._foreign.pop(child, None)
                continue
            self._parents[child] = parent
            if (parent, child) not in self._ours:
                self._foreign.setdefault(child, set()).add(parent)
        self._cursor = cursor

    def _problem(self, parent: str, child: str, owner: Hashable) -> str | None:
        edge = f"{parent} -> {child}"
        if not parent or not child:
            return f"{edge}: an empty frame id"
        if parent == child:
            return f"{edge} would make '{child}' its own parent"
        others = sorted(self._foreign.get(child, set()) - {parent})
        if others:
            return (
                f"'{child}' already has the parent '{others[0]}' in TF (another node publishes it): "
                f"{edge} would give it two parents"
            )
        if parent in self._foreign.get(child, ()):
            return f"{edge} is already published by another node"
        claim = self._claims.get(child)
        if claim is not None and claim[1] != owner:
            return f"this node already publishes {claim[0]} -> {child} for another camera ({claim[1]})"
        if _above(child, parent, lambda frame: self._link(frame, child, owner)):
            return f"{edge} would close a loop ('{child}' is above '{parent}' in TF)"
        return None

    def _link(self, frame: str, checked: str, owner: Hashable) -> str | None:
        """The parent of `frame` with the claims of this node's other publishers in force (`owner`'s edge
        being checked replaces its own); none for `checked` and none through an edge of this node that it
        no longer publishes."""
        if frame == checked:
            return None
        claim = self._claims.get(frame)
        if claim is not None and claim[1] != owner:
            return claim[0]
        parent = self._parents.get(frame)
        return None if (parent, frame) in self._ours else parent


def _above(frame: str, start: str, parent_of: Callable[[str], str | None]) -> bool:
    """True when `frame` is on the chain from `start` up to its root."""
    seen = {start}
    node = start
    while (node := parent_of(node)) is not None and node not in seen:
        if node == frame:
            return True
        seen.add(node)
    return False
