"""`lingbot-map-ros run BAG -o OUT`: the mapping engine directly on a bag, without DDS.

Deterministic (fixed seed for synthetic weights, fixed thread count, frames in bag order, none dropped
for lack of time) and as fast as the model allows. The results go through the node's engine of a camera, one
call a frame (`engine.camera_state.CameraState`: `track`, the map side inline, `posed`; TF mode
`map_to_camera`: a bag has no robot TF here; scale `none` or `--scale-factor`), so a run and the node give
the same trajectory and map for the same frames. Loops are closed as in the node (`--no-loop-closure`: not),
inline: a loop's correction (the one rule, engine/correction.py) moves the trajectory and rebuilds the map
before the next frame. Writes into OUT, in the node's `map` frame (REP-103: the first camera's position, x
forward, y left, z up; as the node's `~/save_map`): `trajectory.tum` (one line per posed frame, header
stamps; loop-corrected), `map.ply` (voxel map, xyz + rgb), `summary.json` (frames, keyframes, drops, FPS,
latency, session and cache statistics, `loop_closure`: loops accepted and rejected, loop keyframes, the size
of each correction) and `run.png` (trajectory from above + per-frame latency).

A frame is "dropped" when it never got a pose: it could not be decoded, or the bag ended while it waited
for the anchor phase to fill.

Several camera topics (`--topics /front/image /rear/image`, or a bag with several camera topics and no
`--topic`) are mapped together by tools/run/cameras.py (one model, a session and a mapper per camera,
outputs per camera under OUT/<camera>/).

`--load SESSION` first continues a saved session (docs/session.md: its anchors are re-run, its map, grid and
trajectory restored), so the bag's frames are posed in the saved map frame; `--save SESSION` writes the
session at the end of the run (a folder that must not exist), which the node's `session.load_path` accepts.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from tqdm import tqdm

from lingbot_map_ros.engine.face import (
    CameraState,
    HealthConfig,
    LoopClosureConfig,
    LoopCorrection,
    gtsam_missing,
    loop_closer,
    persistence,
    write_ply,
    write_tum,
)
from lingbot_map_ros.engine.offline import Describe, VoxelMap
from lingbot_map_ros.tools.bags.bag_io import camera_connection, count_messages, iter_frames, open_bag
from lingbot_map_ros.tools.run.frames import FrameKeeper
from lingbot_map_ros.tools.run.options import RunConfig
from lingbot_map_ros.tools.run.report import latency_summary, plot_run, write_json

if TYPE_CHECKING:
    from lingbot_map_ros.engine.face import StreamingModel, StreamingSession


@dataclass
class RunResult:
    """What a run produced. Arrays: `stamps_s` [N] float64, `poses` [N, 4, 4] float64 (camera optical
    frame -> `map`, REP-103), `latency_ms` [N], `keyframe` [N] bool, for the N posed frames in order;
    `skipped`: why each undecodable frame of the bag was left out (not counted in `frames`)."""

    frames: int
    stamps_s: np.ndarray
    poses: np.ndarray
    latency_ms: np.ndarray
    keyframe: np.ndarray
    dropped: int
    wall_s: float
    map_points: int
    session_stats: dict[str, object]
    loop_closure: dict[str, object] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)
    files: dict[str, Path] = field(default_factory=dict)

    @property
    def fps(self) -> float:
        """Frames per second of processing (all frames, wall time of the engine loop)."""
        return self.frames / self.wall_s if self.wall_s > 0 else 0.0


def build_session(config: RunConfig, model: object | None = None) -> StreamingSession:
    """A `StreamingSession` over the preset's model (checkpoint or seeded synthetic weights), or over
    ``model`` (an already built one: several cameras of one run share it)."""

    from lingbot_map_ros.engine.face import EngineSpec, build_engine

    return build_engine(
        EngineSpec(
            preset=config.preset,
            checkpoint=config.checkpoint,
            device=config.device,
            seed=config.seed,
            session=config.session,
        ),
        model,
    ).only


def camera_state(
    config: RunConfig,
    model: object,
    describe: Describe | None = None,
    loop_config: LoopClosureConfig | None = None,
) -> CameraState:
    """A bare camera's engine for `config` (`CameraState`: TF mode map_to_camera), closing loops inline unless
    `config.loop_closure` is off: descriptors from `model`'s tokens (or `describe`), verification by it,
    `loop_config` (None: the node's `loop_closure.*` defaults). Without gtsam it maps on without loop closure
    (one line on stderr), as the node does."""
    state = CameraState(config.mapper_config(), health=HealthConfig() if config.tracking_health else None)
    if config.loop_closure and (missing := gtsam_missing()) is not None:
        print(f"loop closure off: {missing}", file=sys.stderr)
    elif config.loop_closure:
        closer = loop_closer(loop_config or LoopClosureConfig(), config.image_width, model, describe)
        state.attach_loop(closer, threaded=False)
    return state


def track_frame(
    state: CameraState, result: object, posed: PosedFrames, odometry: np.ndarray | None = None
) -> LoopCorrection | None:
    """One result through a camera's engine as the node does it (`track`, the map work, `posed` with the
    robot's `odometry` pose [4, 4] if known), its pose appended to `posed` and `posed` moved by the
    correction a loop caused (returned; None without one)."""
    tracked = state.track(result, "", result.meta / 1e9)  # the node's pose side, once
    state.map_side.integrate(tracked.work)  # its map side, inline
    posed.stamps.append(tracked.frame.stamp_s)
    posed.poses.append(tracked.frame.body_pose)
    correction = state.posed(result, tracked, tracked.frame.stamp_s, odometry)
    if correction is not None:  # the engine moved its trajectory: these poses are the same ones
        posed.poses = list(correction.move(np.array(posed.stamps), np.array(posed.poses)))
    return correction


@dataclass
class PosedFrames:
    """A camera's posed frames of a run: stamps [N] s and poses [N, 4, 4] (optical frame -> its map)."""

    stamps: list[float] = field(default_factory=list)
    poses: list[np.ndarray] = field(default_factory=list)


def bag_camera_topic(config: RunConfig) -> tuple[str, int]:
    """The camera topic `config` maps in its bag and how many frames it holds (at most `max_frames`), read
    from the bag's metadata; BagError for a missing or unreadable bag or topic."""
    reader = open_bag(config.bag)
    try:
        topic = camera_connection(reader, config.topic).topic
        total = count_messages(reader, topic)
    finally:
        reader.close()
    return topic, total if config.max_frames is None else min(total, config.max_frames)


def run_bag(
    config: RunConfig,
    model: StreamingModel | None = None,
    on_frame: Callable[[int], None] | None = None,
    describe: Describe | None = None,
    loop_config: LoopClosureConfig | None = None,
) -> RunResult:
    """Stream every frame of the bag's camera topic through the engine and write the outputs.

    Args:
        model: an already built model (a `batch` worker loads it once and maps bag after bag through this
            function); None builds the preset's model (checkpoint or seeded synthetic weights) first.
        on_frame: called with the number of frames pushed so far after every frame (progress reporting).
        describe: the loop closer's place descriptor of a network image (None: the model's tokens).
        loop_config: the loop closer's settings (None: the node's defaults).
    """
    topic, total = bag_camera_topic(config)
    session = build_session(config, model)
    state = camera_state(config, session.model, describe, loop_config)
    mapper = state.mapper
    if config.load_session is not None:
        persistence.load(config.load_session, session, mapper, config.compat(), loop=state.closer)
    posed, latency, keyframe = PosedFrames(), [], []
    skipped: list[str] = []  # undecodable frames, left out (summary.json `skipped_frames`)
    keeper = FrameKeeper(config.output_dir) if config.keep_frames else None
    frames = 0
    start = time.perf_counter()
    for frame in tqdm(
        iter_frames(config.bag, topic, config.max_frames, skipped),
        total=total,
        desc="run",
        unit="frame",
        file=sys.stderr,
        disable=not config.progress,
    ):
        frames += 1
        step_start = time.perf_counter()
        results = session.push(frame.rgb, meta=frame.stamp_ns)
        step_ms = 1e3 * (time.perf_counter() - step_start)
        for result in results:
            track_frame(state, result, posed)
            latency.append(step_ms)
            keyframe.append(result.is_keyframe)
            if keeper is not None:
                keeper.add(posed.stamps[-1], result.rgb, result.intrinsics)
        if on_frame is not None:
            on_frame(frames)
    wall_s = time.perf_counter() - start
    if frames == 0:
        why = f" ({len(skipped)} undecodable, the first: {skipped[0]})" if skipped else ""
        raise ValueError(f"topic {topic} of bag {config.bag} holds no frames{why}")
    result = RunResult(
        frames=frames,
        stamps_s=np.array(posed.stamps),
        poses=np.array(posed.poses).reshape(-1, 4, 4),
        latency_ms=np.array(latency),
        keyframe=np.array(keyframe, bool),
        dropped=frames - len(posed.stamps),
        wall_s=wall_s,
        map_points=len(mapper.voxels),
        session_stats=session.stats().as_dict(),
        loop_closure=state.loop_summary(),
        skipped=skipped,
    )
    if keeper is not None:
        result.files["frames"] = keeper.close()
    _write_outputs(config, result, mapper.voxels, topic)
    if config.save_session is not None:
        saved = persistence.save_session(
            config.save_session,
            persistence.capture(session, mapper, config.compat(), int, loop=state.closer),
        )
        result.files["session"] = saved
    return result


def _write_outputs(config: RunConfig, result: RunResult, voxels: VoxelMap, topic: str) -> None:
    out = config.output_dir
    out.mkdir(parents=True, exist_ok=True)
    result.files = {
        **result.files,
        "trajectory": write_tum(out / "trajectory.tum", result.stamps_s, result.poses),
        "map": write_ply(out / "map.ply", *voxels.points()),
    }
    weights = f"synthetic (seed {config.seed})" if config.checkpoint is None else str(config.checkpoint)
    if len(result.poses):
        result.files["plot"] = plot_run(
            out / "run.png",
            result.poses,
            result.latency_ms,
            result.keyframe,
            f"{config.bag.name}: {result.frames} frames, preset {config.preset}, weights {weights}, "
            f"width {config.image_width}, {result.fps:.1f} FPS on {config.device}",
            frame="ros",
        )
    summary = {
        "bag": str(config.bag),
        "topic": topic,
        "preset": config.preset,
        "weights": weights,
        "device": config.device,
        "image_width": config.image_width,
        "frames": result.frames,
        "posed": len(result.stamps_s),
        "keyframes": int(result.keyframe.sum()),
        "dropped": result.dropped,
        "skipped_frames": len(result.skipped),
        "skipped": result.skipped[:10],
        "wall_s": round(result.wall_s, 3),
        "fps": round(result.fps, 3),
        "latency_ms": latency_summary(result.latency_ms),
        "map_points": result.map_points,
        "map": voxels.stats(),
        "session": result.session_stats,
        "loop_closure": result.loop_closure,
        "files": {k: _relative_to(v, out) for k, v in result.files.items()},
    }
    result.files["summary"] = write_json(out / "summary.json", summary)


def loop_line(summary: dict[str, object]) -> str:
    """The loop closure part of a run's printed line ("" when off)."""
    if not summary.get("enabled"):
        return ""
    return (
        f"; loops {summary['loops_accepted']} accepted, {summary['loops_rejected']} rejected, "
        f"{len(summary['corrections'])} corrections"
    )


def _relative_to(path: Path, folder: Path) -> str:
    """`path` as written into summary.json: its name when it lies in `folder` (so the output folder can be
    moved, and `batch` renames it when complete), else as given."""
    return path.name if path.parent == folder else str(path)
