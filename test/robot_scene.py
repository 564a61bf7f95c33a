"""A simulated robot in the synthetic room (tools/bags/synthetic_scene.py) and a stand-in streaming session.

Robot world R: REP-103 (x forward along the room's long axis, y left, z up), floor at z = 0. The scene's own
frame S (OpenCV axes, floor at y = +1.3) is `p_R = OPTICAL_TO_BODY · p_S + (0, 0, 1.3)`. The base drives an
elliptical loop between the boxes; the camera sits on a mast (`base_link -> camera_link`) pitched down, its
optical frame turned as REP-103 says (`camera_link -> camera_optical`).

`StandInSession` is NOT a model: it returns the scene's true poses and depths in a model world that is a
random Sim(3) of S with an unknown scale factor, exactly as the engine's `FrameResult`s look. It lives in
test/ only, never in the package.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lingbot_map_ros.engine.geometry import OPTICAL_TO_BODY, Sim3, invert_rigid, quat_xyzw_to_matrix, rigid
from lingbot_map_ros.engine.result import PHASE_ANCHOR, PHASE_STREAMING, FrameResult
from lingbot_map_ros.tools.bags.synthetic_scene import SceneConfig, intrinsics, render

R_FROM_S = rigid(OPTICAL_TO_BODY, np.array([0.0, 0.0, 1.3]))
ROOM_X = (-4.0, 4.0)  # robot world x range (scene z)
ROOM_Y = (-2.5, 2.5)  # robot world y range (scene -x)


def rot_z(a: float) -> np.ndarray:
    c, s = np.cos(a), np.sin(a)
    return np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])


def rot_y(a: float) -> np.ndarray:
    c, s = np.cos(a), np.sin(a)
    return np.array([[c, 0.0, s], [0.0, 1.0, 0.0], [-s, 0.0, c]])


#: Static extrinsics: base_link -> camera_link (mast 1.2 m, 0.1 m forward, pitched down 8°), camera_link ->
#: camera_optical (REP-103 optical axes).
BASE_CAMLINK = rigid(rot_y(np.radians(8.0)), np.array([0.1, 0.0, 1.2]))
CAMLINK_OPTICAL = rigid(OPTICAL_TO_BODY, np.zeros(3))
BASE_CAM = BASE_CAMLINK @ CAMLINK_OPTICAL


def base_path(frames: int) -> np.ndarray:
    """[N, 4, 4] T_R_base of a planar loop (start at phase 0), heading along the loop and a little inwards."""
    phase = 2.0 * np.pi * np.arange(frames) / frames
    x, y = 2.6 * np.sin(phase), -1.5 * np.cos(phase)
    dx, dy = 2.6 * np.cos(phase), 1.5 * np.sin(phase)
    heading = np.arctan2(dy, dx) + 0.3  # a little inwards (the loop turns left)
    poses = np.tile(np.eye(4), (frames, 1, 1))
    for i in range(frames):
        poses[i, :3, :3] = rot_z(heading[i])
        poses[i, :3, 3] = [x[i], y[i], 0.0]
    return poses


@dataclass
class RobotScene:
    """Ground truth of a run: base poses in R, camera poses in S, images and true depths."""

    base: np.ndarray  # [N, 4, 4] T_R_base
    cam_s: np.ndarray  # [N, 4, 4] T_S_cam
    rgb: list[np.ndarray]
    depth: list[np.ndarray]
    k: np.ndarray
    config: SceneConfig


def make_scene(frames: int = 48, width: int = 128, height: int = 96) -> RobotScene:
    config = SceneConfig(width=width, height=height, frames=max(frames, 2), supersample=1)
    base = base_path(frames)
    cam_s = np.stack([invert_rigid(R_FROM_S) @ b @ BASE_CAM for b in base])
    renders = [render(config, c) for c in cam_s]
    rgb, depth = [r[0] for r in renders], [r[1] for r in renders]
    return RobotScene(base, cam_s, rgb, depth, intrinsics(config), config)


def random_sim3(seed: int, scale: float) -> Sim3:
    rng = np.random.default_rng(seed)
    q = rng.normal(size=4)
    return Sim3(quat_xyzw_to_matrix(q), rng.normal(size=3), scale)


class StandInSession:
    """Returns true poses and depths in a model world `x_w = sim(x_S)` (module doc); `push` follows the
    engine contract (nothing during the anchor phase, then all anchor frames, then one per frame)."""

    def __init__(self, scene: RobotScene, sim: Sim3, scale_frames: int = 4, keyframe_interval: int = 1):
        self.scene, self.sim = scene, sim
        self.scale_frames, self.keyframe_interval = scale_frames, keyframe_interval
        self._pending: list[tuple[int, object]] = []
        self._count = 0

    def push_index(self, i: int, meta: object = None) -> list[FrameResult]:
        self._pending.append((i, meta))
        self._count += 1
        if self._count < self.scale_frames:
            return []
        out = [self._result(j, m) for j, m in self._pending]
        self._pending = []
        return out

    def _k(self) -> np.ndarray:
        """The scene renders pixel centres (u + 0.5); the engine unprojects pixel u (no + 0.5): shift."""
        k = self.scene.k.copy()
        k[:2, 2] -= 0.5
        return k

    def _result(self, i: int, meta: object) -> FrameResult:
        depth = (self.scene.depth[i] * self.sim.scale).astype(np.float32)
        anchor = i < self.scale_frames
        key = anchor or (i - self.scale_frames) % self.keyframe_interval == 0
        return FrameResult(
            index=i,
            meta=meta,
            is_keyframe=key,
            phase=PHASE_ANCHOR if anchor else PHASE_STREAMING,
            pose_c2w=self.sim.apply_pose(self.scene.cam_s[i]),
            intrinsics=self._k(),
            depth=depth,
            depth_conf=np.full(depth.shape, 3.0, np.float32),
            rgb=self.scene.rgb[i],
            pose_enc=np.zeros(9, np.float32),
        )


def floor_plan(
    resolution: float, origin: tuple[float, float], shape: tuple[int, int]
) -> tuple[np.ndarray, np.ndarray]:
    """Rasterised floor plan in the map frame (= the first base frame) of a grid's cells:
    (walls [H, W] bool: cells on the room's walls, boxes [H, W] bool: cells within a cell of a box's
    footprint). From the scene's geometry (tools/synthetic_scene: ROOM_MIN/MAX, BOXES)."""
    from lingbot_map_ros.tools.bags.synthetic_scene import BOXES, ROOM_MAX, ROOM_MIN

    h, w = shape
    xs = origin[0] + (np.arange(w) + 0.5) * resolution
    ys = origin[1] + (np.arange(h) + 0.5) * resolution
    gx, gy = np.meshgrid(xs, ys)
    base0 = base_path(2)[0]
    pts = np.stack([gx.ravel(), gy.ravel(), np.zeros(gx.size), np.ones(gx.size)], axis=1)
    in_r = pts @ base0.T  # map (base at t0) -> R
    sx, sz = -in_r[:, 1], in_r[:, 0]  # R -> S (x_S = -y_R, z_S = x_R)
    wall = 0.5 * resolution
    inside = (sx > ROOM_MIN[0]) & (sx < ROOM_MAX[0]) & (sz > ROOM_MIN[2]) & (sz < ROOM_MAX[2])
    near = (
        (np.abs(sx - ROOM_MIN[0]) < wall)
        | (np.abs(sx - ROOM_MAX[0]) < wall)
        | (np.abs(sz - ROOM_MIN[2]) < wall)
        | (np.abs(sz - ROOM_MAX[2]) < wall)
    )
    walls = near & (
        (sx > ROOM_MIN[0] - wall)
        & (sx < ROOM_MAX[0] + wall)
        & (sz > ROOM_MIN[2] - wall)
        & (sz < ROOM_MAX[2] + wall)
    )
    boxes = np.zeros(gx.size, bool)
    pad = 1.5 * resolution
    for lo, hi in BOXES:
        boxes |= (sx > lo[0] - pad) & (sx < hi[0] + pad) & (sz > lo[2] - pad) & (sz < hi[2] + pad)
    del inside
    return walls.reshape(h, w), boxes.reshape(h, w)


def dilate(mask: np.ndarray, cells: int = 1) -> np.ndarray:
    """Binary dilation by a (2·cells + 1)² square (no scipy here)."""
    out = mask.copy()
    padded = np.pad(mask, cells)
    h, w = mask.shape
    for dy in range(2 * cells + 1):
        for dx in range(2 * cells + 1):
            out |= padded[dy : dy + h, dx : dx + w]
    return out


def tolerant_iou(occupied: np.ndarray, plan: np.ndarray, ignore: np.ndarray, cells: int = 1) -> float:
    """IoU of occupied cells against the plan with a `cells` tolerance, outside `ignore`:
    TP = occupied near the plan, FP = occupied away from it, FN = plan cells with no occupied cell near."""
    occupied, plan = occupied & ~ignore, plan & ~ignore
    tp = int((occupied & dilate(plan, cells)).sum())
    fp = int((occupied & ~dilate(plan, cells)).sum())
    fn = int((plan & ~dilate(occupied, cells)).sum())
    return tp / max(tp + fp + fn, 1)
