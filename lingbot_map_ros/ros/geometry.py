"""Poses and frames: REP-103 rotation optical -> map, quaternions, and the pose message builders.

Frames (docs/node.md): the model's world frame is the first anchor camera in OpenCV optical axes
(x right, y down, z forward). The node publishes it as `map` (REP-105) with REP-103 body axes
(x forward, y left, z up): `T_map_cam = OPTICAL_TO_MAP @ T_world_cam`. The child frame stays the camera's
optical frame, so depth and clouds in the camera frame need no rotation.
"""

from __future__ import annotations

import numpy as np
from geometry_msgs.msg import Pose, PoseStamped, Quaternion, Transform, TransformStamped, Twist, Vector3
from nav_msgs.msg import Odometry
from sensor_msgs.msg import CameraInfo
from std_msgs.msg import Header

#: Rotation taking optical-axes coordinates (x right, y down, z forward) to REP-103 body axes
#: (x forward, y left, z up): x_b = z_o, y_b = -x_o, z_b = -y_o.
OPTICAL_TO_MAP = np.array([[0.0, 0.0, 1.0], [-1.0, 0.0, 0.0], [0.0, -1.0, 0.0]])


def world_to_map_pose(pose_c2w: np.ndarray) -> np.ndarray:
    """Camera -> model-world `[4, 4]` pose to camera -> `map` `[4, 4]` float64 (camera keeps optical axes)."""
    pose = _check_pose(pose_c2w)
    out = pose.copy()
    out[:3, :] = OPTICAL_TO_MAP @ pose[:3, :]
    return out


def world_to_map_points(xyz: np.ndarray) -> np.ndarray:
    """Model-world points `[N, 3]` to `map` coordinates `[N, 3]` float32."""
    return (np.asarray(xyz, np.float64) @ OPTICAL_TO_MAP.T).astype(np.float32)


def rotation_to_quaternion(rot: np.ndarray) -> np.ndarray:
    """`[3, 3]` rotation matrix to a unit quaternion `[x, y, z, w]` (w >= 0), Shepperd's method."""
    m = np.asarray(rot, np.float64)
    trace = m[0, 0] + m[1, 1] + m[2, 2]
    if trace > 0.0:
        s = 2.0 * np.sqrt(trace + 1.0)
        q = [(m[2, 1] - m[1, 2]) / s, (m[0, 2] - m[2, 0]) / s, (m[1, 0] - m[0, 1]) / s, 0.25 * s]
    elif m[0, 0] > m[1, 1] and m[0, 0] > m[2, 2]:
        s = 2.0 * np.sqrt(1.0 + m[0, 0] - m[1, 1] - m[2, 2])
        q = [0.25 * s, (m[0, 1] + m[1, 0]) / s, (m[0, 2] + m[2, 0]) / s, (m[2, 1] - m[1, 2]) / s]
    elif m[1, 1] > m[2, 2]:
        s = 2.0 * np.sqrt(1.0 + m[1, 1] - m[0, 0] - m[2, 2])
        q = [(m[0, 1] + m[1, 0]) / s, 0.25 * s, (m[1, 2] + m[2, 1]) / s, (m[0, 2] - m[2, 0]) / s]
    else:
        s = 2.0 * np.sqrt(1.0 + m[2, 2] - m[0, 0] - m[1, 1])
        q = [(m[0, 2] + m[2, 0]) / s, (m[1, 2] + m[2, 1]) / s, 0.25 * s, (m[1, 0] - m[0, 1]) / s]
    quat = np.array(q) / np.linalg.norm(q)
    return -quat if quat[3] < 0 else quat


def quaternion_to_rotation(quat: np.ndarray) -> np.ndarray:
    """Quaternion `[x, y, z, w]` (any norm > 0) to a `[3, 3]` rotation matrix."""
    x, y, z, w = np.asarray(quat, np.float64) / np.linalg.norm(quat)
    return np.array(
        [
            [1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
            [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
            [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)],
        ]
    )


def pose_msg(pose: np.ndarray) -> Pose:
    """`[4, 4]` transform to `geometry_msgs/Pose`."""
    pose = _check_pose(pose)
    x, y, z, w = rotation_to_quaternion(pose[:3, :3])
    t = pose[:3, 3]
    out = Pose()
    out.position.x, out.position.y, out.position.z = float(t[0]), float(t[1]), float(t[2])
    out.orientation = Quaternion(x=float(x), y=float(y), z=float(z), w=float(w))
    return out


def transform_msg(pose: np.ndarray, stamp: object, parent: str, child: str) -> TransformStamped:
    """`TransformStamped` parent -> child from the child's pose in the parent frame `[4, 4]`."""
    p = pose_msg(pose)
    tf = Transform(
        translation=Vector3(x=p.position.x, y=p.position.y, z=p.position.z), rotation=p.orientation
    )
    return TransformStamped(header=Header(stamp=stamp, frame_id=parent), child_frame_id=child, transform=tf)


def pose_stamped_msg(pose: np.ndarray, header: Header) -> PoseStamped:
    """`PoseStamped` of a `[4, 4]` pose in `header.frame_id`."""
    return PoseStamped(header=header, pose=pose_msg(pose))


def body_twist(prev_pose: np.ndarray, pose: np.ndarray, dt: float) -> Twist:
    """Twist of the child frame, expressed in the child frame, from two successive `[4, 4]` poses.

    Linear velocity `R^T (t - t_prev) / dt`; angular velocity = rotation vector of `R_prev^T R` over `dt`
    (nav_msgs/Odometry convention: twist in `child_frame_id`). `dt <= 0` gives a zero twist.
    """
    twist = Twist()
    if dt <= 0.0:
        return twist
    prev_pose, pose = _check_pose(prev_pose), _check_pose(pose)
    linear = pose[:3, :3].T @ (pose[:3, 3] - prev_pose[:3, 3]) / dt
    delta = prev_pose[:3, :3].T @ pose[:3, :3]
    angle = float(np.arccos(np.clip((np.trace(delta) - 1.0) / 2.0, -1.0, 1.0)))
    axis = np.array([delta[2, 1] - delta[1, 2], delta[0, 2] - delta[2, 0], delta[1, 0] - delta[0, 1]])
    norm = np.linalg.norm(axis)
    angular = axis / norm * angle / dt if norm > 1e-12 else np.zeros(3)
    twist.linear = Vector3(x=float(linear[0]), y=float(linear[1]), z=float(linear[2]))
    twist.angular = Vector3(x=float(angular[0]), y=float(angular[1]), z=float(angular[2]))
    return twist


def odometry_msg(pose: np.ndarray, twist: Twist, header: Header, child_frame: str) -> Odometry:
    """`nav_msgs/Odometry`: pose in `header.frame_id` (map), twist in `child_frame` (camera).

    The model predicts no uncertainty, so both covariances are left all-zero (unknown).
    """
    out = Odometry(header=header, child_frame_id=child_frame)
    out.pose.pose = pose_msg(pose)
    out.twist.twist = twist
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


def _check_pose(pose: np.ndarray) -> np.ndarray:
    pose = np.asarray(pose, np.float64)
    if pose.shape != (4, 4) or not np.all(np.isfinite(pose)):
        raise ValueError(f"expected a finite [4, 4] pose, got shape {pose.shape}")
    return pose
