"""`Mapper`: the one home of the results path (no ROS imports). The node and `lingbot-map-ros run` both feed
it `FrameResult`s and publish or write what it returns.

Per frame it applies the frame chain (engine/mapping/frames.py: model world -> metric scale -> map -> robot
frames), updates the scale estimate (engine/mapping/scale.py), and on keyframes the voxel map, the occupancy
grid (engine/mapping/grid.py) and the trajectory; it computes the twist and the covariances and follows epochs
(a new epoch = a new map frame: everything is cleared). Its inputs and outputs:
engine/mapping/frame_records.py.

Outputs are held or marked until the scale has converged (`scale.min_samples`): poses (TF, odometry, path)
are published at once with the provisional scale and a pose covariance grown by `unscaled_factor`; keyframe
points are held (at most `MAX_HELD_KEYFRAMES`, in model units) and enter the voxel map and the grid with the
converged scale, so the map never mixes two scales of the start-up.

A frame is `locate` (pose side: chain, scale, poses, twist, trajectory -> `PosedFrame`) then `integrate` (map
side: the frame's points, voxel map, grid, held keyframes -> `FrameCloud`) of the `MapWork` that `locate`
captured. The node runs them on two threads (pose outputs never wait for map work: ros/outputs/map_worker.py);
`run` calls one after the other. The sides share no state: a work carries its epoch and `integrate` clears the
map when it differs from the map's, so a dropped work never leaves an old epoch's map behind (a work of a
camera stream left since, `MapWork.stream`, never gets here: `MapSide.integrate` drops it).
"""

from __future__ import annotations

import copy
from collections import deque
from collections.abc import Callable

import numpy as np

from ..geometry import Sim3, invert_rigid, rotation_vector
from ..result import FrameResult
from .frame_records import FrameCloud, MapWork, PosedFrame, RobotSample
from .frames import (
    RESOLVED_TF_MODES,
    ROBOT_TF_MODES,
    FrameChain,
    TfMode,
    camera_points,
    camera_rest_pose,
    saved_rigid,
    transform_points,
)
from .grid import OccupancyGridBuilder
from .mapper_config import MapperConfig
from .scale import ScaleEstimator
from .voxel_map import Trajectory, VoxelMap

#: Keyframes whose points wait for the scale to converge (beyond: the oldest are dropped, counted).
MAX_HELD_KEYFRAMES = 64
#: Twist covariance diagonal when no velocity can be computed (first frame, dt < min_dt): "unknown".
UNKNOWN_VARIANCE = 1e6


def body_twist(prev_pose: np.ndarray, pose: np.ndarray, dt: float) -> np.ndarray:
    """[6] twist (vx, vy, vz, wx, wy, wz) of a body between two [4, 4] poses `dt` > 0 apart, in the body
    frame (nav_msgs/Odometry: twist in child_frame_id): `Rᵀ(t − t_prev)/dt`, rotation vector of
    `R_prevᵀR`/dt."""
    linear = pose[:3, :3].T @ (pose[:3, 3] - prev_pose[:3, 3]) / dt
    angular = rotation_vector(prev_pose[:3, :3].T @ pose[:3, :3]) / dt
    return np.concatenate([linear, angular])


class Mapper:
    """Frame chain, scale, voxel map, grid, trajectory, twist and epochs of one stream (module doc).

    Not thread-safe: callers serialise `locate` with readers of the pose side (chain, scale, trajectory) and
    `integrate` with readers of the map side (voxels, grid, held keyframes); the two may run at once."""

    def __init__(self, config: MapperConfig) -> None:
        self.config = config
        self.voxels = VoxelMap(config.voxel)
        self.grid = OccupancyGridBuilder(config.grid)
        self.scale = ScaleEstimator(config.scale)
        self.trajectory = Trajectory(
            config.path_max_length, keep_full_history=True, max_history=config.trajectory_max_poses
        )
        self.stamps_backwards = self.stamps_duplicate = self.held_dropped = 0
        self._map_epoch: int | None = None  # the epoch of the map's contents (None: cleared since)
        #: False = localisation mode (`mapping.enabled`): poses go on, the voxel map and the grid stay as
        #: they are (keyframes are neither integrated nor held).
        self.mapping_enabled = True
        self.clear()

    # ------------------------------------------------------------------------------------------------
    def clear(self) -> None:
        """Forget the stream (reset): map, grid, trajectory, scale, chain; the next frame starts an epoch.
        Both sides: no `integrate` may run meanwhile."""
        self._clear_stream()
        self._clear_map()
        self._map_epoch = None

    def _clear_stream(self) -> None:
        """The pose side of a new epoch (the map follows at the next `integrate`: another epoch)."""
        self.trajectory.clear()
        self.scale.reset()
        self.chain: FrameChain | None = None
        #: Loop closure's T_map_stream (Sim(3), model units; None: identity): applied to every stream pose
        #: before the chain, its scale to the depth (`correct` sets it, under the pose side's lock).
        self.correction: Sim3 | None = None
        self.mode: TfMode | None = None
        self._epoch: int | None = None
        self._segment = 0
        self._prev: tuple[float, np.ndarray] | None = None
        self._last: tuple[np.ndarray, np.ndarray] | None = None  # the last frame's body, camera poses

    def _clear_map(self) -> None:
        self.voxels.clear()
        self.grid.clear()
        self._held: deque[tuple[np.ndarray, np.ndarray, np.ndarray]] = deque()

    @property
    def epoch(self) -> int | None:
        return self._epoch

    def needs_new_epoch(self, result: FrameResult) -> bool:
        """True when `result` starts a new map frame (first frame, or the session's epoch changed): the
        caller then chooses the TF mode for it."""
        return self._epoch is None or result.epoch != self._epoch

    def switch_mode(self, mode: TfMode) -> None:
        """The robot came up while the epoch runs (`tf.mode: auto`): the extrinsics appeared in
        `map_to_camera` (-> `map_to_base`, or `map_to_odom` with odometry too), or odometry in `map_to_base`
        (-> `map_to_odom`). The map frame and the chain stay, so `map` does not jump; from the next `locate`
        on (whose `robot.base_cam`, and for `map_to_odom` `robot.odom_base`, must be set)
        `T_map_base = T_map_cam(t) · T_base_cam⁻¹` and `T_map_odom = T_map_base(t) · T_odom_base(t)⁻¹`.

        Raises:
            ValueError: any other change (a new mode needs a new epoch: another map frame).
        """
        allowed = {
            (TfMode.MAP_TO_CAMERA, TfMode.MAP_TO_BASE),
            (TfMode.MAP_TO_CAMERA, TfMode.MAP_TO_ODOM),
            (TfMode.MAP_TO_BASE, TfMode.MAP_TO_ODOM),
        }
        if (self.mode, mode) not in allowed:
            raise ValueError(f"TF mode {self.mode} cannot become {mode} within an epoch")
        self.mode = TfMode(mode)

    def locate(
        self,
        result: FrameResult,
        stamp_s: float,
        robot: RobotSample | None = None,
        sensor_depth: np.ndarray | None = None,
        stream: int = 0,
    ) -> tuple[PosedFrame, MapWork]:
        """The pose side of a frame: poses, twist, metric depth (the trajectory appended) and the frame's
        `MapWork` (in camera stream `stream`, `CameraState.stream`). Touches no map state."""
        robot = robot or RobotSample()
        new_epoch = self.needs_new_epoch(result)
        if new_epoch:
            self._clear_stream()
            self._start_epoch(result, robot)
        elif result.segment != self._segment:  # re-anchor: same map frame, re-estimate the scale
            self._segment = result.segment
            self.scale.restart()
        base_cam = robot.base_cam if self.mode != TfMode.MAP_TO_CAMERA else None
        if result.is_keyframe:
            self._sample_scale(result, stamp_s, robot, sensor_depth)
        self.chain.scale = self.scale.value
        pose_c2w, unit = np.asarray(result.pose_c2w, np.float64), self.scale.value
        if self.correction is not None:
            pose_c2w, unit = self.correction.apply_pose(pose_c2w), unit * self.correction.scale
        camera_pose = self.chain.camera_pose(pose_c2w)
        body_pose = camera_pose @ invert_rigid(base_cam) if base_cam is not None else camera_pose
        map_odom = None
        if self.mode == TfMode.MAP_TO_ODOM:
            map_odom = body_pose @ invert_rigid(robot.odom_base)
        depth = None if result.depth is None else (result.depth * np.float32(unit)).astype(np.float32)
        twist, twist_cov = self._twist(stamp_s, body_pose)
        self.trajectory.append(stamp_s, body_pose)
        self._last = (body_pose, camera_pose)  # T_body_cam for `correct`
        frame = PosedFrame(
            stamp_s=stamp_s,
            index=result.index,
            epoch=result.epoch,
            is_keyframe=result.is_keyframe,
            new_epoch=new_epoch,
            mode=self.mode,
            camera_pose=camera_pose,
            body_pose=body_pose,
            map_odom=map_odom,
            twist=twist,
            pose_covariance=self._pose_covariance(),
            twist_covariance=twist_cov,
            depth=depth,
            intrinsics=result.intrinsics,
            scale=self.scale.state(),
            image_hw=result.image_hw,
        )
        work = MapWork(
            stream=stream,
            epoch=result.epoch,
            is_keyframe=result.is_keyframe,
            pose_c2w=pose_c2w,
            camera_pose=camera_pose,
            depth=depth,
            depth_conf=result.depth_conf,
            intrinsics=result.intrinsics,
            rgb=result.rgb,
            voxel=self.config.voxel,
            chain=copy.copy(self.chain),
            scale_converged=self.scale.converged,
            mapping_enabled=self.mapping_enabled,
        )
        return frame, work

    def integrate(self, work: MapWork) -> FrameCloud:
        """The map side of a frame (`locate`'s work): the frame's points in the map frame; a keyframe enters
        the voxel map and the grid (or is held until the scale converged). A work of another epoch clears the
        map first (`map_cleared`)."""
        cleared = work.epoch != self._map_epoch
        if cleared:
            self._clear_map()
            self._map_epoch = work.epoch
        if work.depth is None:  # the step skipped the depth head (SessionConfig.depth_every_n): no points
            empty = np.zeros((0, 3), np.float32), np.zeros((0, 3), np.uint8)
            return FrameCloud(*empty, map_changed=False, map_cleared=cleared)
        mask = work.depth_conf > work.voxel.conf_threshold
        cam_xyz, flat = camera_points(work.depth, work.intrinsics, mask, work.voxel.pixel_stride)
        points = transform_points(work.camera_pose, cam_xyz)
        colors = work.rgb.reshape(-1, 3).take(flat, axis=0)
        map_changed = work.is_keyframe and self._integrate(work, points, colors, cam_xyz)
        return FrameCloud(points=points, colors=colors, map_changed=map_changed, map_cleared=cleared)

    @property
    def last_poses(self) -> tuple[np.ndarray, np.ndarray] | None:
        """The last frame's (body, camera) poses [4, 4] in the map (None before a frame of this stream)."""
        return self._last

    def correct(
        self, correction: Sim3, move: Callable[[np.ndarray, np.ndarray], np.ndarray]
    ) -> np.ndarray | None:
        """Loop closure (pose side): `correction` (T_map_stream) applies to every following stream pose, and
        the camera poses [N, 4, 4] of the trajectory's poses at stamps [N] s become `move(stamps, cameras)`,
        the bodies following rigidly (with the last frame's T_body_cam; `Trajectory.correct`). Returns the
        jump of the last body pose (T_new · T_old⁻¹ [4, 4], for the `map -> odom` estimate), None before a
        frame of this stream."""
        self.correction = correction
        if self._last is None:
            return None
        body, camera = self._last
        body_cam = invert_rigid(body) @ camera
        cam_body = invert_rigid(body_cam)
        return self.trajectory.correct(lambda stamps, bodies: move(stamps, bodies @ body_cam) @ cam_body)

    def state(self) -> dict[str, object]:
        """JSON-able state of the epoch for a saved session (docs/session.md): TF mode, frame chain, scale.

        Raises ValueError before the first frame (nothing mapped yet)."""
        if self.chain is None:
            raise ValueError("nothing is mapped yet: no frame chain")
        return {
            "tf_mode": self.mode,
            "chain": {
                "world_cam0": self.chain.world_cam0.tolist(),
                "map_cam0": self.chain.map_cam0.tolist(),
                "scale": float(self.chain.scale),
            },
            "scale": self.scale.export(),
            "grid_resolution": self.config.grid.resolution,
        }

    def restore(self, state: dict[str, object], epoch: int, segment: int) -> None:
        """Continue a saved session's epoch: TF mode, chain and scale from `state()` (the caller restores
        `voxels`, `grid` and `trajectory` from the saved arrays); the session's frames of `epoch` follow.

        Raises ValueError (KeyError/TypeError included) for malformed state; the mapper is then cleared."""
        self.clear()
        try:
            mode = state["tf_mode"]
            if mode not in RESOLVED_TF_MODES:
                raise ValueError(f"saved TF mode must be a concrete mode, got {mode!r}")
            chain = state["chain"]
            world_cam0 = saved_rigid(chain["world_cam0"], "world_cam0")  # type: ignore[index]
            map_cam0 = saved_rigid(chain["map_cam0"], "map_cam0")  # type: ignore[index]
            self.scale.restore(state["scale"])  # type: ignore[arg-type]
        except (KeyError, TypeError) as exc:
            self.clear()
            raise ValueError(f"saved mapper state is malformed ({type(exc).__name__}: {exc})") from None
        except ValueError:
            self.clear()
            raise
        self.mode = TfMode(mode)
        self.chain = FrameChain(world_cam0, map_cam0, self.scale.value)
        self._epoch, self._segment = epoch, segment
        self._map_epoch = epoch  # the caller restores the map of this epoch

    def stats(self) -> dict[str, object]:
        """For /diagnostics and run's summary."""
        s = self.scale.state()
        return {
            "tf_mode": self.mode or "none",
            "scale": s.value,
            "scale_spread": s.spread,
            "scale_source": s.source,
            "scale_samples": s.samples,
            "scale_converged": s.converged,
            "scale_updated_stamp": s.updated_s if s.updated_s is not None else -1.0,
            "held_keyframes": len(self._held),
            "held_dropped": self.held_dropped,
            "stamps_backwards": self.stamps_backwards,
            "stamps_duplicate": self.stamps_duplicate,
            "grid_rays": self.grid.rays_total,
            "map.points_out_of_range": self.voxels.dropped_out_of_range,
            "scale_rejected": self.scale.rejected,
        }

    # ------------------------------------------------------------------------------------------------
    def _start_epoch(self, result: FrameResult, robot: RobotSample) -> None:
        self.mode = TfMode(robot.mode)
        if robot.mode in ROBOT_TF_MODES:
            if robot.base_cam is None or (robot.mode == TfMode.MAP_TO_ODOM and robot.odom_base is None):
                raise ValueError(f"TF mode {robot.mode} needs the robot transforms of the first frame")
            map_cam0 = np.asarray(robot.base_cam, np.float64)
            if robot.map_base is not None:
                map_cam0 = np.asarray(robot.map_base, np.float64) @ map_cam0
        else:
            map_cam0 = camera_rest_pose()
        self.chain = FrameChain(np.asarray(result.pose_c2w, np.float64), map_cam0, self.scale.value)
        self._epoch = result.epoch
        self._segment = result.segment

    def _sample_scale(
        self, result: FrameResult, stamp_s: float, robot: RobotSample, sensor_depth: np.ndarray | None
    ) -> None:
        source = self.config.scale.source
        if source == "odometry" and robot.odom_base is not None and robot.base_cam is not None:
            odom_cam = robot.odom_base @ robot.base_cam
            self.scale.add_odometry(result.pose_c2w[:3, 3], odom_cam[:3, 3], stamp_s)
        elif source == "depth" and sensor_depth is not None and result.depth is not None:
            self.scale.add_depth(result.depth, result.depth_conf, sensor_depth, stamp_s)

    def _integrate(self, work: MapWork, points: np.ndarray, colors: np.ndarray, cam_xyz: np.ndarray) -> bool:
        """Add a keyframe to the voxel map and the grid, or hold it until the scale converged."""
        if not work.mapping_enabled:
            return False
        scale = work.chain.scale
        if not work.scale_converged:
            self._held.append((work.pose_c2w, (cam_xyz / max(scale, 1e-12)).astype(np.float32), colors))
            if len(self._held) > MAX_HELD_KEYFRAMES:
                self._held.popleft()
                self.held_dropped += 1
            return False
        while self._held:  # the scale just converged: the held keyframes first, at the converged scale
            pose_c2w, unscaled, held_colors = self._held.popleft()
            pose = work.chain.camera_pose(pose_c2w)
            self._add_points(transform_points(pose, unscaled * scale), held_colors, pose)
        self._add_points(points, colors, work.camera_pose)
        return True

    def _add_points(self, points: np.ndarray, colors: np.ndarray, camera_pose: np.ndarray) -> None:
        if len(points):
            self.voxels.insert(points, colors)
            self.grid.integrate(points, camera_pose[:3, 3])

    def _twist(self, stamp_s: float, pose: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Body twist from the previous frame; zero with an 'unknown' covariance when dt < twist_min_dt."""
        cov = self.config.covariance
        prev, self._prev = self._prev, (stamp_s, pose)
        unknown = (np.zeros(6), np.eye(6) * UNKNOWN_VARIANCE)
        if prev is None:
            return unknown
        dt = stamp_s - prev[0]
        if dt < 0:
            self.stamps_backwards += 1
        elif dt == 0:
            self.stamps_duplicate += 1
        if dt < cov.twist_min_dt:
            return unknown
        factor = 1.0 if self.scale.converged else cov.unscaled_factor
        var = factor * 2.0 / dt**2 * np.array([cov.position_std**2] * 3 + [cov.orientation_std**2] * 3)
        return body_twist(prev[1], pose, dt), np.diag(var)

    def _pose_covariance(self) -> np.ndarray:
        cov = self.config.covariance
        factor = 1.0 if self.scale.converged else cov.unscaled_factor
        return np.diag(factor * np.array([cov.position_std**2] * 3 + [cov.orientation_std**2] * 3))
