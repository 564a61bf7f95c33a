#!/usr/bin/env bash
# Set up the environment (idempotent) and run the whole test suite: ruff, then pytest.
#
#   scripts/run_tests.sh                 # everything
#   scripts/run_tests.sh test/cache/test_cache_trace.py -x   # extra arguments go to pytest
#
# DDS stays on this machine: every test run gets ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST, its own ROS_DOMAIN_ID,
# a temporary ROS_LOG_DIR and the project's large shared-memory Fast DDS profile (camera-sized images).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
scripts/setup_env.sh

export ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST
export ROS_DOMAIN_ID=${ROS_DOMAIN_ID:-$(( (RANDOM % 100) + 1 ))}
ROS_LOG_DIR=$(mktemp -d -t lingbot_ros_log.XXXXXX)
export ROS_LOG_DIR
export FASTDDS_DEFAULT_PROFILES_FILE="$ROOT/config/fastdds_localhost_big_shm.xml"
export PYTHONUNBUFFERED=1
trap 'rm -rf "$ROS_LOG_DIR"' EXIT

echo "[run_tests] ruff"
.venv/bin/ruff check .
.venv/bin/ruff format --check .
echo "[run_tests] pytest (ROS_DOMAIN_ID=$ROS_DOMAIN_ID)"
set +e
.venv/bin/python -m pytest -q -rs "$@"
rc=$?
set -e
if [[ $rc -eq 5 ]]; then
  echo "[run_tests] pytest collected no tests: failing" >&2
  exit 1
fi
exit $rc
