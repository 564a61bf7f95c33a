"""`lingbot-map-ros reloc-eval`: tracking health and relocalisation without a hint on the drifting oracle.

The synthetic room is mapped first (1¼ laps through `StreamingSession` and the loop closer; with `--aliasing
twin-rooms` a second, identical room 20 m away is mapped the same way, reached through a corridor the stream
measures truly; the rooms differ only on a quarter of the lap). Then the camera drives on along later laps
(inwards of the mapped one, so no view repeats exactly), and `--kidnaps` times it is covered for
`--cover-frames` frames (black images; the camera keeps moving) and carried to a random place at least a
quarter lap away (in either room). Every frame then goes through the engine's `LostAndFound` (health +
relocaliser, mapping mode); the oracle's stream behaves as a real one: it keeps integrating from where it was,
its confidence falls (tools/loop/reloc_oracle.py). With twin rooms the verification passes relate look-alike
images of the two rooms as the same place (aliasing).

Written to `--json` (exactly these keys):

* ``kidnaps``; ``detected`` / ``detect_frames``: events whose state left `tracking` before the next event,
  and the frames from the event's first frame to that state (0 = at once);
* ``relocalised`` / ``reloc_seconds``: events ended by a relocalisation, and the seconds (at `--rate-hz`)
  from the first frame that shows a mapped place unambiguously (any uncovered frame without twin rooms, the
  distinct quarter with them) to the relocalisation;
* ``false_relocalisations``: relocalisations that put the camera more than `FALSE_RELOC_M` from the truth
  (the map aligned to the truth per room by the room's mapping-phase keyframes), and second ones within an
  event;
* ``points_added_while_lost``: keyframe points the map gained from an event's first frame until its
  relocalisation (the relocalisation's own, verified keyframe excluded);
* ``ate_after_reloc``: RMSE (m) of the camera centres (aligned as above) of mapped frames after a
  relocalisation until the next event.

Printed besides: the smallest covariance factor while lost.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from lingbot_map_ros.engine.face import (
    CameraState,
    HealthConfig,
    LoopCloser,
    LoopClosureConfig,
    MapperConfig,
    ScaleConfig,
    TrackingState,
    loop_closer,
)
from lingbot_map_ros.engine.offline import RelocaliseConfig, Sim3
from lingbot_map_ros.tools.evaluation.trajectory import umeyama_sim3
from lingbot_map_ros.tools.loop.loop_oracle import DriftConfig, eval_scene, image_descriptor
from lingbot_map_ros.tools.loop.reloc_oracle import KidnapOracle, TwinRooms, kidnap_session

MAP_TURNS = 1.25
FALSE_RELOC_M = 0.3


@dataclass(frozen=True)
class RelocEvalConfig:
    seed: int = 0
    kidnaps: int = 5
    cover_frames: int = 0
    aliasing: str = "none"
    frames_per_lap: int = 60
    segment: int = 60
    drift_scale: float = 0.02
    drift_yaw_deg_per_m: float = 1.0
    width: int = 112
    height: int = 84
    rate_hz: float = 30.0
    health: HealthConfig = field(default_factory=HealthConfig)
    relocalise: RelocaliseConfig = field(default_factory=RelocaliseConfig)


@dataclass
class _Event:
    start: int  # plan index of the event's first frame
    seen: int | None = None  # first frame showing a mapped place unambiguously
    detected: int | None = None
    relocalised: int | None = None


def plan(config: RelocEvalConfig, oracle: KidnapOracle, laps: float) -> tuple[list[int | None], list[int]]:
    """The frames to push (global frame ids, None = covered) and the plan index of each event's start."""
    rng = np.random.default_rng(config.seed)
    lap, n_scene = config.frames_per_lap, len(oracle.scene.images)
    n_map = int(lap * MAP_TURNS)
    frames: list[int | None] = list(range(n_map))
    rooms = [0] if oracle.twins is None else [0, n_scene]
    if oracle.twins is not None:
        oracle.corridors.add((n_map - 1, n_scene))
        frames += list(range(n_scene, n_scene + n_map))
    here = rooms[-1] + n_map
    frames += list(range(here, here + config.segment))
    here += config.segment - 1
    starts = []
    last = int(lap * laps) - config.segment
    for _ in range(config.kidnaps):
        starts.append(len(frames))
        frames += [None] * config.cover_frames
        while True:
            local = int(rng.integers(n_map, last))
            away = ((local - oracle.room_frame(here)) / lap + 0.5) % 1.0 - 0.5
            if abs(away) >= 0.25:
                break
        start = rooms[int(rng.integers(len(rooms)))] + local
        frames += list(range(start, start + config.segment))
        here = start + config.segment - 1
    return frames, starts


def evaluate(config: RelocEvalConfig) -> tuple[dict[str, object], float]:
    """Run the scenario (module doc): the result dict and the smallest covariance factor while lost."""
    laps = MAP_TURNS + 2.0
    total = int(config.frames_per_lap * laps)
    scene = eval_scene(config.width, config.height, total, config.seed, laps)
    drift = DriftConfig(scale_per_m=config.drift_scale, yaw_deg_per_m=config.drift_yaw_deg_per_m)
    twins = TwinRooms() if config.aliasing == "twin-rooms" else None
    budget = int(config.frames_per_lap * MAP_TURNS * 2) + config.segment * (config.kidnaps + 1)
    budget += config.cover_frames * config.kidnaps
    session, oracle = kidnap_session(scene, drift, budget, config.seed, twins)
    frames, starts = plan(config, oracle, laps)
    loops = LoopClosureConfig(min_similarity=0.5, merge_size=5)
    closer = loop_closer(loops, config.width, oracle, image_descriptor)
    relocalise = config.relocalise
    if relocalise.min_similarity is None:  # the mapping phase's floor, kept when the loops stop
        relocalise = replace(relocalise, min_similarity=closer.config.min_similarity)
    state = CameraState(MapperConfig(scale=ScaleConfig("none")), health=config.health)  # the camera's engine
    state.attach_loop(closer, threaded=False, relocalise=relocalise)
    guard = state.lost_and_found
    assert guard is not None  # health and loop closure are on
    mapped = starts[0] - config.segment
    black = np.zeros_like(oracle.images[0])
    results = {}
    for i, frame in enumerate(frames[:mapped]):
        for result in session.push(oracle.images[frame], meta=i):
            closer.add(result, float(result.meta))
            results[result.index] = result.meta
    if twins is not None:  # look-alikes now verify across the rooms; the closer's loops are not
        oracle.aliasing = True  # aliasing-proof (issue 30's gates), so they stop: the map is the mapped one
        closer.config = replace(closer.config, exclude_recent=closer.config.max_keyframes - 2)
    alignments = _room_alignments(closer, oracle, {k: frames[i] for k, i in results.items()})
    events = [_Event(s) for s in starts]
    owner = np.searchsorted(starts, np.arange(len(frames)), side="right") - 1
    points_lost, errors, worst_inflation = 0, [], np.inf
    false = 0
    for i in range(mapped, len(frames)):
        frame = frames[i]
        event = events[owner[i]] if owner[i] >= 0 else None
        if event is not None and event.seen is None and frame is not None and oracle.unique(frame):
            event.seen = i
        before = set(closer.map.keyframes)
        for result in session.push(black if frame is None else oracle.images[frame], meta=i):
            report = guard.frame(result, result.meta / config.rate_hz)
            if report.state is TrackingState.LOST:
                worst_inflation = min(worst_inflation, report.inflation)
            if event is None:
                continue
            if (
                event.detected is None
                and event.relocalised is None
                and report.state is not TrackingState.TRACKING
            ):
                event.detected = i
            reloc = guard.last
            if reloc is not None and event.relocalised is None:
                event.relocalised = i
                if _error(closer, alignments, oracle, result.pose_c2w, frame) > FALSE_RELOC_M:
                    false += 1
            elif reloc is not None:
                false += 1  # a second relocalisation within one event: the first one was wrong
            added = [k for k in closer.map.keyframes if k not in before]
            if event.relocalised is None or event.relocalised == i:
                reloc_key = None if reloc is None else reloc.keyframe
                points_lost += sum(len(closer.map.keyframes[k].points) for k in added if k != reloc_key)
            elif report.maps and frame is not None:
                errors.append(_error(closer, alignments, oracle, result.pose_c2w, frame))
    out = {
        "kidnaps": len(events),
        "detected": sum(e.detected is not None for e in events),
        "detect_frames": [e.detected - e.start for e in events if e.detected is not None],
        "relocalised": sum(e.relocalised is not None for e in events),
        "reloc_seconds": [
            round((e.relocalised - (e.seen if e.seen is not None else e.start)) / config.rate_hz, 4)
            for e in events
            if e.relocalised is not None
        ],
        "false_relocalisations": false,
        "points_added_while_lost": int(points_lost),
        "ate_after_reloc": float(np.sqrt(np.mean(np.square(errors)))) if errors else float("nan"),
    }
    return out, float(worst_inflation)


def _room_alignments(closer: LoopCloser, oracle: KidnapOracle, truth_of: dict[int, int]) -> dict[int, Sim3]:
    """Per room, the Sim(3) taking the map onto the truth, fitted on the room's mapping-phase keyframes (each
    room's map has drifted on its own; a camera placed in the wrong room is then ~`TwinRooms.offset` off)."""
    n = len(oracle.scene.images)
    out = {}
    for room in sorted({f // n for f in truth_of.values()}):
        keys = [k for k in sorted(closer.map.keyframes) if k in truth_of and truth_of[k] // n == room]
        out[room] = umeyama_sim3(
            np.stack([closer.map.keyframes[k].pose.translation for k in keys]),
            np.stack([oracle.poses[truth_of[k]][:3, 3] for k in keys]),
        )
    return out


def _error(
    closer: LoopCloser, alignments: dict[int, Sim3], oracle: KidnapOracle, pose_c2w: np.ndarray, frame: int
) -> float:
    """Metres between the frame's corrected camera centre (aligned by the room it is truly in) and the true
    centre."""
    centre = closer.corrected(pose_c2w).translation
    alignment = alignments[frame // len(oracle.scene.images)]
    return float(np.linalg.norm(alignment.apply_points(centre[None])[0] - oracle.poses[frame][:3, 3]))


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Register `reloc-eval`."""
    p = subparsers.add_parser(
        "reloc-eval",
        help="tracking health and relocalisation without a hint on the drifting oracle (kidnaps, covers)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--seed", type=int, default=RelocEvalConfig.seed)
    p.add_argument("--kidnaps", type=int, default=RelocEvalConfig.kidnaps)
    p.add_argument("--cover-frames", type=int, default=RelocEvalConfig.cover_frames)
    p.add_argument("--aliasing", choices=("none", "twin-rooms"), default=RelocEvalConfig.aliasing)
    p.add_argument("--json", type=Path, default=None, help="write the result here")
    p.set_defaults(func=main_args)


def main_args(args: argparse.Namespace) -> int:
    """Run `reloc-eval` from parsed arguments."""
    if args.kidnaps < 1 or args.cover_frames < 0:
        print("reloc-eval: need --kidnaps >= 1 and --cover-frames >= 0", file=sys.stderr)
        return 2
    config = RelocEvalConfig(args.seed, args.kidnaps, args.cover_frames, args.aliasing)
    result, inflation = evaluate(config)
    text = json.dumps(result, indent=2)
    print(text)
    print(f"smallest covariance factor while lost: {inflation:g}")
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(text + "\n")
    return 0
