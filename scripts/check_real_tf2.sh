#!/usr/bin/env bash
# The checks of issue 29 with the real `ros2 launch` and the C++-backed tf2_ros (no apt ROS install):
#   scripts/check_real_tf2.sh build SCRATCH MIRRORS   # once: venv copy + colcon workspace (~2-9 min, 2 cores)
#   scripts/check_real_tf2.sh check SCRATCH           # the tests that skip without tf2_ros / launch_ros
#                                                     # (check and launch first rebuild HEAD into the workspace)
#   scripts/check_real_tf2.sh launch SCRATCH          # 10 SIGINT stops and the map -> odom republish under
#                                                     # the real `ros2 launch` (benchmarks/launch_checks.py)
# SCRATCH: an empty folder; MIRRORS: a folder holding git mirrors of ros2/{geometry2,launch,launch_ros,ros2cli,
# rosidl_runtime_py,rcl_interfaces} (named like that: links to each mirror's git dir, e.g. the search tool's
# fetch gives /work/.mirror/ros2+geometry2/repo). The steps are ../shared/ros/LOCAL_LAUNCH_TF2.md's.
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
what=${1:?build|check}
SCRATCH=$(realpath -m "${2:?scratch folder}")

build() {
  local mirrors=${1:?mirrors folder}
  mkdir -p "$SCRATCH" && cp -a "$(realpath "$REPO/.venv")" "$SCRATCH/venv"
  grep -rIl "$(realpath "$REPO/.venv")" "$SCRATCH/venv" | xargs sed -i "s#$(realpath "$REPO/.venv")#$SCRATCH/venv#g"
  "$SCRATCH/venv/bin/python" -m pip uninstall -y lingbot_map_ros || true
  (cd "$SCRATCH/venv" && rm -rf share/ament_index/resource_index/*/tf2_msgs share/tf2_msgs lib/libtf2_msgs__* \
    lib/python3.11/site-packages/tf2_msgs-0.0.0-py3.11.egg-info lib/python3.11/site-packages/tf2_msgs include/tf2_msgs)
  "$SCRATCH/venv/bin/python" -m pip install colcon-common-extensions osrf-pycommon argcomplete importlib-metadata \
    ros-ament-cmake-ros ros-ament-cmake-gmock ros-ament-cmake-gtest ros-ament-cmake-pytest
  mkdir -p "$SCRATCH/ws/src" && cd "$SCRATCH/ws/src"
  for repo in geometry2 launch launch_ros ros2cli rosidl_runtime_py rcl_interfaces; do
    git clone -q "$mirrors/$repo" "$repo"
  done
  mkdir lingbot_map_ros && git -C "$REPO" archive HEAD | tar -x -C lingbot_map_ros
  for d in geometry2/{examples_tf2_py,test_tf2,tf2_bullet,tf2_eigen,tf2_eigen_kdl,tf2_geometry_msgs,tf2_kdl,tf2_ros,tf2_sensor_msgs,tf2_tools,geometry2} \
           launch/{launch_pytest,launch_testing,launch_testing_ament_cmake,test_launch_testing} \
           launch_ros/{launch_testing_ros,test_launch_ros} \
           ros2cli/{ros2cli_test_interfaces,ros2lifecycle_test_fixtures,ros2doctor,ros2component,ros2multicast} \
           rcl_interfaces/{action_msgs,builtin_interfaces,lifecycle_msgs,rcl_interfaces,rosgraph_msgs,service_msgs,statistics_msgs,test_msgs,type_description_interfaces}; do
    touch "$d/COLCON_IGNORE"
  done
  cd "$SCRATCH/ws"
  PATH=$SCRATCH/venv/bin:$PATH AMENT_PREFIX_PATH=$SCRATCH/venv CMAKE_PREFIX_PATH=$SCRATCH/venv MAKEFLAGS=-j2 \
    colcon build --parallel-workers 2 --cmake-args -DBUILD_TESTING=OFF \
    -DPython3_EXECUTABLE="$SCRATCH/venv/bin/python" -DCMAKE_BUILD_TYPE=Release
  cat > "$SCRATCH/env.sh" <<ENV
export PATH=$SCRATCH/venv/bin:\$PATH AMENT_PREFIX_PATH=$SCRATCH/venv CMAKE_PREFIX_PATH=$SCRATCH/venv
set +u; source $SCRATCH/ws/install/setup.bash
ENV
}

refresh() {  # this checkout's committed tree (HEAD) into the workspace, rebuilt: the launch file ros2 finds
  rm -rf "$SCRATCH/ws/src/lingbot_map_ros" && mkdir -p "$SCRATCH/ws/src/lingbot_map_ros"
  git -C "$REPO" archive HEAD | tar -x -C "$SCRATCH/ws/src/lingbot_map_ros"
  (cd "$SCRATCH/ws" && PATH=$SCRATCH/venv/bin:$PATH AMENT_PREFIX_PATH=$SCRATCH/venv \
    CMAKE_PREFIX_PATH=$SCRATCH/venv colcon build --packages-select lingbot_map_ros > /dev/null)
}

check() {
  # shellcheck disable=SC1091
  source "$SCRATCH/env.sh"
  refresh
  cd "$REPO"
  export LINGBOT_NODE_PYTHON=$SCRATCH/venv/bin/python PYTHONPATH=$REPO:${PYTHONPATH:-}
  echo "== ros2 launch --show-args (issue 29: under 3 s, no torch imported)"
  /usr/bin/time -f "%e s" ros2 launch lingbot_map_ros lingbot_map.launch.py --show-args > /dev/null
  echo "== the tests that need tf2_ros / launch_ros (they skip elsewhere)"
  "$SCRATCH/venv/bin/python" -m pytest -q -rs test/ros/test_ros_tf_cache_time.py test/ros/test_ros_launch.py \
    test/ros/test_ros_tf_ingest.py test/dds/test_launch_process.py test/dds/test_robot_live.py
}

launch() {
  # shellcheck disable=SC1091
  source "$SCRATCH/env.sh"
  refresh
  cd "$REPO"
  export PYTHONPATH=$REPO:${PYTHONPATH:-}
  "$SCRATCH/venv/bin/python" benchmarks/launch_checks.py stops --runs 10
  "$SCRATCH/venv/bin/python" benchmarks/launch_checks.py republish --seconds 60
}

case $what in
  build) build "${3:?mirrors folder}" ;;
  check) check ;;
  launch) launch ;;
  *) echo "usage: $0 build SCRATCH MIRRORS | check SCRATCH | launch SCRATCH" >&2; exit 2 ;;
esac
