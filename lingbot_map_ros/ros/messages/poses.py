"""ROS messages of the mapper's poses: Pose, TransformStamped, PoseStamped, Odometry (with covariance),
CameraInfo. Conversion only: the frames, the scale and the twist come from engine/mapping/mapper.py,
rotations and
quaternions from engine/geometry.py (the package's one implementation).
"""

from __future__ import annotations

import numpy as np
from builtin_interfaces.msg import Time
from geometry_msgs.msg import Pose, PoseStamped, Quaternion, Transform, TransformStamped, Twist, Vector3
from nav_msgs.msg import OccupancyGrid, Odometry
from sensor_msgs.msg import CameraInfo
from std_msgs.msg import Header

from ...engine.face import Grid, matrix_to_quat_xyzw


def stamp_seconds(stamp: Time) -> float:
    """builtin_interfaces/Time -> float seconds."""
    return stamp.sec + 1e-9 * stamp.nanosec


def seconds_stamp(seconds: float) -> Time:
    """float seconds -> builtin_interfaces/Time (nanosecond rounding)."""
    ns = round(seconds * 1e9)
    return Time(sec=ns // 1_000_000_000, nanosec=ns % 1_000_000_000)


def pose_msg(pose: np.ndarray) -> Pose:
    """`[4, 4]` transform to `geometry_msgs/Pose`."""
    pose = _check_pose(pose)
    x, y, z, w = matrix_to_quat_xyzw(pose[:3, :3])
    t = pose[:3, 3]
    out = Pose()
    out.position.x, out.position.y, out.position.z = float(t[0]), float(t[1]), float(t[2])
    out.orientation = Quaternion(x=float(x), y=float(y), z=float(z), w=float(w))
    return out


def transform_msg(pose: np.ndarray | Pose, stamp: object, parent: str, child: str) -> TransformStamped:
    """`TransformStamped` parent -> child from the child's pose in the parent frame (`[4, 4]`, or its `Pose`
    message when one was already made: one quaternion per pose and frame)."""
    p = _as_pose(pose)
    tf = Transform(
        translation=Vector3(x=p.position.x, y=p.position.y, z=p.position.z), rotation=p.orientation
    )
    return TransformStamped(header=Header(stamp=stamp, frame_id=parent), child_frame_id=child, transform=tf)


def pose_stamped_msg(pose: np.ndarray | Pose, header: Header) -> PoseStamped:
    """`PoseStamped` of a `[4, 4]` pose (or its `Pose`) in `header.frame_id`."""
    return PoseStamped(header=header, pose=_as_pose(pose))


def twist_msg(twist: np.ndarray) -> Twist:
    """`[6]` (vx, vy, vz, wx, wy, wz) to `geometry_msgs/Twist`."""
    v = [float(x) for x in np.asarray(twist, np.float64)]
    return Twist(linear=Vector3(x=v[0], y=v[1], z=v[2]), angular=Vector3(x=v[3], y=v[4], z=v[5]))


def odometry_msg(
    pose: np.ndarray | Pose,
    twist: np.ndarray,
    header: Header,
    child_frame: str,
    pose_covariance: np.ndarray,
    twist_covariance: np.ndarray,
) -> Odometry:
    """`nav_msgs/Odometry`: pose `[4, 4]` (or its `Pose`) in `header.frame_id` (map), twist `[6]` in
    `child_frame`, both covariances `[6, 6]` (x, y, z, rotation about x, y, z), row-major."""
    out = Odometry(header=header, child_frame_id=child_frame)
    out.pose.pose = _as_pose(pose)
    out.pose.covariance = np.asarray(pose_covariance, np.float64).reshape(36).tolist()
    out.twist.twist = twist_msg(twist)
    out.twist.covariance = np.asarray(twist_covariance, np.float64).reshape(36).tolist()
    return out


def camera_info_msg(intrinsics: np.ndarray, width: int, height: int, header: Header) -> CameraInfo:
    """`CameraInfo` (plumb_bob, zero distortion) from predicted `[3, 3]` intrinsics in input-image pixels."""
    k = np.asarray(intrinsics, np.float64)
    if k.shape != (3, 3):
        raise ValueError(f"intrinsics must be [3, 3], got {k.shape}")
    proj = np.zeros((3, 4))
    proj[:, :3] = k
    return CameraInfo(
        header=header,
        width=int(width),
        height=int(height),
        distortion_model="plumb_bob",
        d=[0.0] * 5,
        k=k.reshape(-1).tolist(),
        r=np.eye(3).reshape(-1).tolist(),
        p=proj.reshape(-1).tolist(),
    )


def _as_pose(pose: np.ndarray | Pose) -> Pose:
    return pose if isinstance(pose, Pose) else pose_msg(pose)


def pose_msgs(poses: np.ndarray) -> list[Pose]:
    """`[N, 4, 4]` transforms to `geometry_msgs/Pose`s, the quaternions in one vectorised call (each message
    equal to `pose_msg` of its pose; ~/path builds up to `path.max_length` of them per send)."""
    poses = np.asarray(poses, np.float64)
    if poses.ndim != 3 or poses.shape[1:] != (4, 4) or not np.all(np.isfinite(poses)):
        raise ValueError(f"expected finite [N, 4, 4] poses, got shape {poses.shape}")
    if not len(poses):
        return []
    rows = np.concatenate([poses[:, :3, 3], matrix_to_quat_xyzw(poses[:, :3, :3])], axis=1).tolist()
    out = []
    for x, y, z, qx, qy, qz, qw in rows:
        pose = Pose()
        pose.position.x, pose.position.y, pose.position.z = x, y, z
        pose.orientation = Quaternion(x=qx, y=qy, z=qz, w=qw)
        out.append(pose)
    return out


def _check_pose(pose: np.ndarray) -> np.ndarray:
    pose = np.asarray(pose, np.float64)
    if pose.shape != (4, 4) or not np.all(np.isfinite(pose)):
        raise ValueError(f"expected a finite [4, 4] pose, got shape {pose.shape}")
    return pose


def grid_msg(grid: Grid, header: Header) -> OccupancyGrid:
    """`nav_msgs/OccupancyGrid` of an engine `Grid` (row-major from the lowest y, origin at z = 0)."""
    msg = OccupancyGrid(header=header)
    h, w = grid.data.shape
    msg.info.map_load_time = header.stamp
    msg.info.resolution = float(grid.resolution)
    msg.info.width, msg.info.height = int(w), int(h)
    msg.info.origin.position.x, msg.info.origin.position.y = grid.origin_xy
    msg.info.origin.orientation.w = 1.0
    msg.data = grid.data.astype(np.int8).reshape(-1).tolist()
    return msg
