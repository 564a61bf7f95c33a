"""Temporal consistency of loops (issue 30, `LoopClosureConfig.consistent_loops`, engine/loop/gate.py
`LoopStreaks`): a loop is accepted only when consecutive keyframes verified loops that agree. On the ring
(test/loop_ring.py) the places 0-2 of every lap verify truly against the first lap (a real revisit, seen from
three keyframes in a row); one keyframe of the second lap looks like an earlier place and its verification
returns that place's pose (a single-frame alias whose error, one ring step, is within the chi-square gate).
"""

from __future__ import annotations

from loop_ring import Ring, ring_closer

from lingbot_map_ros.engine.loop import Keyframe, LoopCloser, Verification
from lingbot_map_ros.engine.loop.similarity import between, from_pose

RING = Ring()
REVISIT = (0, 1, 2)  # places that verify on every lap
ALIAS_PLACE, ALIAS = 20, RING.keyframes_per_lap + 21  # keyframe 85 shows place 20 (it is at place 21)


def verify(a: Keyframe, b: Keyframe) -> Verification:
    """The truth for the revisited places; the look-alike's pose for the alias; everything else refused."""
    if b.key == ALIAS and RING.place(a.key) == ALIAS_PLACE:
        relative = between(from_pose(RING.truth(a.key)), from_pose(RING.truth(ALIAS - 1)))
    elif RING.place(a.key) == RING.place(b.key) and RING.place(a.key) in REVISIT:
        relative = between(from_pose(RING.truth(a.key)), from_pose(RING.truth(b.key)))
    else:
        return Verification(a.key, b.key, False, "no overlap", None, 0.0, 0.0, 0.0)
    return Verification(a.key, b.key, True, "accepted", relative, 1.0, 3.0, 0.0)


def run(consistent_loops: int, laps: float = 2.1) -> LoopCloser:
    """The ring's closer over `laps` laps with the alias at keyframe `ALIAS`."""
    closer = ring_closer(RING, max_keyframes=1000, consistent_loops=consistent_loops)
    closer.verify = verify
    for i in range(int(laps * RING.keyframes_per_lap)):
        result = RING.result(i)
        if i == ALIAS:
            result.rgb[...] = ALIAS_PLACE  # looks like the earlier place
        closer.add(result, float(i))
    return closer


def test_a_single_frame_alias_is_refused_and_the_real_revisit_still_closes() -> None:
    closer = run(consistent_loops=2)
    assert (ALIAS_PLACE, ALIAS) not in closer.accepted, closer.accepted
    assert closer.stats.rejected_unconfirmed >= 1, closer.stats
    n = RING.keyframes_per_lap
    # the revisit: its first keyframe waits, the next ones agree with it and close (on each later lap)
    assert (0, n) not in closer.accepted and {(1, n + 1), (2, n + 2)} <= set(closer.accepted), closer.accepted
    assert {(1, 2 * n + 1), (2, 2 * n + 2)} <= set(closer.accepted), closer.accepted


def test_without_consistency_the_alias_passes_the_graph_gate() -> None:
    """The control: with `consistent_loops` 1 (every verified loop to the gate, as before) the alias's error
    is within the chi-square gate and it is accepted, so the test above can fail."""
    closer = run(consistent_loops=1)
    assert (ALIAS_PLACE, ALIAS) in closer.accepted and closer.stats.rejected_unconfirmed == 0, closer.accepted
