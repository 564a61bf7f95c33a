"""`lingbot-map-ros run BAG --topics /front/image /rear/image -o OUT`: several cameras of one bag, one model.

Like the node with `cameras` (docs/node.md, "Several cameras"), but one frame at a time: one model, one
`StreamingSession` per camera topic (its own KV pool; no batched steps, so each camera's files are
byte-identical to a run of its topic alone), each topic's frames pushed through its session in bag
(log-time) order, each camera's results through its own engine (`CameraState`, engine/camera_state.py:
tracker, map side and loop closer, as `run` of one topic). A bag has no robot TF here, so every
camera is mapped in its own map frame (TF mode map_to_camera, as the node's `map_<name>`): there is no fused
map. Writes per camera
`OUT/<camera>/trajectory.tum`, `OUT/<camera>/map.ply` and `OUT/<camera>/run.png`, and `OUT/summary.json`
(per camera: topic, frames, posed, keyframes, dropped, map points, session statistics, loop closure; all:
FPS). A camera's
name is its topic without the image suffix (`/front/image` -> `front`, `/cam/left/image_raw` -> `cam_left`).
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from tqdm import tqdm

from lingbot_map_ros.engine.face import CameraState, write_ply, write_tum
from lingbot_map_ros.tools.bags.bag_io import camera_connections, count_messages, iter_camera_frames, open_bag
from lingbot_map_ros.tools.run.bag import PosedFrames, RunConfig, build_session, camera_state, track_frame
from lingbot_map_ros.tools.run.report import latency_summary, plot_run, write_json

#: Topic levels that name the image, not the camera.
IMAGE_LEVELS = ("image", "image_raw", "image_rect", "image_color", "image_rect_color", "compressed")


def camera_name(topic: str) -> str:
    """`/front/image` -> `front`; `/cam/left/image_raw/compressed` -> `cam_left`; `/image` -> `camera`."""
    levels = [level for level in topic.split("/") if level and level not in IMAGE_LEVELS]
    return "_".join(levels) or "camera"


def camera_names(topics: list[str]) -> list[str]:
    """One unique name per topic (`camera_name`, numbered where two would be equal)."""
    names = [camera_name(t) for t in topics]
    return [f"{n}_{i}" if names.count(n) > 1 else n for i, n in enumerate(names)]


@dataclass
class CameraRun:
    """One camera of a run: its topic, session, engine (`CameraState`: tracker, mapper, loop closer) and per
    posed frame: stamps and poses (`posed`: optical frame -> its map), step latency [N] ms, keyframe [N]."""

    name: str
    topic: str
    session: object
    state: CameraState
    frames: int = 0
    posed: PosedFrames = field(default_factory=PosedFrames)
    latency_ms: list[float] = field(default_factory=list)
    keyframe: list[bool] = field(default_factory=list)


def bag_camera_topics(bag: Path) -> list[str]:
    """The bag's camera topics (sorted)."""
    reader = open_bag(bag)
    try:
        return [c.topic for c in camera_connections(reader, None)]
    finally:
        reader.close()


def run_cameras(config: RunConfig, topics: list[str]) -> dict[str, object]:
    """Map every frame of `topics` (several camera topics of `config.bag`) together; returns the summary."""
    if config.load_session is not None or config.save_session is not None:
        raise ValueError("--load/--save keep one camera's session: run one topic at a time for sessions")
    if config.keep_frames:
        raise ValueError(
            "--keep-frames keeps one camera's frames: run one topic at a time (--topic) to export"
        )
    reader = open_bag(config.bag)
    try:
        camera_connections(reader, topics)  # each topic exists and is a camera
        total = sum(count_messages(reader, topic) for topic in topics)
    finally:
        reader.close()
    if config.max_frames is not None:
        total = min(total, config.max_frames)
    first = build_session(config)
    cameras = {}
    for i, (name, topic) in enumerate(zip(camera_names(topics), topics, strict=True)):
        session = first if i == 0 else build_session(config, first.model)  # one model, a pool each
        cameras[topic] = CameraRun(name, topic, session, camera_state(config, session.model))
    start = time.perf_counter()
    for frame in tqdm(
        iter_camera_frames(config.bag, topics, config.max_frames),
        total=total,
        desc="run",
        unit="frame",
        file=sys.stderr,
        disable=not config.progress,
    ):
        camera = cameras[frame.topic]
        camera.frames += 1
        step_start = time.perf_counter()
        results = camera.session.push(frame.rgb, meta=frame.stamp_ns)
        step_ms = 1e3 * (time.perf_counter() - step_start)
        for result in results:
            track_frame(camera.state, result, camera.posed)
            camera.latency_ms.append(step_ms)
            camera.keyframe.append(result.is_keyframe)
    wall_s = time.perf_counter() - start
    frames = sum(c.frames for c in cameras.values())
    if frames == 0:
        raise ValueError(f"topics {topics} of bag {config.bag} hold no frames")
    summary = {
        "bag": str(config.bag),
        "topics": topics,
        "preset": config.preset,
        "device": config.device,
        "image_width": config.image_width,
        "frames": frames,
        "wall_s": round(wall_s, 3),
        "fps": round(frames / wall_s, 3) if wall_s > 0 else 0.0,
        "cameras": {c.name: _write_camera(config, c) for c in cameras.values()},
    }
    summary["files"] = {"summary": str(write_json(config.output_dir / "summary.json", summary))}
    return summary


def _write_camera(config: RunConfig, camera: CameraRun) -> dict[str, object]:
    """`OUT/<camera>/`: trajectory.tum, map.ply, run.png; the camera's part of the summary."""
    out = config.output_dir / camera.name
    out.mkdir(parents=True, exist_ok=True)
    poses = np.array(camera.posed.poses).reshape(-1, 4, 4)
    latency, keyframe = np.array(camera.latency_ms), np.array(camera.keyframe, bool)
    files = {
        "trajectory": write_tum(out / "trajectory.tum", np.array(camera.posed.stamps), poses),
        "map": write_ply(out / "map.ply", *camera.state.mapper.voxels.points()),
    }
    if len(poses):
        files["plot"] = plot_run(
            out / "run.png",
            poses,
            latency,
            keyframe,
            f"{config.bag.name} {camera.topic}: {camera.frames} frames, preset "
            f"{config.preset}, width {config.image_width}",
            frame="ros",
        )
    return {
        "topic": camera.topic,
        "frames": camera.frames,
        "posed": len(poses),
        "keyframes": int(keyframe.sum()),
        "dropped": camera.frames - len(poses),
        "latency_ms": latency_summary(latency),
        "map_points": len(camera.state.mapper.voxels),
        "session": camera.session.stats().as_dict(),
        "loop_closure": camera.state.loop_summary(),
        "files": {k: str(v) for k, v in files.items()},
    }
