"""`~/path` of one camera: the stream's recent body poses as `PoseStamped` messages (at most
`path.max_length`), sent by the node's path timer (`path.publish_rate`) when a frame came since the last send.

The pose side (`MappingOutputs.lock`, the tracker's) guards `poses` and the pending header; `send_lock` is
held while the message is sent, so a reset or a loop-closure correction waits for a send in progress and
nothing of the old stream follows it, while the publish thread never waits for a send.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

import numpy as np
from geometry_msgs.msg import Pose, PoseStamped
from nav_msgs.msg import Path
from rclpy.publisher import Publisher
from std_msgs.msg import Header

from ..engine.geometry import invert_rigid
from ..engine.lock_order import OrderedLock
from .pose_messages import pose_matrix, pose_msg, pose_stamped_msg, seconds_stamp, stamp_seconds


class PathOutput:
    """`~/path` (module doc). `publisher`: its publisher; `max_length`: `path.max_length`."""

    def __init__(self, publisher: Publisher, max_length: int) -> None:
        self._pub = publisher
        self.poses: deque[PoseStamped] = deque(maxlen=max_length)
        self._header: Header | None = None  # the last frame's map header: ~/path to send (None: sent)
        self._last: tuple[np.ndarray, np.ndarray] | None = None  # the last frame's body, camera poses
        self.send_lock = OrderedLock("path.send_lock")

    def resize(self, max_length: int) -> None:
        """A live `path.max_length` (pose side held)."""
        if max_length != self.poses.maxlen:
            self.poses = deque(self.poses, maxlen=max_length)

    def append(self, body: Pose, header: Header, body_pose: np.ndarray, camera_pose: np.ndarray) -> None:
        """A posed frame (pose side held): `body` is the message of `body_pose` [4, 4] in `header`'s map."""
        self.poses.append(pose_stamped_msg(body, header))
        self._header = header
        self._last = (body_pose, camera_pose)  # T_body_cam for `correct`

    def clear(self) -> None:
        """A new stream (pose side held): nothing to send until its first frame."""
        self.poses.clear()
        self._header = None
        self._last = None

    def restore(self, stamps: np.ndarray, poses: np.ndarray, header: Header) -> None:
        """A loaded session's trajectory (stamps [N] s, body poses [N, 4, 4] in `header`'s map; pose side
        held), sent next with `header`."""
        self.clear()
        for stamp, pose in zip(stamps, poses, strict=True):
            entry = Header(stamp=seconds_stamp(float(stamp)), frame_id=header.frame_id)
            self.poses.append(pose_stamped_msg(pose, entry))
        self._header = header

    def send(self, pose_lock: OrderedLock) -> bool:
        """Timer: send `~/path` if a frame came since the last send (taken under `pose_lock`); stamped with
        the last frame's stamp, as that frame's own message would have been."""
        with self.send_lock:
            with pose_lock:
                if self._header is None:
                    return False
                path = Path(header=self._header, poses=list(self.poses))
                self._header = None
            self._pub.publish(path)
        return True

    def send_cleared(self, header: Header) -> None:
        """An empty path (after a reset) so viewers drop the old one."""
        self._pub.publish(Path(header=header))

    def correct(self, move: Callable[[float, np.ndarray], np.ndarray], header: Header) -> np.ndarray | None:
        """Loop closure (`send_lock` and the pose side held): the camera pose [4, 4] of every pose at stamp s
        becomes `move(s, camera)`, the body following rigidly, sent next with `header`. Returns the jump of
        the last body pose (T_new · T_old⁻¹ [4, 4], for the `map -> odom` estimate), None without poses."""
        if self._last is None or not self.poses:
            return None
        body, camera = self._last
        body_cam = invert_rigid(body) @ camera
        cam_body = invert_rigid(body_cam)

        def move_body(stamp_s: float, pose: np.ndarray) -> np.ndarray:
            return move(stamp_s, pose @ body_cam) @ cam_body

        last = self.poses[-1]
        last_body = pose_matrix(last.pose)
        jump = move_body(stamp_seconds(last.header.stamp), last_body) @ invert_rigid(last_body)
        for entry in self.poses:
            entry.pose = pose_msg(move_body(stamp_seconds(entry.header.stamp), pose_matrix(entry.pose)))
        self._header = header
        return jump
