"""`lingbot-map-ros loop-eval`: loop closure on the drifting oracle (tools/loop/loop_oracle.py), with numbers.

The synthetic room is rendered along `--laps` laps (plus a quarter lap back through the start), the oracle
stands in for the model (true depth and poses with `--drift-scale` per metre of scale drift and
`--drift-yaw-deg-per-m` of heading drift), the frames go through the engine's `StreamingSession` and a
camera's engine closing loops (`CameraState`, engine/camera_state.py, as `run` and the node: oracle
descriptors, the real verification pass through the oracle model, the one correction rule). Printed and
written (`--json`):

* ``ate_without`` / ``ate_with``: RMSE of camera centres (metres) after Sim(3) alignment (evo) of the stream's
  trajectory / the loop-closed one (as `run` writes it) to the truth;
* ``loops_accepted`` / ``loops_rejected`` (by verification or as graph outliers) and ``false_accepts``
  (accepted loop edges whose keyframes' true views overlap less than 5 %);
* ``duplicate_surface_fraction_without`` / ``_with``: of the revisit's points (keyframes after the first lap)
  on a surface the first lap saw, the fraction more than 5 cm (after alignment) from the first lap's points;
* ``keyframes`` / ``submaps``: loop keyframes at the end, and how many submaps the memory budget made;
* ``max_jump_m``: the largest jump a loop made at the camera (metres at the start's unit);
* with ``--twin-rooms-m D`` (tools/loop/loop_oracle.py "Twin rooms"): the second half of the run laps an
identical
  room D metres away; ``cross_room_loops`` counts accepted loop edges across the rooms (every one a false
  accept: verification was fooled) and ``rooms_apart_m`` the distance of the two rooms' keyframe centroids in
  the loop-closed map (D when they stay apart, ~0 when they merged).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from evo.core import metrics
from evo.core.trajectory import PosePath3D
from scipy.spatial import cKDTree

from lingbot_map_ros.engine.face import (
    CameraState,
    LoopCloser,
    LoopClosureConfig,
    MapperConfig,
    ScaleConfig,
    loop_closer,
)
from lingbot_map_ros.engine.offline import from_pose
from lingbot_map_ros.tools.evaluation.trajectory import umeyama_sim3
from lingbot_map_ros.tools.loop.loop_oracle import (
    DriftConfig,
    DriftingOracle,
    LoopScene,
    eval_scene,
    image_descriptor,
    oracle_session,
)
from lingbot_map_ros.tools.run.bag import PosedFrames, track_frame

OVERSHOOT_TURNS = 0.25
#: Stamp step of the scene's frames (ns: 10 Hz).
FRAME_NS = 100_000_000
DUPLICATE_DISTANCE_M = 0.05
FALSE_ACCEPT_OVERLAP = 0.05


@dataclass(frozen=True)
class LoopEvalConfig:
    seed: int = 0
    laps: int = 1
    drift_scale: float = 0.03
    drift_yaw_deg_per_m: float = 1.0
    frames: int = 120
    width: int = 112
    height: int = 84
    max_keyframes: int = LoopClosureConfig.max_keyframes
    twin_rooms_m: float = 0.0
    odometry: bool = False  # give the closer the true world pose of each frame as the robot's odometry
    max_loop_chi2: float = LoopClosureConfig.max_loop_chi2


def ate(estimate: np.ndarray, reference: np.ndarray) -> tuple[float, np.ndarray]:
    """RMSE (reference units) of the camera centres of `estimate` [N, 4, 4] against `reference` after evo's
    Sim(3) (Umeyama) alignment, and the aligned estimate's centres [N, 3]."""
    est = PosePath3D(poses_se3=[p for p in estimate])
    ref = PosePath3D(poses_se3=[p for p in reference])
    est.align(ref, correct_scale=True)
    ape = metrics.APE(metrics.PoseRelation.translation_part)
    ape.process_data((ref, est))
    return float(ape.get_statistic(metrics.StatisticsType.rmse)), est.positions_xyz


def evaluate(config: LoopEvalConfig) -> tuple[dict[str, float], dict[str, np.ndarray]]:
    """Run the loop (module doc): the result dict and the tracks {truth, without, with} [N, 3] (aligned)."""
    turns = config.laps + OVERSHOOT_TURNS
    scene = eval_scene(config.width, config.height, config.frames, config.seed, turns, config.twin_rooms_m)
    truth = scene.world_poses
    drift = DriftConfig(scale_per_m=config.drift_scale, yaw_deg_per_m=config.drift_yaw_deg_per_m)
    session, oracle = oracle_session(scene, drift, config.seed)
    closer = loop_closer(
        LoopClosureConfig(
            min_similarity=0.5,
            max_keyframes=config.max_keyframes,
            merge_size=5,
            max_loop_chi2=config.max_loop_chi2,
        ),
        config.width,
        oracle,
        image_descriptor,
    )
    closing = CameraState(MapperConfig(scale=ScaleConfig("none")))
    closing.attach_loop(closer, threaded=False)
    stream, closed, jumps = np.zeros((config.frames, 4, 4)), PosedFrames(), [0.0]
    for i, image in enumerate(scene.images):
        for result in session.push(image, meta=i * FRAME_NS):
            k = result.meta // FRAME_NS
            stream[k] = result.pose_c2w
            odometry = truth[k] if config.odometry else None
            correction = track_frame(closing, result, closed, odometry)
            if correction is not None and correction.jump is not None:  # the camera's jump at this frame
                last = closed.poses[-1]
                before = np.linalg.inv(correction.jump) @ last
                jumps.append(float(np.linalg.norm(last[:3, 3] - before[:3, 3])))
    ate_without, track_without = ate(stream, truth)
    ate_with, track_with = ate(np.array(closed.poses), truth)
    accepted = closer.accepted
    false = sum(scene.true_overlap(a, b) < FALSE_ACCEPT_OVERLAP for a, b in accepted)
    out = {
        "ate_without": ate_without,
        "ate_with": ate_with,
        "loops_accepted": len(accepted),
        "loops_rejected": closer.stats.rejected + closer.stats.graph_outliers,
        "false_accepts": int(false),
        "duplicate_surface_fraction_without": _duplicates(closer, scene, oracle, stream, use_graph=False),
        "duplicate_surface_fraction_with": _duplicates(closer, scene, oracle, stream, use_graph=True),
        "keyframes": len(closer.map),
        "submaps": closer.map.submaps,
        "max_jump_m": max(jumps),
        "cross_room_loops": sum(not scene.same_room(a, b) for a, b in accepted),
        "rooms_apart_m": _rooms_apart(closer, scene),
    }
    return out, {"truth": scene.poses[:, :3, 3], "without": track_without, "with": track_with}


def _rooms_apart(closer: LoopCloser, scene: LoopScene) -> float:
    """Distance of the two twin rooms' keyframe centroids in the loop-closed map (0.0 with one room)."""
    if scene.rooms is None:
        return 0.0
    rooms = [
        [kf.pose.translation for k, kf in closer.map.keyframes.items() if scene.rooms[k] == r] for r in (0, 1)
    ]
    if not rooms[0] or not rooms[1]:
        return 0.0
    return float(np.linalg.norm(np.mean(rooms[1], axis=0) - np.mean(rooms[0], axis=0)))


def _duplicates(
    closer: LoopCloser, scene: LoopScene, oracle: DriftingOracle, stream: np.ndarray, use_graph: bool
) -> float:
    """Duplicate-surface fraction (module doc) of the map with or without the graph's keyframe poses."""
    keys = sorted(closer.map.keyframes)
    poses = [closer.map.keyframes[k].pose if use_graph else from_pose(stream[k]) for k in keys]
    centres = np.stack([p.translation for p in poses])
    alignment = umeyama_sim3(centres, scene.world_poses[keys, :3, 3])
    lap = scene.frames_per_lap
    first = [(k, p) for k, p in zip(keys, poses, strict=True) if k < lap]
    later = [(k, p) for k, p in zip(keys, poses, strict=True) if k >= lap]
    if not first or not later:
        return 0.0
    ref_map = np.concatenate([_points(scene, oracle, k, p, alignment, 1) for k, p in first])
    ref_true = np.concatenate([_true_points(scene, k, 1) for k, _ in first])
    query_map = np.concatenate([_points(scene, oracle, k, p, alignment, 4) for k, p in later])
    query_true = np.concatenate([_true_points(scene, k, 4) for k, _ in later])
    seen_before = cKDTree(ref_true).query(query_true)[0] <= DUPLICATE_DISTANCE_M / 2
    if not seen_before.any():
        return 0.0
    distance = cKDTree(ref_map).query(query_map[seen_before])[0]
    return float((distance > DUPLICATE_DISTANCE_M).mean())


def _pixels(scene: LoopScene, k: int, stride: int) -> np.ndarray:
    h, w = scene.depths.shape[1:]
    v, u = np.mgrid[0:h:stride, 0:w:stride]
    z = scene.depths[k][v, u].reshape(-1)
    keep = z < 4.0  # near surfaces: the pixel footprint stays well under the 5 cm threshold
    rays = np.stack(
        [
            (u.reshape(-1) - scene.k[0, 2]) / scene.k[0, 0],
            (v.reshape(-1) - scene.k[1, 2]) / scene.k[1, 1],
            np.ones(z.size),
        ],
        axis=1,
    )
    return (rays * z[:, None])[keep]


def _true_points(scene: LoopScene, k: int, stride: int) -> np.ndarray:
    world = scene.world_poses[k]
    return _pixels(scene, k, stride) @ world[:3, :3].T + world[:3, 3]


def _points(scene: LoopScene, oracle: DriftingOracle, k: int, pose, alignment, stride: int) -> np.ndarray:  # noqa: ANN001
    """Keyframe k's points as the map places them (its depth in the stream's unit), aligned to the truth."""
    return alignment.apply_points(pose.apply_points(_pixels(scene, k, stride) * oracle.unit[k]))


def plot(path: Path, tracks: dict[str, np.ndarray], result: dict[str, float], title: str) -> Path:
    """PNG from above (x, z of the optical world) of the truth and the aligned tracks with / without."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from lingbot_map_ros.tools.run.report import _save_png

    fig, ax = plt.subplots(figsize=(6, 5.4))
    ax.plot(tracks["truth"][:, 0], tracks["truth"][:, 2], color="0.6", lw=2.5, label="truth")
    ax.plot(
        tracks["without"][:, 0],
        tracks["without"][:, 2],
        color="tab:red",
        lw=1.0,
        label=f"without loop closure (ATE {result['ate_without']:.3f} m)",
    )
    ax.plot(
        tracks["with"][:, 0],
        tracks["with"][:, 2],
        color="tab:blue",
        lw=1.2,
        label=f"with loop closure (ATE {result['ate_with']:.3f} m)",
    )
    ax.set_xlabel("x [m]")
    ax.set_ylabel("z [m]")
    ax.set_aspect("equal", adjustable="datalim")
    ax.legend(loc="best", fontsize=8)
    ax.grid(alpha=0.3)
    ax.set_title(title, fontsize=9)
    return _save_png(fig, path)


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Register `loop-eval`."""
    p = subparsers.add_parser(
        "loop-eval",
        help="loop closure on the drifting oracle: ATE, loops, duplicates",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--seed", type=int, default=LoopEvalConfig.seed)
    p.add_argument("--laps", type=int, default=LoopEvalConfig.laps)
    p.add_argument(
        "--drift-scale",
        type=float,
        default=LoopEvalConfig.drift_scale,
        help="scale drift per metre (0.03 = 3 %%)",
    )
    p.add_argument("--drift-yaw-deg-per-m", type=float, default=LoopEvalConfig.drift_yaw_deg_per_m)
    p.add_argument("--frames", type=int, default=None, help="frames in all (default: 100 per lap)")
    p.add_argument("--width", type=int, default=LoopEvalConfig.width, help="multiple of 14")
    p.add_argument("--height", type=int, default=LoopEvalConfig.height, help="multiple of 14")
    p.add_argument(
        "--twin-rooms-m",
        type=float,
        default=0.0,
        help="lap a second, identical room this far away (0: one room); look-alike loops must be refused",
    )
    p.add_argument("--json", type=Path, default=None, help="write the result here")
    p.add_argument("--plot", type=Path, default=None, help="write a PNG of the tracks here")
    p.set_defaults(func=main_args)


def main_args(args: argparse.Namespace) -> int:
    """Run `loop-eval` from parsed arguments."""
    frames = args.frames or int(100 * (args.laps + OVERSHOOT_TURNS))
    config = LoopEvalConfig(
        args.seed,
        args.laps,
        args.drift_scale,
        args.drift_yaw_deg_per_m,
        frames,
        args.width,
        args.height,
        twin_rooms_m=args.twin_rooms_m,
    )
    result, tracks = evaluate(config)
    text = json.dumps(result, indent=2)
    print(text, file=sys.stdout)
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(text + "\n")
    if args.plot is not None:
        title = (
            f"loop-eval seed {args.seed}, {args.laps} lap(s), drift {100 * args.drift_scale:g} %/m, "
            f"{args.drift_yaw_deg_per_m:g} deg/m"
        )
        print(f"plot: {plot(args.plot, tracks, result, title)}", file=sys.stdout)
    return 0
