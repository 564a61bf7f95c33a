"""The shared outputs of a node with several named cameras: `~/map_cloud`, `~/grid` and `~/save_map`.

Every camera publishes its own map under `~/<name>/` (in its map frame). The node-level `~/map_cloud` and
`~/grid` fuse the cameras whose stream is mapped in the robot's `map_frame` (robot TF modes,
engine/mapping/fusion.py); a camera mapped without the robot (map_to_camera, frame `map_<name>`) is not in
them.
`~/save_map` writes each camera's map, trajectory and grid (`map_<tag>_<name>.ply`, ...) and the fused map
and grid (`map_<tag>.ply`, `map_<tag>.pgm/.yaml`). The node's map and grid timers publish it beside each
camera's map (a `timers.MapOutput`); `map -> odom` and `~/path` stay each camera's.
"""

from __future__ import annotations

import pathlib
from collections.abc import Callable, Sequence

from builtin_interfaces.msg import Time
from nav_msgs.msg import OccupancyGrid
from rclpy.node import Node
from sensor_msgs.msg import PointCloud2
from std_msgs.msg import Header

from ...engine.face import Grid, fuse_grids, fuse_points, write_nav2_map, write_ply
from ..messages.conversions import points_to_cloud
from ..messages.poses import grid_msg
from .config import MAP_QOS
from .mapping import MappingOutputs


class FusedMap:
    """`~/map_cloud` and `~/grid` of the cameras in the robot's map frame, and `~/save_map` of all cameras.

    Args:
        node: the node (or its `NodeFacade`: kept publishers).
        outputs: returns every camera's `MappingOutputs` (those not active are left out).
        map_frame: the robot's map frame.
    """

    def __init__(
        self,
        node: Node,
        outputs: Callable[[], Sequence[tuple[str, MappingOutputs]]],
        map_frame: Callable[[], str],
    ) -> None:
        self._node = node
        self._outputs = outputs
        self._map_frame = map_frame
        self._map_pub = node.create_publisher(PointCloud2, "~/map_cloud", MAP_QOS)
        self._grid_pub = node.create_publisher(OccupancyGrid, "~/grid", MAP_QOS)
        self._published: dict[str, tuple] = {}  # output -> the cameras' map sizes when it was last published

    @property
    def last_stamp(self) -> Time | None:
        """The newest stamp published by any camera (the stamp of the fused map and grid)."""
        stamps = [o.last_stamp for _, o in self._outputs() if o.last_stamp is not None]
        return max(stamps, key=lambda t: (t.sec, t.nanosec)) if stamps else None

    def _robot_parts(self) -> tuple[list, list] | None:
        """Copies of the point sets and the grid counts of the cameras in the robot's map frame (None
        while no camera is active)."""
        cameras = self._outputs()
        if not cameras:
            return None
        parts = [p for _, outputs in cameras if (p := outputs.map_side.robot_parts()) is not None]
        return [cloud for cloud, _ in parts], [counts for _, counts in parts]

    def _points(self) -> tuple:
        parts = self._robot_parts()
        if parts is None:
            return None, None
        return fuse_points(parts[0], self._outputs()[0][1].config.voxel_map_config())

    def _grid(self) -> Grid | None:
        parts = self._robot_parts()
        if parts is None:
            return None
        return fuse_grids(parts[1], self._outputs()[0][1].mapper.config.grid)

    def publish_map(self, stamp: Time, force: bool = False) -> int:
        """Publish the fused ~/map_cloud when a camera's map changed (or `force`); returns its size."""
        if not (self._changed("map") or force):
            return -1
        xyz, rgb = self._points()
        if xyz is None:
            return -1
        self._map_pub.publish(points_to_cloud(xyz, rgb, Header(stamp=stamp, frame_id=self._map_frame())))
        return len(xyz)

    def publish_grid(self, force: bool = False) -> bool:
        """Publish the fused ~/grid when a camera's map changed (or `force`)."""
        if not (self._changed("grid") or force):
            return False
        grid = self._grid()
        if grid is None:
            return False
        stamp = self.last_stamp or self._node.get_clock().now().to_msg()
        self._grid_pub.publish(grid_msg(grid, Header(stamp=stamp, frame_id=self._map_frame())))
        return True

    def _changed(self, output: str) -> bool:
        """True when a camera's map (size, TF mode or stamp) changed since `output` was last published."""
        state = tuple((o.map_size(), o.mapper.mode, o.last_stamp is None) for _, o in self._outputs())
        changed = self._published.get(output) != state
        self._published[output] = state
        return changed

    def save(self, out_dir: pathlib.Path, tag: str) -> str:
        """Each camera's `save` with `<tag>_<name>`, then the fused `map_<tag>.ply` and Nav2 map; the report.

        Raises:
            OSError: the directory cannot be created or written.
        """
        reports = [f"{name}: {outputs.save(out_dir, f'{tag}_{name}')}" for name, outputs in self._outputs()]
        xyz, rgb = self._points()
        grid = self._grid()
        if xyz is not None and grid is not None:
            ply = write_ply(out_dir / f"map_{tag}.ply", xyz, rgb)
            _, yaml = write_nav2_map(out_dir, f"map_{tag}", grid)
            reports.append(f"fused ({self._map_frame()}): {ply} ({len(xyz)} points), grid {yaml}")
        return "; ".join(reports)
