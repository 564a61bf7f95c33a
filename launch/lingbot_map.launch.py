"""Launch the LingBot-Map node (and optionally RViz) with the standard ROS 2 launch API (Humble and later).

    ros2 launch lingbot_map_ros lingbot_map.launch.py camera:=/camera/color \\
        checkpoint:=/data/lingbot-map.pt model_preset:=lingbot-map device:=cuda rviz:=true

`ros2 launch lingbot_map_ros lingbot_map.launch.py --show-args` lists every argument. Topics follow the
image_transport convention: `camera:=<ns>` subscribes `<ns>/image_raw` and `<ns>/camera_info`;
`image_topic:=` overrides the image (its `camera_info` is then taken from the image topic's namespace unless
`camera_info_topic:=` is given). Knob arguments left empty keep the params file's value. What integrators
change without a copied params file: `image_transport:=compressed`, `qos_reliability:=best_effort`,
`output_dir:=...`; `params_file:=my.yaml` is an overlay on the shipped config/lingbot_map.yaml (only what it
sets changes). The argument descriptions come from lingbot_map_ros/ros/params/docs.py (plain data): listing
them (`--show-args`) imports no torch.

Several cameras in one node: `cameras:=[front,rear]` (docs/node.md, "Several cameras"). Camera `<name>` then
subscribes `<camera>/<name>/image_raw` and `<camera>/<name>/camera_info` (the node's `<name>/image`,
`<name>/image/compressed` and `<name>/camera_info` are remapped there; `image_topic:=` and
`camera_info_topic:=` apply to a single camera only), and RViz shows every camera's path.

A robot needs nothing more: `tf_mode:=auto` picks `map -> odom` when TF has
`odom -> base_link -> <camera frame>` (docs/robot.md).

The node gets the shipped Fast DDS profile (16 MiB shared memory, for camera images above 512 KiB) only when
`FASTDDS_DEFAULT_PROFILES_FILE` is not already set; either way the profile in use is logged. RViz is optional:
when rviz2 is not installed the launch warns and runs the node alone; an RViz that fails (non-zero exit) shuts
the whole launch down, and so does the node exiting, so nothing is left running orphaned.

A node that exits non-zero (it cannot configure: bad parameters, a missing checkpoint, ...) shuts the launch
down with its reason (exit code and the node's last error line) and makes `ros2 launch` exit non-zero:
launch returns non-zero only when an action raises, so the exit handler adds one that raises `NodeFailed`
(launch logs "Caught exception in launch ...: <reason>" and returns 1). A node stopped by Ctrl-C exits 0:
launch returns 0.
"""

from __future__ import annotations

import os
import re
import shutil
from collections import deque
from pathlib import Path

from ament_index_python.packages import PackageNotFoundError, get_package_share_directory
from launch.actions import DeclareLaunchArgument, LogInfo, OpaqueFunction, RegisterEventHandler, Shutdown
from launch.event_handlers import OnProcessExit, OnProcessIO
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node

from launch import LaunchContext, LaunchDescription

PACKAGE = "lingbot_map_ros"
PROFILE_VARIABLE = "FASTDDS_DEFAULT_PROFILES_FILE"

#: launch argument -> node parameter; an empty argument keeps the params file's value. The argument's
#: description comes from the parameter's row (`knob_description`).
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
    "path_publish_rate": "path.publish_rate",
    "loop_closure": "loop_closure.enabled",
    "cameras": "cameras",
    "image_transport": "image_transport",
    "qos_reliability": "qos.reliability",
    "output_dir": "output_dir",
}


def knob_description(description: str, default: object) -> str:
    """A knob argument's description: its parameter's description and default, both read from the node's
    parameter table (ros/params/table.py), never typed here."""
    shown = str(default).lower() if isinstance(default, bool) else repr(default)
    return f"{description} Node default: {shown}; empty: the params file's value."


#: What the node's exit codes mean (lingbot_map_ros.ros.lifecycle.shutdown.run_node).
EXIT_CODE_MEANINGS = {
    1: "configure or activate failed, or its executor stopped",
    2: "invalid parameters",
}
#: ANSI colour escapes (an emulated tty's coloured log lines) stripped from the reason.
ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*m")


class NodeFailed(RuntimeError):
    """Raised by the node's exit handler so that `ros2 launch` exits non-zero (module doc)."""


def node_exit_reason(code: int, output_lines: list[str]) -> str:
    """Why the node exited with `code` (non-zero), from its last ERROR / FATAL line or else its last output
    line (bad parameters are printed on stderr), without terminal colours."""
    lines = [ANSI_ESCAPE.sub("", line).strip() for line in output_lines]
    lines = [line for line in lines if line and "autostart failed (see the error above)" not in line]
    errors = [line for line in lines if "[ERROR]" in line or "[FATAL]" in line]
    meaning = EXIT_CODE_MEANINGS.get(code, "killed by a signal" if code < 0 else "see its output above")
    detail = (errors or lines or [""])[-1]
    return f"lingbot_map exited with code {code} ({meaning})" + (f": {detail}" if detail else "")


def params_overlay(params_file: str) -> list[str]:
    """The user's parameters file applied after the shipped one (empty: none); a missing file is an error
    naming it, before the node starts."""
    if not params_file:
        return []
    path = Path(params_file).expanduser()
    if not path.is_file():
        raise ValueError(f"params_file {params_file!r} does not exist")
    return [str(path)]


def image_topic_for(camera: str, image_topic: str) -> str:
    """The image topic: `image_topic` when given, else `<camera>/image_raw` (image_transport convention)."""
    return image_topic or camera.rstrip("/") + "/image_raw"


def camera_info_for(image: str, camera_info_topic: str) -> str:
    """`camera_info_topic` when given, else `camera_info` beside the image topic (`<ns>/camera_info`)."""
    return camera_info_topic or image.rsplit("/", 1)[0] + "/camera_info"


def parameter_value(text: str) -> object:
    """A launch argument's text as the parameter's type (bool, int, float, string, or `[a,b]`: a string
    array, items stripped of spaces and quotes)."""
    if text.startswith("[") and text.endswith("]"):
        return [item.strip().strip("'\"") for item in text[1:-1].split(",") if item.strip()]
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


def camera_remappings(camera: str, names: list[str]) -> list[tuple[str, str]]:
    """The topics of named cameras: `<name>/image` -> `<camera>/<name>/image_raw` (+ `/compressed`) and
    `<name>/camera_info` -> `<camera>/<name>/camera_info`."""
    out = []
    for name in names:
        image = image_topic_for(f"{camera.rstrip('/')}/{name}", "")
        out += [
            (f"{name}/image", image),
            (f"{name}/image/compressed", image + "/compressed"),
            (f"{name}/camera_info", camera_info_for(image, "")),
        ]
    return out


def rviz_config_for(config: dict, names: list[str]) -> dict:
    """The shipped RViz config (parsed YAML) with one Path display per named camera (its `~/<name>/path`, a
    colour each) instead of the single one, and the first camera's depth image."""
    colors = ("25; 255; 0", "255; 170; 0", "0; 170; 255", "255; 0; 127", "170; 85; 255", "255; 255; 0")
    displays = config["Visualization Manager"]["Displays"]
    out = []
    for display in displays:
        topic = display.get("Topic", {}).get("Value", "")
        if display.get("Class") == "rviz_default_plugins/Path":
            for i, name in enumerate(names):
                out.append(
                    {
                        **display,
                        "Name": f"Path {name}",
                        "Color": colors[i % len(colors)],
                        "Topic": {**display["Topic"], "Value": topic.replace("/path", f"/{name}/path")},
                    }
                )
            continue
        if topic.endswith("/depth") and names:
            display = {
                **display,
                "Topic": {**display["Topic"], "Value": topic.replace("/depth", f"/{names[0]}/depth")},
            }
        out.append(display)
    return {**config, "Visualization Manager": {**config["Visualization Manager"], "Displays": out}}


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
    names = [name for name in overrides.get("cameras", []) if name]
    if names:
        remappings = camera_remappings(arg("camera"), names)
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
        LogInfo(
            msg=f"[lingbot_map] image {remappings[0][1]}, camera_info {remappings[2][1]}, "
            f"overrides {overrides}"
        )
    )
    node = Node(
        package=PACKAGE,
        executable="lingbot_map_node",
        name="lingbot_map",
        namespace=arg("namespace"),
        parameters=[
            str(share / "config" / "lingbot_map.yaml"),
            *params_overlay(arg("params_file")),
            overrides,
        ],
        remappings=remappings,
        additional_env=env,
        arguments=["--ros-args", "--log-level", arg("log_level")],
        output="screen",
        emulate_tty=True,
    )
    actions += [node, *_node_exit_handlers(node)]
    if arg("rviz").lower() in ("true", "1"):
        actions += _rviz(share, names)
    return actions


def _node_exit_handlers(node: Node) -> list:
    """The node exiting shuts the launch down; a non-zero exit also makes `ros2 launch` exit non-zero with the
    reason (module doc). Its last output lines are kept for that reason."""
    output_lines: deque[str] = deque(maxlen=20)

    def on_output(event: object) -> None:
        output_lines.extend(event.text.decode(errors="replace").splitlines())

    def fail(context: LaunchContext, reason: str) -> None:
        raise NodeFailed(reason)

    def on_exit(event: object, context: LaunchContext) -> list:
        code = getattr(event, "returncode", 0) or 0
        if code == 0:
            return [Shutdown(reason="lingbot_map exited")]
        reason = node_exit_reason(code, list(output_lines))
        return [Shutdown(reason=reason), OpaqueFunction(function=fail, args=[reason])]

    return [
        RegisterEventHandler(OnProcessIO(target_action=node, on_stdout=on_output, on_stderr=on_output)),
        RegisterEventHandler(OnProcessExit(target_action=node, on_exit=on_exit)),
    ]


def _rviz(share: Path, names: list[str]) -> list:
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
    config = share / "config" / "lingbot_map.rviz"
    if names:  # one path per camera: a config written for this launch
        import tempfile

        import yaml

        text = yaml.safe_dump(rviz_config_for(yaml.safe_load(config.read_text()), names), sort_keys=False)
        config = Path(tempfile.mkdtemp(prefix="lingbot_map_rviz_")) / "lingbot_map.rviz"
        config.write_text(text)
    rviz = Node(
        package="rviz2",
        executable="rviz2",
        name="lingbot_map_rviz",
        arguments=["-d", str(config)],
    )

    def on_exit(event: object, context: LaunchContext) -> list:
        code = getattr(event, "returncode", 0)
        return [Shutdown(reason=f"rviz2 failed (exit code {code})")] if code else []

    return [rviz, RegisterEventHandler(OnProcessExit(target_action=rviz, on_exit=on_exit))]


def generate_launch_description() -> LaunchDescription:
    from lingbot_map_ros.ros.params.docs import PARAMETER_DOCS  # plain data: no torch, no rclpy (issue 29)

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
        *[
            DeclareLaunchArgument(
                name,
                default_value="",
                description=knob_description(PARAMETER_DOCS[param][1], PARAMETER_DOCS[param][0]),
            )
            for name, param in KNOBS.items()
        ],
        DeclareLaunchArgument(
            "params_file",
            default_value="",
            description="a ROS parameters file applied over the shipped config/lingbot_map.yaml (an overlay: "
            "only the parameters it sets change); the knob arguments above override both",
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
