"""The demo's built-in input: a procedurally textured room rendered by numpy ray casting along a known loop.

The scene (world frame = OpenCV axes: x right, y down, z forward; metres) is an axis-aligned room
x in [-2.5, 2.5], y in [-1.3, 1.3] (floor at y = +1.3), z in [-4, 4], holding four boxes. Every surface
carries its own colour and multi-octave value noise plus a tile grid, so there is texture to match at
every scale. The camera (optical axes) drives one elliptical loop around the boxes, looking ahead and
slightly inwards, bobbing a few centimetres, and ends where it started (a loop closure). Ground-truth
camera-to-world poses are kept and written in TUM format beside the bag.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np

from lingbot_map_ros.engine.face import write_tum
from lingbot_map_ros.tools.bags.bag_io import STORAGE_PLUGINS
from lingbot_map_ros.tools.bags.make_bag import MakeBagConfig, MakeBagResult, write_camera_bag

ROOM_MIN = np.array([-2.5, -1.3, -4.0])
ROOM_MAX = np.array([2.5, 1.3, 4.0])
# (min corner, max corner) of the boxes; all stand on the floor (y = +1.3), one leans on the wall x = +2.5.
BOXES = (
    (np.array([-0.5, 0.1, -1.2]), np.array([0.5, 1.3, -0.2])),
    (np.array([-0.3, -0.2, 0.9]), np.array([0.4, 1.3, 1.6])),
    (np.array([1.7, 0.5, -3.2]), np.array([2.5, 1.3, -2.4])),
    (np.array([-2.5, -0.6, 2.6]), np.array([-1.9, 1.3, 3.4])),
)


@dataclass(frozen=True)
class SceneConfig:
    """Rendering and trajectory settings. Images are `width` x `height` RGB uint8."""

    width: int = 256
    height: int = 192
    frames: int = 80
    fov_deg: float = 70.0  # horizontal field of view
    supersample: int = 2  # rays per pixel along each axis (anti-aliasing)
    seed: int = 7

    def __post_init__(self) -> None:
        if self.width < 32 or self.height < 32:
            raise ValueError(f"scene image must be at least 32x32, got {self.width}x{self.height}")
        if self.frames < 2:
            raise ValueError(f"scene needs at least 2 frames, got {self.frames}")
        if not 10.0 <= self.fov_deg <= 150.0:
            raise ValueError(f"fov_deg must be in [10, 150], got {self.fov_deg}")
        if self.supersample < 1:
            raise ValueError(f"supersample must be >= 1, got {self.supersample}")


def intrinsics(config: SceneConfig) -> np.ndarray:
    """Pinhole camera matrix [3, 3] float64 in pixels (square pixels, principal point at the centre)."""
    f = (config.width / 2.0) / np.tan(np.radians(config.fov_deg) / 2.0)
    return np.array([[f, 0.0, config.width / 2.0], [0.0, f, config.height / 2.0], [0.0, 0.0, 1.0]])


def camera_path(config: SceneConfig, turns: float = 1.0) -> np.ndarray:
    """Camera-to-world poses [N, 4, 4] float64 (OpenCV optical axes) of `turns` times round the elliptical
    loop (1: one closed loop; more: laps back through the start, for loop closure)."""
    phase = 2.0 * np.pi * turns * np.arange(config.frames) / config.frames
    centre = np.stack([1.5 * np.cos(phase), -0.05 + 0.08 * np.sin(3.0 * phase), 2.6 * np.sin(phase)], axis=1)
    tangent = np.stack([-1.5 * np.sin(phase), np.zeros_like(phase), 2.6 * np.cos(phase)], axis=1)
    inward = -centre * np.array([1.0, 0.0, 1.0])
    forward = _normalise(_normalise(tangent) + 0.35 * _normalise(inward)) + np.array([0.0, 0.12, 0.0])
    forward = _normalise(forward)
    right = _normalise(np.cross(np.array([0.0, 1.0, 0.0]), forward))
    down = np.cross(forward, right)
    poses = np.tile(np.eye(4), (config.frames, 1, 1))
    poses[:, :3, 0], poses[:, :3, 1], poses[:, :3, 2], poses[:, :3, 3] = right, down, forward, centre
    return poses


def render(config: SceneConfig, c2w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Image RGB uint8 [H, W, 3] and z-depth float32 [H, W] (metres along the optical axis) at pose `c2w`."""
    s = config.supersample
    k = intrinsics(config)
    xs = (np.arange(config.width * s) + 0.5) / s
    ys = (np.arange(config.height * s) + 0.5) / s
    u, v = np.meshgrid(xs, ys)
    rays_cam = np.stack([(u - k[0, 2]) / k[0, 0], (v - k[1, 2]) / k[1, 1], np.ones_like(u)], axis=-1)
    dirs = rays_cam.reshape(-1, 3) @ c2w[:3, :3].T
    origin = c2w[:3, 3]
    t, normal_axis, surface = _intersect(origin, dirs)
    points = origin + t[:, None] * dirs
    colour = _shade(points, dirs, normal_axis, surface, config.seed)
    image = colour.reshape(config.height * s, config.width * s, 3)
    depth = t.reshape(config.height * s, config.width * s)  # rays_cam has z = 1, so t is z-depth
    if s > 1:
        size = (config.width, config.height)
        image = cv2.resize(image, size, interpolation=cv2.INTER_AREA)
        depth = cv2.resize(depth, size, interpolation=cv2.INTER_AREA)
    return np.clip(image * 255.0 + 0.5, 0, 255).astype(np.uint8), depth.astype(np.float32)


def _intersect(origin: np.ndarray, dirs: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Nearest hit per ray: distance t [N], hit face axis [N] (0 x, 1 y, 2 z), surface id [N]."""
    with np.errstate(divide="ignore", invalid="ignore"):
        inv = 1.0 / dirs
        exit_bound = np.where(dirs > 0, ROOM_MAX, ROOM_MIN)
        t_axis = (exit_bound - origin) * inv
        t_axis[~np.isfinite(t_axis)] = np.inf
        axis = np.argmin(t_axis, axis=1)
        t = t_axis[np.arange(len(dirs)), axis]
        surface = axis * 2 + (dirs[np.arange(len(dirs)), axis] > 0)  # room faces 0..5
        for index, (lo, hi) in enumerate(BOXES):
            t1, t2 = (lo - origin) * inv, (hi - origin) * inv
            near, far = np.minimum(t1, t2), np.maximum(t1, t2)
            near = np.nan_to_num(near, nan=-np.inf)
            far = np.nan_to_num(far, nan=np.inf)
            t_near, t_far = near.max(axis=1), far.min(axis=1)
            hit = (t_near <= t_far) & (t_near > 1e-6) & (t_near < t)
            t = np.where(hit, t_near, t)
            axis = np.where(hit, near.argmax(axis=1), axis)
            surface = np.where(hit, 6 + index, surface)
    return t, axis, surface


def _shade(
    points: np.ndarray, dirs: np.ndarray, axis: np.ndarray, surface: np.ndarray, seed: int
) -> np.ndarray:
    """Linear RGB in [0, 1] [N, 3]: per-surface colour x value noise x tile grid x Lambert-like falloff."""
    # In-plane texture coordinates: the two world coordinates other than the face's normal axis.
    uv_index = np.array([[1, 2], [0, 2], [0, 1]])[axis]
    uv = np.take_along_axis(points, uv_index, axis=1)
    rng = np.random.default_rng(seed)
    palette = 0.35 + 0.6 * rng.random((6 + len(BOXES), 3))
    noise = (
        sum(
            0.5**octave * _value_noise(uv * (1.5 * 2.0**octave), seed + 31 * octave + surface)
            for octave in range(5)
        )
        / 1.9375
    )
    tiles = np.abs(np.sin(np.pi * uv * 2.0))
    grid = 1.0 - 0.55 * ((tiles[:, 0] < 0.06) | (tiles[:, 1] < 0.06))
    blob = _value_noise(uv * 0.7, seed + 999 + surface)
    base = palette[surface] * (0.45 + 0.55 * noise)[:, None] * grid[:, None]
    base = base * (0.75 + 0.5 * blob)[:, None]
    cosine = np.abs(_normalise(dirs)[np.arange(len(dirs)), axis])
    return np.clip(base * (0.55 + 0.45 * cosine)[:, None], 0.0, 1.0)


def _value_noise(uv: np.ndarray, seed: np.ndarray | int) -> np.ndarray:
    """Smooth lattice value noise in [0, 1] at coordinates `uv` [N, 2]; `seed` scalar or per point [N]."""
    cell = np.floor(uv).astype(np.int64)
    frac = uv - cell
    w = frac * frac * (3.0 - 2.0 * frac)

    def corner(dx: int, dy: int) -> np.ndarray:
        salt = np.asarray(seed, np.int64) * 83492791
        h = (cell[:, 0] + dx) * 73856093 ^ (cell[:, 1] + dy) * 19349663 ^ salt
        h = (h ^ (h >> 13)) * 1274126177
        return ((h ^ (h >> 16)) & 0xFFFF) / 65535.0

    top = corner(0, 0) * (1 - w[:, 0]) + corner(1, 0) * w[:, 0]
    bottom = corner(0, 1) * (1 - w[:, 0]) + corner(1, 1) * w[:, 0]
    return top * (1 - w[:, 1]) + bottom * w[:, 1]


def _normalise(v: np.ndarray) -> np.ndarray:
    return v / np.linalg.norm(v, axis=-1, keepdims=True)


@dataclass(frozen=True)
class SceneBag:
    """A rendered scene on disk: the bag, its ground truth (TUM, stamps = image stamps) and K [3, 3]."""

    bag: MakeBagResult
    ground_truth: Path
    k: np.ndarray


def write_scene_bag(
    config: SceneConfig,
    bag_path: Path,
    ground_truth: Path,
    storage: str = "mcap",
    rate_hz: float = 10.0,
    start_time_ns: int = 1_700_000_000_000_000_000,
) -> SceneBag:
    """Render the loop and write it as a camera bag (rgb8 Image + CameraInfo) plus a TUM ground truth."""
    poses = camera_path(config)
    frames = (render(config, pose)[0] for pose in poses)
    k = intrinsics(config)
    bag_config = MakeBagConfig(output=bag_path, storage=storage, rate_hz=rate_hz, start_time_ns=start_time_ns)
    result = write_camera_bag(bag_config, frames, k, total=config.frames)
    stamps_ns = start_time_ns + np.arange(config.frames, dtype=np.int64) * round(1e9 / rate_hz)
    write_tum(ground_truth, stamps_ns / 1e9, poses)
    return SceneBag(result, ground_truth, k)


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Register `synthetic-scene`."""
    p = subparsers.add_parser(
        "synthetic-scene",
        help="render the demo scene to a bag + ground truth",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("-o", "--output", type=Path, required=True, help="bag folder to create")
    p.add_argument("--ground-truth", type=Path, default=None, help="TUM file (default: OUTPUT.gt.tum)")
    p.add_argument("--frames", type=int, default=SceneConfig.frames)
    p.add_argument("--width", type=int, default=SceneConfig.width)
    p.add_argument("--height", type=int, default=SceneConfig.height)
    p.add_argument("--rate", type=float, default=10.0)
    p.add_argument("--storage", choices=sorted(STORAGE_PLUGINS), default="mcap")
    p.set_defaults(func=main_args)


def main_args(args: argparse.Namespace) -> int:
    """Run `synthetic-scene` from parsed arguments."""
    config = SceneConfig(width=args.width, height=args.height, frames=args.frames)
    gt = args.ground_truth or args.output.with_name(args.output.name + ".gt.tum")
    scene = write_scene_bag(config, args.output, gt, args.storage, args.rate)
    print(
        f"wrote {scene.bag.frames} frames {config.width}x{config.height} to {scene.bag.path}, "
        f"ground truth {gt}",
        file=sys.stdout,
    )
    return 0
