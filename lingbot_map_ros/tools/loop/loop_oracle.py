"""The drifting oracle: a stand-in for the model that knows the synthetic scene
(tools/bags/synthetic_scene.py).

`DriftingOracle` is a `StreamingModel` (engine/contracts.py) over a real (tiny) `LingBotMap`'s streams: each
step books its frames in the stream's real KV cache (`begin_step`/`end_step`: frames stored, eviction, anchor
phase exactly as the model's) without computing attention, and returns the scene's truth instead:

* a streaming run (the anchor frames and every later step) gets the true depth and poses with drift injected
  per metre travelled: the local unit grows as ``exp(drift_scale · d)`` (a step of the camera and the depth
  both in that unit) and the heading turns ``drift_yaw · d`` about the vertical;
* a step whose frames are not consecutive — a loop closure's two-frame verification pass — sees both images
  at once, so it gets the true relative pose (a small noise, its own unit) when the two views overlap, and a
  wrong pose (a model that fails) when they do not: verification has to reject it.

Frames are told apart by their bytes (the scene is rendered at the network size, so the session's images are
the rendered ones). `image_descriptor` is the oracle's place descriptor: a normalised colour thumbnail.

Twin rooms (`LoopScene.twin_rooms`, issue 30): two identical rooms `apart_m` apart; the camera laps the first,
then the second. The stream drifts along the true (world) path; a verification pass relates what the images
show (the room-local poses), so a pair across the rooms gets the pose of the look-alike place: verification
is fooled the way a real model is, and only the loop closer's consistency checks can refuse such a loop.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from lingbot_map_ros.engine.face import (
    EngineSpec,
    SessionConfig,
    StreamingSession,
    build_engine,
    matrix_to_quat_xyzw,
)
from lingbot_map_ros.engine.offline import rigid
from lingbot_map_ros.model import StepOutput
from lingbot_map_ros.tools.bags.synthetic_scene import SceneConfig, camera_path, intrinsics, render


@dataclass(frozen=True)
class DriftConfig:
    """Injected drift: `scale_per_m` (0.03 = 3 % per metre), `yaw_deg_per_m`; `unit`: the stream's units per
    metre at the start (the model's depth unit is not metres); `pair_noise_deg` / `pair_noise_m` of a
    verification pass; `overlap_floor`: below this true overlap a pair pass fails."""

    scale_per_m: float = 0.03
    yaw_deg_per_m: float = 1.0
    unit: float = 1.0
    pair_noise_deg: float = 0.3
    pair_noise_m: float = 0.01
    overlap_floor: float = 0.1
    confidence: float = 3.0


@dataclass
class LoopScene:
    """Rendered frames of `turns` laps: images [N, H, W, 3] uint8, depths [N, H, W] float32 (m), poses
    [N, 4, 4] camera -> room (what the images show), K [3, 3]; `rooms` [N] int: the room of each frame and
    `room_offsets` [R, 3] where each room lies in the world (one room at the origin unless `twin_rooms`)."""

    config: SceneConfig
    images: np.ndarray
    depths: np.ndarray
    poses: np.ndarray
    k: np.ndarray
    turns: float
    rooms: np.ndarray | None = None
    room_offsets: np.ndarray | None = None

    @staticmethod
    def twin_rooms(config: SceneConfig, turns: float, apart_m: float) -> LoopScene:
        """`turns` laps (as `render`) whose second half happens in a copy of the room `apart_m` along x: the
        frames look the same, the world poses (`world_poses`) do not (module doc)."""
        scene = LoopScene.render(config, turns)
        scene.rooms = (np.arange(config.frames) >= config.frames // 2).astype(np.int64)
        scene.room_offsets = np.array([[0.0, 0.0, 0.0], [apart_m, 0.0, 0.0]])
        return scene

    @property
    def world_poses(self) -> np.ndarray:
        """[N, 4, 4] camera -> world: the room poses moved by their room's offset."""
        if self.rooms is None or self.room_offsets is None:
            return self.poses
        poses = self.poses.copy()
        poses[:, :3, 3] += self.room_offsets[self.rooms]
        return poses

    def same_room(self, a: int, b: int) -> bool:
        return self.rooms is None or bool(self.rooms[a] == self.rooms[b])

    def true_overlap(self, a: int, b: int) -> float:
        """`overlap` in the world: 0 across the twin rooms (a look-alike is not the place)."""
        return self.overlap(a, b) if self.same_room(a, b) else 0.0

    @staticmethod
    def render(config: SceneConfig, turns: float, lane_shift_m: float = 0.15) -> LoopScene:
        """`turns` laps, drifting sideways (inwards) by `lane_shift_m` over the run: laps never retrace
        exactly (no two frames are the same view)."""
        poses = camera_path(config, turns)
        progress = np.arange(config.frames) / config.frames
        inward = -poses[:, :3, 3] * np.array([1.0, 0.0, 1.0])
        inward /= np.linalg.norm(inward, axis=1, keepdims=True)
        poses[:, :3, 3] += lane_shift_m * progress[:, None] * inward
        rendered = [render(config, pose) for pose in poses]
        return LoopScene(
            config,
            np.stack([r[0] for r in rendered]),
            np.stack([r[1] for r in rendered]),
            poses,
            intrinsics(config),
            turns,
        )

    @property
    def frames_per_lap(self) -> float:
        return self.config.frames / self.turns

    def path_length(self) -> np.ndarray:
        """[N] metres travelled up to each frame (in the world: the way between twin rooms counts)."""
        steps = np.linalg.norm(np.diff(self.world_poses[:, :3, 3], axis=0), axis=1)
        return np.concatenate([[0.0], np.cumsum(steps)])

    def overlap(self, a: int, b: int, stride: int = 4, tolerance: float = 0.05) -> float:
        """True co-visibility: fraction of a's pixels (every `stride`-th) seen by b at a consistent depth."""
        h, w = self.depths.shape[1:]
        v, u = np.mgrid[0:h:stride, 0:w:stride]
        z = self.depths[a][v, u].reshape(-1)
        rays = np.stack(
            [
                (u.reshape(-1) - self.k[0, 2]) / self.k[0, 0],
                (v.reshape(-1) - self.k[1, 2]) / self.k[1, 1],
                np.ones(z.size),
            ],
            axis=1,
        )
        world = (rays * z[:, None]) @ self.poses[a][:3, :3].T + self.poses[a][:3, 3]
        inv_b = np.linalg.inv(self.poses[b])
        cam = world @ inv_b[:3, :3].T + inv_b[:3, 3]
        front = cam[:, 2] > 1e-3
        pix = cam[front] @ self.k.T
        ub, vb = np.rint(pix[:, 0] / pix[:, 2]).astype(int), np.rint(pix[:, 1] / pix[:, 2]).astype(int)
        inside = (ub >= 0) & (ub < w) & (vb >= 0) & (vb < h)
        seen = np.abs(self.depths[b][vb[inside], ub[inside]] - cam[front][inside, 2])
        return float((seen <= tolerance * cam[front][inside, 2]).sum() / z.size)


def eval_scene(
    width: int, height: int, frames: int, seed: int, turns: float, twin_rooms_m: float = 0.0
) -> LoopScene:
    """The scene of an evaluation run (`loop-eval`, `reloc-eval`): `frames` frames of width x height over
    `turns` laps, rendered with seed 7 + `seed`; with `twin_rooms_m` > 0 the twin rooms that far apart
    (`twin_rooms`, 2 x `turns`: both rooms)."""
    config = SceneConfig(width=width, height=height, frames=frames, seed=7 + seed, supersample=1)
    if twin_rooms_m > 0:
        return LoopScene.twin_rooms(config, 2 * turns, twin_rooms_m)
    return LoopScene.render(config, turns)


def drifted_poses(scene: LoopScene, drift: DriftConfig) -> tuple[np.ndarray, np.ndarray]:
    """The stream's drifting poses [N, 4, 4] and its local unit per frame [N] (stream units per metre), along
    the world path (between twin rooms too)."""
    travelled = scene.path_length()
    unit = drift.unit * np.exp(drift.scale_per_m * travelled)
    yaw = np.radians(drift.yaw_deg_per_m) * travelled
    world = scene.world_poses
    poses = world.copy()
    for i in range(1, len(poses)):
        turn = _yaw(yaw[i])
        step = world[i, :3, 3] - world[i - 1, :3, 3]
        poses[i, :3, 3] = poses[i - 1, :3, 3] + unit[i] * (turn @ step)
        poses[i, :3, :3] = turn @ world[i, :3, :3]
    return poses, unit


class DriftingOracle:
    """`StreamingModel` stand-in (module doc); `inner` is the real model whose streams (caches) it books."""

    def __init__(self, inner: torch.nn.Module, scene: LoopScene, drift: DriftConfig, seed: int = 0) -> None:
        self.inner, self.scene, self.drift = inner, scene, drift
        self.config = inner.config
        self.precision = inner.precision
        self.aggregator = inner.aggregator
        self.stream_poses, self.unit = drifted_poses(scene, drift)
        self._index = {_digest(image): i for i, image in enumerate(scene.images)}
        if len(self._index) != len(scene.images):
            raise ValueError(
                "two frames of the scene render the same image; the oracle cannot tell them apart"
            )
        self._seed = seed
        self.pair_passes = 0
        h, w = scene.images.shape[1:3]
        self._fov = (2 * np.arctan(h / 2 / scene.k[1, 1]), 2 * np.arctan(w / 2 / scene.k[0, 0]))

    @property
    def device(self) -> torch.device:
        return self.inner.device

    def new_stream(self, config=None, pool=None):  # noqa: ANN001, ANN201 - the StreamingModel seam
        return self.inner.new_stream(config, pool)

    def step(
        self, images: torch.Tensor, state, keyframe: bool = True, keep_tokens: bool = False
    ) -> StepOutput:  # noqa: ANN001
        anchoring = state.in_anchor_phase
        if anchoring and not keyframe:
            raise ValueError("the anchor step must be a keyframe")
        cache = state.cache_for((int(images.shape[-2]), int(images.shape[-1])))
        self._book(cache, int(images.shape[0]), keyframe)
        frames = [
            self._index[_digest(img)]
            for img in (images * 255).round().to(torch.uint8).permute(0, 2, 3, 1).cpu().numpy()
        ]
        if anchoring:
            state.oracle_origin = frames[0]  # the first anchor frame: this stream's world
        consecutive = all(b == a + 1 for a, b in zip(frames, frames[1:], strict=False))
        if len(frames) > 1 and not consecutive:
            poses, depths = self._pair(frames)
        else:
            origin = np.linalg.inv(self.stream_poses[state.oracle_origin])
            poses = [origin @ self.stream_poses[f] for f in frames]
            depths = [self.scene.depths[f] * self.unit[f] for f in frames]
        pose_enc = torch.tensor(np.stack([self._encode(p) for p in poses]), dtype=torch.float32)
        depth = torch.tensor(np.stack(depths), dtype=torch.float32)
        conf = torch.full_like(depth, self.drift.confidence)
        return StepOutput(
            pose_enc=pose_enc,
            pose_enc_list=pose_enc[:, None],
            pose_enc_raw_list=pose_enc[:, None],
            depth=depth,
            depth_conf=conf,
        )

    @staticmethod
    def _book(cache, frames: int, keyframe: bool) -> None:  # noqa: ANN001 - a PagedKVCache
        """Store `frames` frames of zero keys/values in every layer (the cache's own bookkeeping)."""
        c = cache.config
        zeros = torch.zeros(
            frames * (c.num_special + c.patches_per_frame),
            c.num_heads,
            c.head_dim,
            dtype=c.dtype,
            device=c.device,
        )
        step = cache.begin_step(frames, keyframe)
        for layer in range(c.num_layers):
            step.write(layer, zeros, zeros)
        cache.end_step(step)

    def _pair(self, frames: list[int]) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """A verification pass of two frames: truth with noise in a unit of its own, or a failure."""
        a, b = frames
        self.pair_passes += 1
        rng = np.random.default_rng([self._seed, a, b])
        pair_unit = float(rng.uniform(0.5, 2.0))
        relative = np.linalg.inv(self.scene.poses[a]) @ self.scene.poses[b]
        relative = pair_relative(rng, self.drift, relative, self.scene.overlap(a, b), pair_unit)
        return [np.eye(4), relative], [self.scene.depths[a] * pair_unit, self.scene.depths[b] * pair_unit]

    def _encode(self, pose: np.ndarray) -> np.ndarray:
        return np.concatenate([pose[:3, 3], matrix_to_quat_xyzw(pose[:3, :3]), self._fov])


def oracle_session(
    scene: LoopScene,
    drift: DriftConfig,
    seed: int = 0,
    frames: int | None = None,
    make: Callable[..., DriftingOracle] | None = None,
) -> tuple[StreamingSession, DriftingOracle]:
    """A `StreamingSession` (2 anchor frames, window 4, no re-anchor within `frames` pushes: by default the
    scene's, at most 992) over the oracle `make(model, scene, drift, seed=seed)` (default `DriftingOracle`;
    tools/loop/reloc_oracle.py `kidnap_session` makes a `KidnapOracle`) of the tiny preset's synthetic
    model."""
    stored = min(1000, len(scene.images) + 8) if frames is None else frames + 8
    config = SessionConfig(
        scale_frames=2,
        sliding_window=4,
        max_window=4,
        image_width=scene.images.shape[2],
        max_stored_frames=stored,
        camera_history=12,
    )
    session = build_engine(EngineSpec(preset="tiny", device="cpu", seed=0, session=config)).only
    oracle = (make or DriftingOracle)(session.model, scene, drift, seed=seed)
    session.model = oracle  # the engine's model seam: steps go through the oracle from now on
    return session, oracle  # type: ignore[return-value]


def image_descriptor(image: np.ndarray) -> np.ndarray:
    """The oracle's place descriptor of a network image [h, w, 3] uint8: an 8 x 6 colour thumbnail, centred,
    unit norm ([144] float32)."""
    import cv2

    thumb = cv2.resize(image, (8, 6), interpolation=cv2.INTER_AREA).astype(np.float32).reshape(-1)
    thumb -= thumb.mean()
    return (thumb / max(float(np.linalg.norm(thumb)), 1e-9)).astype(np.float32)


def _digest(image: np.ndarray) -> bytes:
    return hashlib.blake2b(np.ascontiguousarray(image).tobytes(), digest_size=16).digest()


def _yaw(angle: float) -> np.ndarray:
    """Rotation about the world's vertical (optical y, down) by `angle` rad."""
    c, s = np.cos(angle), np.sin(angle)
    return np.array([[c, 0.0, s], [0.0, 1.0, 0.0], [-s, 0.0, c]])


def _axis_angle(axis: np.ndarray, angle: float) -> np.ndarray:
    axis = np.asarray(axis, np.float64) / np.linalg.norm(axis)
    cross = np.array([[0, -axis[2], axis[1]], [axis[2], 0, -axis[0]], [-axis[1], axis[0], 0]])
    return np.eye(3) + np.sin(angle) * cross + (1 - np.cos(angle)) * cross @ cross


def pair_relative(
    rng: np.random.Generator, drift: DriftConfig, relative: np.ndarray, overlap: float, pair_unit: float
) -> np.ndarray:
    """What the oracle's two-frame pass returns for a pair whose true relative pose is `relative` [4, 4]: a
    wrong pose when the views overlap less than `drift.overlap_floor` (the model cannot relate them), else the
    truth with `drift.pair_noise_*`; translation in the pair's own unit `pair_unit`."""
    if overlap < drift.overlap_floor:
        relative = rigid(_axis_angle(rng.normal(size=3), np.radians(rng.uniform(20, 60))), rng.normal(size=3))
    else:
        noise = rigid(
            _axis_angle(rng.normal(size=3), np.radians(drift.pair_noise_deg)),
            rng.normal(scale=drift.pair_noise_m, size=3),
        )
        relative = relative @ noise
    relative[:3, 3] *= pair_unit
    return relative
