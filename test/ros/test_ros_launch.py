"""What can be tested of the launch file, the parameters YAML and the RViz config without launch/RViz.

The launch packages (launch, launch_ros, ament_index_python) are not installable here (not on PyPI): when they
are importable (a real ROS install) the launch description is generated and inspected; otherwise the file is
parsed with `ast` and its declared arguments, executable and parameter handling are checked.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from ros_helpers import REPO
from without_module import hide_modules

from lingbot_map_ros.ros.params.declare import PARAMETERS, SPECS, param_docs_source, params_yaml
from lingbot_map_ros.ros.params.docs import PARAMETER_DOCS

LAUNCH_FILE = REPO / "launch" / "lingbot_map.launch.py"
PARAMS_FILE = REPO / "config" / "lingbot_map.yaml"
RVIZ_FILE = REPO / "config" / "lingbot_map.rviz"
EXPECTED_ARGS = {
    "camera",
    "image_topic",
    "camera_info_topic",
    "depth_topic",
    "checkpoint",
    "model_preset",
    "device",
    "image_width",
    "tf_mode",
    "map_frame",
    "odom_frame",
    "base_frame",
    "session_dir",
    "session_load_path",
    "mapping_enabled",
    "path_publish_rate",
    "loop_closure",
    "cameras",
    "scale_source",
    "scale_factor",
    "image_transport",
    "qos_reliability",
    "output_dir",
    "params_file",
    "namespace",
    "rviz",
    "big_shm_profile",
    "log_level",
}


def _flatten(tree: dict, prefix: str = "") -> dict[str, object]:
    out: dict[str, object] = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        out.update(_flatten(value, f"{name}.") if isinstance(value, dict) else {name: value})
    return out


def test_params_yaml_lists_every_parameter_with_its_default() -> None:
    text = PARAMS_FILE.read_text()
    assert text == params_yaml(), "config/lingbot_map.yaml is stale: python -m lingbot_map_ros.ros.params"
    loaded = _flatten(yaml.safe_load(text)["/**"]["ros__parameters"])
    assert loaded == {spec.name: spec.default for spec in PARAMETERS}
    assert text.count("[live]") + text.count("[reload]") == len(PARAMETERS) + 2  # + the header legend


def test_launch_file_declares_its_arguments() -> None:
    source = LAUNCH_FILE.read_text()
    tree = ast.parse(source)
    declared = {
        node.args[0].value
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and getattr(node.func, "id", "") == "DeclareLaunchArgument"
        and isinstance(node.args[0], ast.Constant)
    }
    helpers = _launch_helpers()
    declared |= set(helpers["KNOBS"])  # declared in a comprehension over KNOBS
    assert declared == EXPECTED_ARGS
    parameters = {spec.name for spec in PARAMETERS}
    assert set(helpers["KNOBS"].values()) <= parameters  # every knob sets a real parameter
    # a knob's description is derived from its parameter's row: nothing typed in the launch file
    assert "knob_description(PARAMETER_DOCS[param][1], PARAMETER_DOCS[param][0])" in source
    scale = SPECS["scale.factor"]
    text = helpers["knob_description"](scale.description, scale.default)
    assert text.startswith(scale.description) and "Node default: 1.0;" in text
    functions = {node.name for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)}
    assert "generate_launch_description" in functions
    strings = {
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
    }
    assert {
        "lingbot_map_node",
        "lingbot_map",
        "FASTDDS_DEFAULT_PROFILES_FILE",
        "fastdds_localhost_big_shm.xml",
        "lingbot_map.yaml",
        "lingbot_map.rviz",
        "rviz2",
        "lingbot_map exited",
    } <= strings
    assert "Shutdown" in source and "OnProcessExit" in source and "additional_env" in source
    # every file the launch file refers to is shipped (setup.py installs config/ and launch/)
    assert (REPO / "config" / "fastdds_localhost_big_shm.xml").is_file() and RVIZ_FILE.is_file()


def _launch_helpers() -> dict[str, object]:
    """The launch file's module-level constants and pure helpers, executed without the launch packages."""
    tree = ast.parse(LAUNCH_FILE.read_text())
    keep = [
        node
        for node in tree.body
        if (
            isinstance(node, ast.FunctionDef)
            and node.name
            in (
                "image_topic_for",
                "camera_info_for",
                "parameter_value",
                "camera_remappings",
                "rviz_config_for",
                "node_exit_reason",
                "knob_description",
                "params_overlay",
            )
        )
        or (
            isinstance(node, ast.Assign)
            and node.targets[0].id in ("KNOBS", "PROFILE_VARIABLE", "EXIT_CODE_MEANINGS", "ANSI_ESCAPE")
        )
    ]
    namespace: dict[str, object] = {"re": re, "Path": Path}
    exec(compile(ast.Module(body=keep, type_ignores=[]), str(LAUNCH_FILE), "exec"), namespace)  # noqa: S102
    return namespace


def test_launch_topics_follow_the_image_transport_convention() -> None:
    h = _launch_helpers()
    image = h["image_topic_for"]("/camera/color", "")
    assert image == "/camera/color/image_raw"
    assert h["camera_info_for"](image, "") == "/camera/color/camera_info"
    assert h["image_topic_for"]("/camera", "/usb_cam/image_raw") == "/usb_cam/image_raw"
    assert h["camera_info_for"]("/usb_cam/image_raw", "") == "/usb_cam/camera_info"
    assert h["camera_info_for"]("/usb_cam/image_raw", "/info") == "/info"
    texts = ("518", "0.37", "tiny", "false", "True")
    assert [h["parameter_value"](v) for v in texts] == [518, 0.37, "tiny", False, True]


def test_launch_gives_the_reason_a_node_exited_non_zero() -> None:
    """The reason `ros2 launch` logs (and exits 1 with) when the node cannot configure (issue 19)."""
    reason = _launch_helpers()["node_exit_reason"]
    bad_params = ["[lingbot_map] invalid parameters: model.image_width must be a multiple of 14, got 57"]
    assert reason(2, bad_params) == f"lingbot_map exited with code 2 (invalid parameters): {bad_params[0]}"
    configure = [
        "\x1b[0m[INFO] [1.0] [lingbot_map]: model loading\x1b[0m",
        "\x1b[31m[ERROR] [1.1] [lingbot_map]: configure failed: cannot load model.checkpoint '/x.pt'\x1b[0m",
        "\x1b[31m[FATAL] [1.2] [lingbot_map]: autostart failed (see the error above); exiting\x1b[0m",
    ]
    assert reason(1, configure) == (
        "lingbot_map exited with code 1 (configure or activate failed, or its executor stopped): "
        "[ERROR] [1.1] [lingbot_map]: configure failed: cannot load model.checkpoint '/x.pt'"
    )
    assert reason(-9, []) == "lingbot_map exited with code -9 (killed by a signal)"


def test_launch_cameras_argument_remaps_each_camera_and_shows_each_path() -> None:
    h = _launch_helpers()
    assert h["parameter_value"]("[front, rear]") == ["front", "rear"]
    assert h["parameter_value"]("['front','rear']") == ["front", "rear"]
    assert dict(h["camera_remappings"]("/robot", ["front", "rear"])) == {
        "front/image": "/robot/front/image_raw",
        "front/image/compressed": "/robot/front/image_raw/compressed",
        "front/camera_info": "/robot/front/camera_info",
        "rear/image": "/robot/rear/image_raw",
        "rear/image/compressed": "/robot/rear/image_raw/compressed",
        "rear/camera_info": "/robot/rear/camera_info",
    }
    config = h["rviz_config_for"](yaml.safe_load(RVIZ_FILE.read_text()), ["front", "rear"])
    displays = config["Visualization Manager"]["Displays"]
    paths = [d for d in displays if d["Class"] == "rviz_default_plugins/Path"]
    assert [d["Topic"]["Value"] for d in paths] == ["/lingbot_map/front/path", "/lingbot_map/rear/path"]
    assert len({d["Color"] for d in paths}) == 2
    topics = {d["Name"]: d["Topic"]["Value"] for d in displays if "Topic" in d}
    assert topics["Map cloud"] == "/lingbot_map/map_cloud" and topics["Depth"] == "/lingbot_map/front/depth"


@pytest.mark.skipif(importlib.util.find_spec("launch_ros") is None, reason="launch_ros only on a ROS install")
def test_launch_description_generates() -> None:  # pragma: no cover - needs a ROS install
    spec = importlib.util.spec_from_file_location("lingbot_map_launch", LAUNCH_FILE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    description = module.generate_launch_description()
    names = {a.name for a in description.entities if type(a).__name__ == "DeclareLaunchArgument"}
    assert names == EXPECTED_ARGS


def test_rviz_config_shows_tf_path_map_cloud_and_depth() -> None:
    config = yaml.safe_load(RVIZ_FILE.read_text())["Visualization Manager"]
    assert config["Global Options"]["Fixed Frame"] == "map"
    displays = {d["Class"]: d for d in config["Displays"]}
    assert {
        "rviz_default_plugins/TF",
        "rviz_default_plugins/Path",
        "rviz_default_plugins/PointCloud2",
        "rviz_default_plugins/Image",
    } <= set(displays)
    topics = {d["Name"]: d["Topic"]["Value"] for d in config["Displays"] if "Topic" in d}
    assert topics["Map cloud"] == "/lingbot_map/map_cloud" and topics["Depth"] == "/lingbot_map/depth"
    clouds = [d for d in config["Displays"] if d.get("Name") == "Map cloud"]
    assert clouds[0]["Topic"]["Durability Policy"] == "Transient Local"  # matches ~/map_cloud's QoS
    assert clouds[0]["Color Transformer"] == "RGB8"
    grid = displays["rviz_default_plugins/Map"]  # the Nav2 occupancy grid, latched like ~/grid
    assert grid["Topic"]["Value"] == "/lingbot_map/grid"
    assert grid["Topic"]["Durability Policy"] == "Transient Local"


def test_setup_installs_launch_and_config() -> None:
    setup = (REPO / "setup.py").read_text()
    assert 'glob("launch/*.launch.py")' in setup and 'glob("config/*.yaml")' in setup
    assert "lingbot_map_node = lingbot_map_ros.ros.node_entry:main" in setup  # issue 20: signals first
    assert Path(REPO / "resource" / "lingbot_map_ros").is_file()


def test_node_doc_lists_every_parameter_and_output() -> None:
    text = (REPO / "docs" / "node.md").read_text()
    missing = [spec.name for spec in PARAMETERS if f"| `{spec.name}` |" not in text]
    assert not missing, f"docs/node.md lacks the parameters {missing}"
    for topic in ("`~/grid`", "`~/camera_pose`", "`depth_image`", "`tf_unavailable`", "`scale_spread`"):
        assert topic in text
    assert (REPO / "docs" / "robot.md").is_file()


def test_launch_arguments_need_no_torch(tmp_path: Path) -> None:
    """Issue 29: `--show-args` took ~15 s because the launch file imported the parameter table (the engine,
    torch). It imports only lingbot_map_ros.ros.params.docs, which a Python without torch and rclpy imports;
    that module is the table's data, regenerated (a drift fails here)."""
    written = (REPO / "lingbot_map_ros/ros/params/docs.py").read_text()
    assert written == param_docs_source(), (
        "stale: python -m lingbot_map_ros.ros.params --param-docs > lingbot_map_ros/ros/params/docs.py"
    )
    assert {spec.name: (spec.default, spec.description) for spec in PARAMETERS} == PARAMETER_DOCS
    imported = {
        node.module
        for node in ast.walk(ast.parse(LAUNCH_FILE.read_text()))
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("lingbot_map_ros")
    }
    assert imported == {"lingbot_map_ros.ros.params.docs"}
    env = {**os.environ, "PYTHONPATH": hide_modules(tmp_path, "torch", "rclpy", "numpy")}
    docs = "lingbot_map_ros.ros.params.docs"
    code = f"import sys, {docs} as d; assert d.PARAMETER_DOCS; print(sorted(sys.modules))"
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "torch" not in done.stdout and "rclpy" not in done.stdout


def test_params_file_is_an_overlay_on_the_shipped_one(tmp_path: Path) -> None:
    overlay = _launch_helpers()["params_overlay"]
    assert overlay("") == []
    mine = tmp_path / "mine.yaml"
    mine.write_text("/**:\n  ros__parameters:\n    queue_size: 3\n")
    assert overlay(str(mine)) == [str(mine)]
    with pytest.raises(ValueError, match="does not exist"):
        overlay(str(tmp_path / "missing.yaml"))
