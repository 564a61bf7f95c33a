"""The TF store's bounded frame graph and the one-parent guard that follows it incrementally (issue 30:
300,000 distinct edges made every published edge copy and scan the whole graph twice, for good)."""

from __future__ import annotations

import pytest

from lingbot_map_ros.engine.mapping.tf_graph import TfGraph
from lingbot_map_ros.engine.mapping.tf_tree import TfEdgeGuard


class CountingGraph(TfGraph):
    """A TfGraph that records what the guard reads: the changes handed out per call, the full snapshots."""

    def __init__(self, **caps: int) -> None:
        super().__init__(**caps)
        self.handed: list[int] = []
        self.snapshots = 0

    def changes(self, cursor: int) -> tuple[int, list[tuple[str, str | None]] | None]:
        end, changes = super().changes(cursor)
        self.handed.append(-1 if changes is None else len(changes))
        return end, changes

    def snapshot(self) -> tuple[int, dict[str, str]]:
        self.snapshots += 1
        return super().snapshot()


def test_the_least_recently_sampled_dynamic_edge_is_evicted_and_statics_past_the_cap_refused() -> None:
    graph = TfGraph(max_dynamic_edges=3, max_static_edges=2)
    assert graph.admit("base_link", "camera", static=True) == (True, None)
    assert graph.admit("odom", "base_link", static=False) == (True, None)
    for i in range(5):  # the live edge is sampled between new ones: it stays
        assert graph.admit(f"part_{i}", f"sensor_{i}", static=False)[0]
        graph.admit("odom", "base_link", static=False)
    assert graph.parents() == {
        "camera": "base_link",
        "base_link": "odom",
        "sensor_4": "part_4",
        "sensor_3": "part_3",
    }
    assert graph.evicted == 3
    assert graph.admit("part_9", "sensor_9", static=False) == (True, "sensor_3")
    assert graph.admit("a", "b", static=True) == (True, None)
    assert graph.admit("c", "d", static=True) == (False, None) and graph.refused_static == 1
    assert graph.admit("base_link", "camera", static=True) == (True, None)  # a known static edge: stored
    assert graph.stats() == {"tf.edges": 5, "tf.edges_evicted": 4, "tf.static_refused": 1}
    with pytest.raises(ValueError):
        TfGraph(max_dynamic_edges=0)


def test_300000_distinct_edges_keep_the_graph_bounded_and_each_check_reads_only_what_changed() -> None:
    graph = CountingGraph()
    guard = TfEdgeGuard(graph)
    graph.admit("base_link", "camera", static=True)
    assert guard.check("map", "odom", "cam") is None
    checks = 0
    for i in range(300_000):
        graph.admit(f"robot_part_{i}", f"sensor_{i}", static=False)
        if i % 1000 == 0:  # the robot's odometry and the node's own edge, between the attack's edges
            graph.admit("odom", "base_link", static=False)
            graph.admit("map", "odom", static=False)
            assert guard.check("map", "odom", "cam") is None
            checks += 1
    assert len(graph) <= graph.max_dynamic_edges + graph.max_static_edges
    assert graph.evicted == 300_002 - graph.max_dynamic_edges  # 300,000 + odom + map -> odom, minus the cap
    assert graph.parents()["base_link"] == "odom" and graph.parents()["odom"] == "map"
    # the whole graph was read once; after that each check got only the edges added or evicted meanwhile
    assert graph.snapshots <= 1 + 2 * 300_000 // len(graph)  # journal drops (amortised: O(1) per edge)
    assert max(graph.handed[1:]) <= 2 * 1000 + 8, max(graph.handed[1:])
    # silence: after one check has read the last edges, a check reads nothing, whatever the graph holds
    assert guard.check("map", "odom", "cam") is None
    graph.handed.clear()
    for _ in range(10):
        assert guard.check("map", "odom", "cam") is None
        assert "already has the parent 'odom'" in guard.check("map", "base_link", "cam")
    assert graph.handed == [0] * 20
    assert checks == 300


def test_the_guard_follows_evictions_and_a_dropped_journal() -> None:
    graph = TfGraph(max_dynamic_edges=2)
    guard = TfEdgeGuard(graph)
    graph.admit("odom", "base_link", static=False)
    assert "already has the parent 'odom'" in guard.check("map", "base_link", "cam")
    graph.admit("a", "b", static=False)
    graph.admit("c", "d", static=False)  # base_link's edge unseen while two newer arrived: evicted
    assert guard.check("map", "base_link", "cam") is None  # forgotten with its edge
    for i in range(10_000):  # far more changes than the journal keeps: the guard re-reads the graph
        graph.admit(f"p{i}", f"c{i}", static=False)
    graph.admit("odom", "base_link", static=False)
    assert "already has the parent 'odom'" in guard.check("map", "base_link", "cam")
    assert guard.foreign_graph() == graph.parents()
