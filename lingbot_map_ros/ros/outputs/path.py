"""`~/path` of one camera, sent by the node's path timer (`path.publish_rate`) when a frame came since the
last send: the message of the recent window of the mapper's `Trajectory` (engine/mapping/trajectory.py, the
one store of the stream's poses, `path.max_length` of them; a loop closure corrects it there).

Beside it this keeps only what a message needs and the engine does not hold: the header of each pose of the
window (the image's exact stamp and the map frame then), so a pose's `PoseStamped` is what it was when the
frame was published; poses of a loaded session get their stamp from the trajectory's seconds.

The pose side (`MappingOutputs.lock`, the tracker's) guards the trajectory, the headers and the pending
header; `send_lock` is held while the message is sent, so a reset or a loop-closure correction waits for a
send in progress and nothing of the old stream follows it, while the publish thread never waits for a send
(the pose messages are built after the pose side is released).
"""

from __future__ import annotations

from collections import deque

from builtin_interfaces.msg import Time
from geometry_msgs.msg import PoseStamped
from nav_msgs.msg import Path
from rclpy.publisher import Publisher
from std_msgs.msg import Header

from ...engine.face import OrderedLock, Trajectory
from ..messages.poses import pose_msgs, seconds_stamp, stamp_seconds


class PathOutput:
    """`~/path` (module doc). `publisher`: its publisher; `trajectory`: the camera's mapper's trajectory (its
    recent window holds `path.max_length` poses)."""

    def __init__(self, publisher: Publisher, trajectory: Trajectory) -> None:
        self._pub = publisher
        self._trajectory = trajectory
        #: (stamp s as the trajectory holds it, the pose's header) of the window's poses, oldest first.
        self._headers: deque[tuple[float, Header]] = deque(maxlen=trajectory.max_length)
        self._header: Header | None = None  # the last frame's map header: ~/path to send (None: sent)
        self.send_lock = OrderedLock("path.send_lock")

    def resize(self, max_length: int) -> None:
        """A live `path.max_length` (pose side held): the trajectory's window and the headers."""
        if max_length != self._trajectory.max_length:
            self._trajectory.resize(max_length)
            self._headers = deque(self._headers, maxlen=max_length)

    def append(self, header: Header) -> None:
        """A posed frame whose body pose the trajectory just got (pose side held), in `header`'s map."""
        self._headers.append((stamp_seconds(header.stamp), header))
        self._header = header

    def clear(self) -> None:
        """A new stream (pose side held): nothing to send until its first frame."""
        self._headers.clear()
        self._header = None

    def restore(self, header: Header) -> None:
        """A loaded session's trajectory (pose side held), sent next with `header` (its frame for every
        pose)."""
        self.clear()
        self._header = header

    def corrected(self, header: Header) -> None:
        """Loop closure moved the trajectory (`send_lock` and the pose side held): sent next with `header`."""
        self._header = header

    def send(self, pose_lock: OrderedLock) -> bool:
        """Timer: send `~/path` if a frame came since the last send (taken under `pose_lock`); stamped with
        the last frame's stamp, as that frame's own message would have been."""
        with self.send_lock:
            with pose_lock:
                if self._header is None:
                    return False
                header, self._header = self._header, None
                stamps, poses = self._trajectory.stamps(), self._trajectory.poses()
                headers = dict(self._headers)
            entries = [
                PoseStamped(
                    header=headers[s] if s in headers else _saved_header(s, header.frame_id), pose=pose
                )
                for s, pose in zip(stamps.tolist(), pose_msgs(poses), strict=True)
            ]
            self._pub.publish(Path(header=header, poses=entries))
        return True

    def send_cleared(self, header: Header) -> None:
        """An empty path (after a reset) so viewers drop the old one."""
        self._pub.publish(Path(header=header))


def _saved_header(stamp_s: float, frame_id: str) -> Header:
    """The header of a pose that came from a saved session (its stamp: nanosecond rounding of seconds)."""
    stamp: Time = seconds_stamp(stamp_s)
    return Header(stamp=stamp, frame_id=frame_id)
