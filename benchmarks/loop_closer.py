"""Time per keyframe of the loop closer as the map grows, at a keyframe budget (issue 30), CPU.

The ring of the test fixture `test/loop_ring.py` (one keyframe per step, 64 a lap, one verified loop a lap,
no model: the closer's own bookkeeping — keyframe map, voxels, index, merges, gate, optimisation) is run for
`--keyframes` keyframes at `--budget`; printed per block of `--block` keyframes: mean ms per keyframe, map
entries, graph nodes and edges. The closer's time per keyframe is flat when the last block's mean is within
2x of the first full block's (the budget bounds what is searched, merged and optimised). Usage::

    .venv/bin/python benchmarks/loop_closer.py [--keyframes 10000] [--budget 300] [--block 1000]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "test"))
from loop_ring import Ring, ring_closer  # noqa: E402 - the test fixture, from test/


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--keyframes", type=int, default=10_000)
    parser.add_argument("--budget", type=int, default=300)
    parser.add_argument("--block", type=int, default=1000)
    args = parser.parse_args()
    ring = Ring()
    closer = ring_closer(ring, args.budget)
    rows, start = [], time.perf_counter()
    for i in range(args.keyframes):
        closer.add(ring.result(i), float(i))
        if (i + 1) % args.block == 0:
            now = time.perf_counter()
            rows.append(
                {
                    "keyframes": i + 1,
                    "ms_per_keyframe": round(1e3 * (now - start) / args.block, 2),
                    "map": len(closer.map),
                    "nodes": len(closer.graph.poses),
                    "edges": len(closer.graph.edges),
                    "loops": closer.stats.optimizations,
                }
            )
            print(json.dumps(rows[-1]), flush=True)
            start = now
    ratio = rows[-1]["ms_per_keyframe"] / rows[min(1, len(rows) - 1)]["ms_per_keyframe"]
    print(json.dumps({"last_over_second_block": round(ratio, 2), "stats": closer.stats.as_dict()}))


if __name__ == "__main__":
    main()
