"""A loop closure correction in the robot mode (`map -> odom`), without DDS: the camera's engine
(`CameraState.move_trajectory`, engine/camera_state.py) moves the `map -> odom` estimate and the trajectory
(`~/path` and `~/save_map`'s TUM) exactly to where the mapper puts the same frames once the correction is in
(engine `Mapper.correct`, `FrameChain.sim3`); `odom -> base`
is the robot's and is not touched.
In-process node (not spinning), TF from a plain buffer."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
import rclpy
from ros_helpers import BufferLookup
from std_msgs.msg import Header

from lingbot_map_ros.engine.geometry import Sim3, rigid
from lingbot_map_ros.engine.result import PHASE_STREAMING, FrameResult
from lingbot_map_ros.ros.messages.poses import seconds_stamp
from lingbot_map_ros.ros.outputs.config import OutputConfig
from lingbot_map_ros.ros.outputs.mapping import MappingOutputs
from lingbot_map_ros.ros.params.declare import declare_parameters, read_parameters
from lingbot_map_ros.ros.tf.buffer import TfBuffer

HW = (24, 32)
BASE_CAM = rigid(np.array([[0.0, 0, 1], [-1, 0, 0], [0, -1, 0]]), [0.3, 0.0, 0.8])  # optical cam on a mast
STAMPS = 10.0 + 0.1 * np.arange(12)


def result(index: int) -> FrameResult:
    """A camera moving forward (optical z) and turning a little, model units."""
    angle = 0.05 * index
    c, s = np.cos(angle), np.sin(angle)
    pose = rigid(np.array([[c, 0, s], [0, 1, 0], [-s, 0, c]]), [0.02 * index, 0.0, 0.1 * index])
    intrinsics = np.array([[30.0, 0, HW[1] / 2], [0, 30.0, HW[0] / 2], [0, 0, 1]])
    return FrameResult(
        index=index, meta=None, is_keyframe=True, phase=PHASE_STREAMING, pose_c2w=pose, intrinsics=intrinsics,
        depth=np.full(HW, 2.0, np.float32), depth_conf=np.full(HW, 3.0, np.float32),
        rgb=np.zeros((*HW, 3), np.uint8), pose_enc=np.zeros(9, np.float32),
    )  # fmt: skip


@pytest.fixture
def robot_outputs() -> Iterator[list[MappingOutputs]]:
    """Two cameras' outputs in `map_to_odom` over the same TF (odometry that drifts from the model)."""
    context = rclpy.Context()
    rclpy.init(context=context)
    node = rclpy.create_node("loop_outputs_test", context=context)
    declare_parameters(node)
    config = OutputConfig.from_params(read_parameters(node)).with_params(tf_mode="map_to_odom")
    buffer = TfBuffer()
    buffer.set_transform("base_link", "cam", 0.0, BASE_CAM, static=True)
    for i, t in enumerate(STAMPS):
        buffer.set_transform(
            "odom", "base_link", t, rigid(np.eye(3), [0.11 * i, 0.01 * i, 0.0]), static=False
        )
    outs = [MappingOutputs(node, config, BufferLookup(buffer)) for _ in range(2)]  # type: ignore[arg-type]
    yield outs
    for out in outs:
        out.destroy()
    node.destroy_node()
    rclpy.shutdown(context=context)


def publish(out: MappingOutputs, i: int) -> None:
    """Frame `i` as the camera pipeline's pose stage delivers it: tracked (engine), then published."""
    header = Header(stamp=seconds_stamp(float(STAMPS[i])), frame_id="cam")
    frame = result(i)
    out.publish(frame, header, out.tracker.track(frame, "cam", float(STAMPS[i])))


def test_correction_jumps_map_to_odom_and_moves_the_path_like_the_mapper(
    robot_outputs: list[MappingOutputs],
) -> None:
    live, reference = robot_outputs
    yaw = np.array([[0.995, -0.0998, 0], [0.0998, 0.995, 0], [0, 0, 1]])
    correction = Sim3(np.linalg.svd(yaw)[0] @ np.linalg.svd(yaw)[2], np.array([0.2, -0.1, 0.05]), 1.05)
    for i in range(10):
        publish(live, i)
        if i == 9:  # the reference gets the correction from frame 9 on
            reference.mapper.correction = correction
        publish(reference, i)
    assert live.mapper.mode == "map_to_odom"
    chain = live.mapper.chain
    g = chain.sim3()
    np.testing.assert_allclose(
        g.apply_pose(result(5).pose_c2w), chain.camera_pose(result(5).pose_c2w), atol=1e-12
    )
    before = live.tracker.estimate().copy()
    tum_before = live.mapper.trajectory.full_history()[1].copy()
    fix = g @ correction @ g.inverse()

    live.state.move_trajectory(correction, lambda stamps, poses: fix.apply_pose(poses))

    after = live.tracker.estimate()
    assert np.linalg.norm(after[:3, 3] - before[:3, 3]) > 0.05  # the jump
    # where frame 9 lands corrected
    np.testing.assert_allclose(after, reference.tracker.estimate(), atol=1e-9)
    # the one trajectory (~/path's window and ~/save_map's TUM) likewise, at its last pose
    live_path, reference_path = (o.mapper.trajectory.poses()[-1] for o in (live, reference))
    np.testing.assert_allclose(live_path, reference_path, atol=1e-9)
    live_tum, reference_tum = (o.mapper.trajectory.full_history()[1][-1] for o in (live, reference))
    np.testing.assert_allclose(live_tum, reference_tum, atol=1e-9)
    moved = np.linalg.norm(live.mapper.trajectory.full_history()[1][:, :3] - tum_before[:, :3], axis=1)
    assert len(moved) == 10 and np.all(
        moved > 1e-3
    )  # every pose saved since the reset, not only the window's
    publish(live, 10), publish(reference, 10)  # later frames: the same edge from either
    np.testing.assert_allclose(live.tracker.estimate(), reference.tracker.estimate(), atol=1e-9)
