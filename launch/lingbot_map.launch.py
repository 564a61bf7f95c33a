"""Launch the LingBot-Map node (and optionally RViz) with the standard ROS 2 launch API (Humble and later).

    ros2 launch lingbot_map_ros lingbot_map.launch.py image_topic:=/camera/color/image_raw \\
        checkpoint:=/data/lingbot-map.pt rviz:=true

Arguments: image_topic, camera_info_topic, checkpoint (empty: the params file's value, i.e. synthetic weights
unless set there), params_file (default: the package's config/lingbot_map.yaml), namespace, rviz,
big_shm_profile (load the shipped Fast DDS profile with a 16 MiB shared-memory segment, needed for camera
images above 512 KiB; see docs/node.md), log_level.
"""

from __future__ import annotations

from pathlib import Path

from ament_index_python.packages import get_package_share_directory
from launch.actions import DeclareLaunchArgument, OpaqueFunction, SetEnvironmentVariable
from launch.conditions import IfCondition
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node

from launch import LaunchContext, LaunchDescription

PACKAGE = "lingbot_map_ros"


def _node(context: LaunchContext) -> list[Node]:
    """The node, built once the arguments are known (an empty checkpoint must not override the file)."""

    def arg(name: str) -> str:
        return LaunchConfiguration(name).perform(context)

    overrides = {"model.checkpoint": arg("checkpoint")} if arg("checkpoint") else {}
    return [
        Node(
            package=PACKAGE,
            executable="lingbot_map_node",
            name="lingbot_map",
            namespace=arg("namespace"),
            parameters=[arg("params_file"), overrides],
            remappings=[
                ("image", arg("image_topic")),
                ("image/compressed", arg("image_topic") + "/compressed"),
                ("camera_info", arg("camera_info_topic")),
            ],
            arguments=["--ros-args", "--log-level", arg("log_level")],
            output="screen",
            emulate_tty=True,
        )
    ]


def generate_launch_description() -> LaunchDescription:
    share = Path(get_package_share_directory(PACKAGE))
    args = [
        DeclareLaunchArgument(
            "image_topic",
            default_value="/camera/image_raw",
            description="sensor_msgs/Image topic (its /compressed twin with image_transport)",
        ),
        DeclareLaunchArgument(
            "camera_info_topic",
            default_value="/camera/camera_info",
            description="optional CameraInfo, only compared with the predicted intrinsics",
        ),
        DeclareLaunchArgument(
            "checkpoint",
            default_value="",
            description="LingBot-Map checkpoint (.pt/.safetensors); empty: params file value",
        ),
        DeclareLaunchArgument(
            "params_file",
            default_value=str(share / "config" / "lingbot_map.yaml"),
            description="ROS parameters file of the node",
        ),
        DeclareLaunchArgument("namespace", default_value="", description="namespace of the node"),
        DeclareLaunchArgument(
            "rviz", default_value="false", description="start RViz with the shipped config"
        ),
        DeclareLaunchArgument(
            "big_shm_profile",
            default_value="true",
            description="use the shipped Fast DDS profile (16 MiB SHM segment)",
        ),
        DeclareLaunchArgument("log_level", default_value="info", description="node log level"),
    ]
    profile = SetEnvironmentVariable(
        "FASTDDS_DEFAULT_PROFILES_FILE",
        str(share / "config" / "fastdds_localhost_big_shm.xml"),
        condition=IfCondition(LaunchConfiguration("big_shm_profile")),
    )
    rviz = Node(
        package="rviz2",
        executable="rviz2",
        name="lingbot_map_rviz",
        arguments=["-d", str(share / "config" / "lingbot_map.rviz")],
        condition=IfCondition(LaunchConfiguration("rviz")),
    )
    return LaunchDescription([*args, profile, OpaqueFunction(function=_node), rviz])
