"""Launch the LingBot-Map node (and optionally RViz) with the standard ROS 2 launch API (Humble and later).

    ros2 launch lingbot_map_ros lingbot_map.launch.py camera:=/camera/color \\
        checkpoint:=/data/lingbot-map.pt model_preset:=lingbot-map device:=cuda rviz:=true

`ros2 launch lingbot_map_ros lingbot_map.launch.py --show-args` lists every argument. Topics follow the
image_transport convention: `camera:=<ns>` subscribes `<ns>/image_raw` and `<ns>/camera_info`;
`image_topic:=` overrides the image (its `camera_info` is then taken from the image topic's namespace unless
`camera_info_topic:=` is given). Knob arguments left empty keep the params file's value. A robot needs nothing
more: `tf_mode:=auto` picks `map -> odom` when TF has `odom -> base_link -> <camera frame>` (docs/robot.md).

The node gets the shipped Fast DDS profile (16 MiB shared memory, for camera images above 512 KiB) only when
`FASTDDS_DEFAULT_PROFILES_FILE` is not already set; either way the profile in use is logged. RViz is optional:
when rviz2 is not installed the launch warns and runs the node alone; an RViz that fails (non-zero exit) shuts
the whole launch down, and so does the node exiting, so nothing is left running orphaned.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from ament_index_python.packages import PackageNotFoundError, get_package_share_directory
from launch.actions import DeclareLaunchArgument, LogInfo, OpaqueFunction, RegisterEventHandler, Shutdown
from launch.event_handlers import OnProcessExit
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node

from launch import LaunchContext, LaunchDescription

PACKAGE = "lingbot_map_ros"
PROFILE_VARIABLE = "FASTDDS_DEFAULT_PROFILES_FILE"

#: launch argument -> node parameter; an empty argument keeps the params file's value.
KNOBS = {
    "checkpoint": "model.checkpoint",
    "model_preset": "model.preset",
    "device": "model.device",
    "image_width": "model.image_width",
    "tf_mode": "tf.mode",
    "map_frame": "map_frame",
    "odom_frame": "odom_frame",
    "base_frame": "base_frame",
    "scale_source": "scale.source",
    "scale_factor": "scale.factor",
    "session_dir": "session.dir",
    "session_load_path": "session.load_path",
    "mapping_enabled": "mapping.enabled",
}
KNOB_HELP = {
    "checkpoint": "LingBot-Map checkpoint (.pt/.safetensors); empty: params file value (synthetic weights)",
    "model_preset": "architecture preset: lingbot-map or tiny",
    "device": "torch device: auto, cpu, cuda, cuda:N",
    "image_width": "network input width in pixels (multiple of 14; 518 as released)",
    "tf_mode": "auto, map_to_odom, map_to_base or map_to_camera (docs/robot.md)",
    "map_frame": "fixed frame (REP-105), default map",
    "odom_frame": "odometry frame (REP-105), default odom",
    "base_frame": "robot body frame (REP-105), default base_link",
    "scale_source": "metric scale: none, fixed, odometry or depth",
    "scale_factor": "metres per model unit with scale_source fixed",
    "session_dir": "directory of saved sessions (docs/session.md)",
    "session_load_path": "saved session to continue (a folder below session_dir)",
    "mapping_enabled": "false: localisation mode (the map is not extended)",
}


def image_topic_for(camera: str, image_topic: str) -> str:
    """The image topic: `image_topic` when given, else `<camera>/image_raw` (image_transport convention)."""
    return image_topic or camera.rstrip("/") + "/image_raw"


def camera_info_for(image: str, camera_info_topic: str) -> str:
    """`camera_info_topic` when given, else `camera_info` beside the image topic (`<ns>/camera_info`)."""
    return camera_info_topic or image.rsplit("/", 1)[0] + "/camera_info"


def parameter_value(text: str) -> object:
    """A launch argument's text as the parameter's type (bool, int, float or string)."""
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


def _node(context: LaunchContext) -> list:
    """The node (and RViz), built once the arguments are known."""

    def arg(name: str) -> str:
        return LaunchConfiguration(name).perform(context)

    share = Path(get_package_share_directory(PACKAGE))
    overrides = {param: parameter_value(arg(name)) for name, param in KNOBS.items() if arg(name)}
    image = image_topic_for(arg("camera"), arg("image_topic"))
    remappings = [
        ("image", image),
        ("image/compressed", image + "/compressed"),
        ("camera_info", camera_info_for(image, arg("camera_info_topic"))),
    ]
    if arg("depth_topic"):
        remappings.append(("depth_image", arg("depth_topic")))
    env, actions = {}, []
    user_profile = os.environ.get(PROFILE_VARIABLE)
    if user_profile:
        actions.append(
            LogInfo(msg=f"[lingbot_map] Fast DDS profile: {user_profile} (yours, from {PROFILE_VARIABLE})")
        )
    elif arg("big_shm_profile").lower() in ("true", "1"):
        env[PROFILE_VARIABLE] = str(share / "config" / "fastdds_localhost_big_shm.xml")
        actions.append(
            LogInfo(
                msg=f"[lingbot_map] Fast DDS profile: {env[PROFILE_VARIABLE]} (shipped; "
                f"set {PROFILE_VARIABLE} to use your own)"
            )
        )
    else:
        actions.append(LogInfo(msg="[lingbot_map] Fast DDS profile: the middleware's default"))
    actions.append(
        LogInfo(msg=f"[lingbot_map] image {image}, camera_info {remappings[2][1]}, overrides {overrides}")
    )
    node = Node(
        package=PACKAGE,
        executable="lingbot_map_node",
        name="lingbot_map",
        namespace=arg("namespace"),
        parameters=[arg("params_file"), overrides],
        remappings=remappings,
        additional_env=env,
        arguments=["--ros-args", "--log-level", arg("log_level")],
        output="screen",
        emulate_tty=True,
        on_exit=Shutdown(reason="lingbot_map exited"),
    )
    actions.append(node)
    if arg("rviz").lower() in ("true", "1"):
        actions += _rviz(share)
    return actions


def _rviz(share: Path) -> list:
    """RViz with the shipped config, or a warning when rviz2 is missing; a failing RViz ends the launch."""
    try:
        get_package_share_directory("rviz2")
    except PackageNotFoundError:
        if shutil.which("rviz2") is None:
            return [
                LogInfo(
                    msg="[lingbot_map] WARNING: rviz:=true but rviz2 is not installed; running without it"
                )
            ]
    rviz = Node(
        package="rviz2",
        executable="rviz2",
        name="lingbot_map_rviz",
        arguments=["-d", str(share / "config" / "lingbot_map.rviz")],
    )

    def on_exit(event: object, context: LaunchContext) -> list:
        code = getattr(event, "returncode", 0)
        return [Shutdown(reason=f"rviz2 failed (exit code {code})")] if code else []

    return [rviz, RegisterEventHandler(OnProcessExit(target_action=rviz, on_exit=on_exit))]


def generate_launch_description() -> LaunchDescription:
    share = Path(get_package_share_directory(PACKAGE))
    args = [
        DeclareLaunchArgument(
            "camera",
            default_value="/camera",
            description="camera namespace: subscribes <camera>/image_raw + <camera>/camera_info",
        ),
        DeclareLaunchArgument(
            "image_topic", default_value="", description="sensor_msgs/Image topic; empty: <camera>/image_raw"
        ),
        DeclareLaunchArgument(
            "camera_info_topic",
            default_value="",
            description="CameraInfo topic; empty: camera_info beside the image topic",
        ),
        DeclareLaunchArgument(
            "depth_topic",
            default_value="",
            description="registered metric depth (16UC1 mm / 32FC1 m) for scale_source:=depth",
        ),
        *[DeclareLaunchArgument(name, default_value="", description=KNOB_HELP[name]) for name in KNOBS],
        DeclareLaunchArgument(
            "params_file",
            default_value=str(share / "config" / "lingbot_map.yaml"),
            description="ROS parameters file of the node",
        ),
        DeclareLaunchArgument("namespace", default_value="", description="namespace of the node"),
        DeclareLaunchArgument(
            "rviz",
            default_value="false",
            description="start RViz with the shipped config (skipped with a warning if absent)",
        ),
        DeclareLaunchArgument(
            "big_shm_profile",
            default_value="true",
            description="use the shipped Fast DDS profile unless FASTDDS_DEFAULT_PROFILES_FILE is set",
        ),
        DeclareLaunchArgument("log_level", default_value="info", description="node log level"),
    ]
    return LaunchDescription([*args, OpaqueFunction(function=_node)])
