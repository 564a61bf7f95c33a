#!/usr/bin/env bash
# Prepared H200 calls of issue 22 (docs/benchmarks.md, "Issue 22"). Each MODE fits one device call (< 10 min);
# run the calls back to back so that they share one warm machine (side-by-side numbers only within a machine).
#
# Here, before the calls (the device tool sends /work/main's tree; put this branch's files in .device/src):
#   rm -rf .device/src && mkdir -p .device/src && git -C <worktree> archive HEAD | tar -x -C .device/src
#   git -C <worktree> rev-parse --short HEAD > .device/src/COMMIT
#   ../shared/gpu/prepare_flashinfer.sh .device/whl          # mode tests (carry .device/whl)
#   ../shared/gpu/prepare_ros_wheels.sh .device/rosw         # mode node (carry .device/rosw, not whl)
#   cp ../shared/gpu/*.sh .device/
# There:  cd .device/src && bash benchmarks/h200_call.sh MODE      (MODE: tests | long | node | node-ab | gpu-node)
# Results come back under $OUT (at most 8 files): copy $OUT/*_h200.json into benchmarks/results/, then
# `python benchmarks/render_results.py` prints docs/benchmarks.md's tables.
#
#   tests    GPU tests owed (FlashInfer included) + FlashInfer's JIT-built .so files into $OUT/fi_aot
#            (next calls: put them into .device/fi_aot/ and device_env.sh skips the ~80 s build);
#            startup.py: cold overlapped, warm sync, warm overlapped with depth every_n 2 (300 frames);
#            multi_camera.py 1,2,4 cameras, default backend, compiled, with the single-stream row
#   long     startup.py over 5,000 frames (16 re-anchors): p99 of the last 300 frames vs the first full window
#   node     node_e2e.py at 60 and 30 Hz with the defaults, then with depth.every_n 2 and inference.overlap false
#   node-ab BEFORE.tar.gz COMMIT_BEFORE   node_e2e.py with the defaults at 60 and 30 Hz: this tree, the other
#            commit's tree, this tree again (a refactor's before/after side by side on one machine); run from
#            the repository root with DEV=.device LINGBOT_COMMIT=<this commit>; carry .device/rosw,
#            .device/gt (gtsam_slim.tar.xz: gtsam's wheel without its data files) and the tar.gz
#   cameras  issue 33: the batched-graph GPU tests + the multi-stream GPU tests (default backend, no wheels),
#            then multi_camera.py 1,2,4 cameras, eager and graphed batched steps side by side, single-stream row
#   loop-ab  issue 31: node_e2e.py with the defaults at 60 and 30 Hz, loop closure on, off, on (interleaved A/B on
#            one machine); carry .device/<you> with rosw, gt (gtsam_slim.tar.xz), device_ros_env.sh and src;
#            there `cd .device/<you>/src && bash benchmarks/h200_call.sh loop-ab` (DEV defaults to ..).
#            RV_PY / LOOP_AB_ARGS / LOOP_AB_SECONDS: the python with rclpy and extra node_e2e.py arguments
#            (the CPU dry run: `RV_PY=.venv/bin/python DEV=<stub> LOOP_AB_ARGS="--set model.preset=tiny ..."`)
#   verify   issue 31: the graphed verification pass's GPU test, then benchmarks/verify_pass.py (a pass eager vs
#            graphed, the live push with a pass in flight; node defaults, compiled) and again with the live
#            pushes on a high-priority stream (no wheels; run it before loop-ab on the same machine: warm /tmp/cc)
#   reanchor issue 31: re-anchors prepared beside the stream, node_e2e.py at 30 Hz for 70 s with the defaults,
#            then with kv_cache.reanchor_steps 0 (the one-step re-anchor), then reanchor_wait.py (session alone);
#            carry and run as loop-ab (`bash benchmarks/h200_call.sh reanchor`)
#   gpu-node the GPU tests that need CUDA and rclpy (the node with several cameras on the GPU) + the CUDA
#            multi-stream tests (torch backend; carry rosw, not the FlashInfer wheels)
#   bench6   session 6, call 1 (carry .device/fi: whl + device_env.sh): multi_camera.py 1,2,4 cameras (graphed
#            batched steps, rounds unpipelined and pipelined, single-stream rows), the batched / multi-stream /
#            verification-pass GPU tests with FlashInfer, benchmarks/verify_pass.py (eager vs graphed pass)
#   node6    session 6, call 2 (carry .device/final: rosw, gt, device_ros_env.sh): node_e2e.py loop closure on,
#            off, on at 60 and 30 Hz; 30 Hz with re-anchors prepared over 24 frames (60 s) and one-step (40 s);
#            two cameras at 15 Hz each; then
#            test_node_cameras_gpu.py
set -o pipefail
MODE=${1:?MODE: tests | long | node | node-ab BEFORE | cameras | loop-ab | verify | reanchor | gpu-node | bench6 | node6}
export PYTHONUNBUFFERED=1
LOG=$OUT/log
DEV=${DEV:-..}   # .device, where the wheels and the env scripts are

step() {  # step SECONDS COMMAND...: run with a time limit, log to $OUT/log (a cut-off call keeps the log)
  local limit=$1
  shift
  echo "== $(date -u +%T) (limit ${limit}s) $*" | tee -a "$LOG"
  timeout "$limit" "$@" 2>&1 | tee -a "$LOG"
}

with_gtsam() {  # with_gtsam PYTHONPATH: gtsam (the loop closer's pose graph) from $DEV/gt/gtsam_slim.tar.xz, its
  # wheel without the data files, unpacked into /tmp/gtsam and put in front of PYTHONPATH (printed)
  if [[ -f "$DEV/gt/gtsam_slim.tar.xz" && ! -d /tmp/gtsam/gtsam ]]; then
    mkdir -p /tmp/gtsam && tar -xJf "$DEV/gt/gtsam_slim.tar.xz" -C /tmp/gtsam >>"$LOG" 2>&1
  fi
  echo "/tmp/gtsam:$1"
}

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv | tee -a "$LOG"
echo "commit $(cat COMMIT 2>/dev/null)" | tee -a "$LOG"
STARTUP="benchmarks/startup.py --cache-dir /tmp/cc"
case "$MODE" in
  tests)
    . "$DEV/device_env.sh" "$DEV" >>"$LOG" 2>&1 || { echo "FlashInfer install failed" | tee -a "$LOG"; exit 1; }
    export PYTHONPATH=$PWD:$PYTHONPATH
    step 200 python3 -u -m pytest -q --noconftest test/gpu/test_perf_gpu.py test/gpu/test_cache_gpu.py \
      test/gpu/test_multi_stream_gpu.py test/model/test_perf_graphed.py
    mkdir -p "$OUT/fi_aot"
    find /tmp/fiws -name '*.so' -size -16M 2>/dev/null | head -5 | xargs -r -I{} cp {} "$OUT/fi_aot/"
    step 110 python3 -u $STARTUP --frames 300 --push overlapped --record "$OUT/startup_h200.json"
    step 60 python3 -u $STARTUP --frames 300 --push sync --record "$OUT/startup_h200.json"
    step 60 python3 -u $STARTUP --frames 300 --push overlapped --depth-every-n 2 \
      --record "$OUT/startup_h200.json"
    (cd benchmarks && step 130 python3 -u multi_camera.py --device cuda --preset lingbot-map --height 378 \
      --width 518 --cameras 1,2,4 --frames 40 --warmup 5 --cache-dir /tmp/cc \
      --record "$OUT/multi_camera_h200.json")
    ;;
  long)
    export PYTHONPATH=$PWD:${PYTHONPATH:-}
    step 420 python3 -u $STARTUP --frames 5000 --push overlapped --record "$OUT/startup_h200.json"
    ;;
  node)
    . "$DEV/device_ros_env.sh" "$DEV/rosw" >>"$LOG" 2>&1 || { echo "ROS env failed" | tee -a "$LOG"; exit 1; }
    NODE="/tmp/rv/bin/python -u benchmarks/node_e2e.py --set model.compile_cache_dir=/tmp/cc --out /tmp/ne"
    step 200 $NODE --rates 60,30 --seconds 15 --settle-s 5 --segments 3 --record "$OUT/node_e2e_h200.json"
    step 120 $NODE --rates 60,30 --seconds 12 --settle-s 4 --set depth.every_n=2 \
      --record "$OUT/node_e2e_h200.json"
    step 120 $NODE --rates 60,30 --seconds 12 --settle-s 4 --set inference.overlap=false \
      --record "$OUT/node_e2e_h200.json"
    ;;
  node-ab)
    # BEFORE: a `git archive --format=tar.gz` of the other commit (package, config, benchmarks/node_e2e.py and
    # results.py), COMMIT_BEFORE its commit; this tree's commit comes from $LINGBOT_COMMIT.
    BEFORE_TGZ=${2:?node-ab BEFORE.tar.gz COMMIT_BEFORE}
    rm -rf /tmp/before && mkdir -p /tmp/before && tar -xzf "$BEFORE_TGZ" -C /tmp/before
    echo "${3:?COMMIT_BEFORE}" > /tmp/before/COMMIT
    echo "${LINGBOT_COMMIT:?}" > COMMIT
    . "$DEV/device_ros_env.sh" "$DEV/rosw" >>"$LOG" 2>&1 || { echo "ROS env failed" | tee -a "$LOG"; exit 1; }
    SITE=$(with_gtsam "${PYTHONPATH#*:}")
    unset LINGBOT_COMMIT
    for tree in "$PWD" /tmp/before "$PWD"; do
      (cd "$tree" && export PYTHONPATH=$tree:$SITE && echo "tree $tree commit $(cat COMMIT)" | tee -a "$LOG" &&
        step 170 /tmp/rv/bin/python -u benchmarks/node_e2e.py --set model.compile_cache_dir=/tmp/cc \
          --out "/tmp/ne_$(cat COMMIT)" --rates 60,30 --seconds 12 --settle-s 5 \
          --record "$OUT/node_e2e_ab_h200.json")
    done
    rm -f COMMIT
    ;;
  cameras)
    # Issue 33, `cameras [bench | node | all]` (default all). FlashInfer's wheels and the ROS wheels do not fit
    # in one carry (64 MiB), so two calls: `cameras bench` carrying .device/whl (+ fi_aot), `cameras node`
    # carrying .device/rosw (+ device_ros_env.sh); whatever is not carried is skipped (the tests say so, -rs).
    #   bench: the batched-graph + multi-stream GPU tests (FlashInfer and the default backend), then
    #          multi_camera.py 1,2,4 cameras, default backend, compiled, graphed batched steps, rounds
    #          unpipelined and pipelined (--overlap both) side by side, the single-stream rows (push,
    #          push_overlapped) last in the same process.
    #   node:  test_node_cameras_gpu.py (synchronous and pipelined rounds; its FlashInfer cases skip without
    #          the FlashInfer wheels) + the multi-stream GPU tests, then node_e2e.py with cameras [front, rear]
    #          at 15 Hz each, the defaults (pipelined rounds): each camera's % posed (>= 99 % asked).
    PART=${2:-all}
    if [[ -d "$DEV/whl" ]]; then
      . "$DEV/device_env.sh" "$DEV" >>"$LOG" 2>&1 || echo "FlashInfer install failed" | tee -a "$LOG"
    fi
    if [[ $PART != bench ]]; then
      . "$DEV/device_ros_env.sh" "$DEV/rosw" >>"$LOG" 2>&1 || { echo "ROS env failed" | tee -a "$LOG"; exit 1; }
    fi
    export PYTHONPATH=$PWD:${PYTHONPATH:-}
    if [[ $PART != node ]]; then
      step 150 python3 -u -m pytest -q -rs --noconftest test/gpu/test_batched_graphs_gpu.py \
        test/gpu/test_multi_stream_gpu.py
      (cd benchmarks && step 330 python3 -u multi_camera.py --device cuda --preset lingbot-map --height 378 \
        --width 518 --cameras 1,2,4 --frames 60 --warmup 70 --batch-graphs on --overlap both \
        --cache-dir /tmp/cc --profile-rounds 5 --record "$OUT/multi_camera_h200.json")
    fi
    if [[ $PART != bench ]]; then
      step 200 /tmp/rv/bin/python -u -m pytest -q -rs -s test/gpu/test_node_cameras_gpu.py \
        test/gpu/test_multi_stream_gpu.py
      step 240 /tmp/rv/bin/python -u benchmarks/node_e2e.py --set model.compile_cache_dir=/tmp/cc \
        --cameras front,rear --rates 15 --seconds 20 --settle-s 8 --out /tmp/ne_cams \
        --record "$OUT/node_e2e_cameras_h200.json"
      grep -E "configured|Traceback|Error|restarted" /tmp/ne_cams/node_e2e.log | tail -5 | tee -a "$LOG"
    fi
    ;;
  loop-ab)
    . "$DEV/device_ros_env.sh" "$DEV/rosw" >>"$LOG" 2>&1 || { echo "ROS env failed" | tee -a "$LOG"; exit 1; }
    PYTHONPATH=$(with_gtsam "$PYTHONPATH")
    export PYTHONPATH
    RV_PY=${RV_PY:-/tmp/rv/bin/python}
    "$RV_PY" -c "import gtsam, rclpy; print('gtsam', gtsam.__file__)" 2>&1 | tee -a "$LOG"
    for enabled in true false true; do
      # shellcheck disable=SC2086 # LOOP_AB_ARGS: extra arguments, split on purpose
      step 200 "$RV_PY" -u benchmarks/node_e2e.py --set model.compile_cache_dir=/tmp/cc \
        --set loop_closure.enabled=$enabled --out "/tmp/ne_loop_$enabled" --rates 60,30 \
        --seconds "${LOOP_AB_SECONDS:-25}" --settle-s 4 --segments 5 ${LOOP_AB_ARGS:-} \
        --record "$OUT/node_e2e_loop_ab_h200.json"
      grep -E "re-anchored|loop|Traceback|Error" "/tmp/ne_loop_$enabled/node_e2e.log" | tail -5 | tee -a "$LOG"
    done
    ;;
  verify)
    export PYTHONPATH=$PWD:${PYTHONPATH:-}
    step 150 python3 -u -m pytest -q -rs --noconftest test/gpu/test_verify_graph_gpu.py
    step 240 python3 -u benchmarks/verify_pass.py --cache-dir /tmp/cc --record "$OUT/verify_pass_h200.json"
    step 150 python3 -u benchmarks/verify_pass.py --cache-dir /tmp/cc --live-priority high \
      --record "$OUT/verify_pass_h200.json"
    ;;
  reanchor)
    # issue 31, re-anchors prepared beside the stream: node_e2e.py with the defaults (loop closure on) and
    # kv_cache.reanchor_steps 24 at 30 Hz for REANCHOR_SECONDS (70: 2,100 frames, 6-7 re-anchors), the
    # per-frame re-anchor wait (`reanchor.wait_max_ms`) and the latency around it; then the one-step re-anchor
    # (reanchor_steps 0) for 30 s, the before; then reanchor_wait.py on the session alone (1,000 frames at the
    # camera's pace, 3 re-anchors per setting). Same carry and setup as loop-ab (rosw, gt, device_ros_env.sh,
    # src); there `cd .device/<you>/src && bash benchmarks/h200_call.sh reanchor`.
    . "$DEV/device_ros_env.sh" "$DEV/rosw" >>"$LOG" 2>&1 || { echo "ROS env failed" | tee -a "$LOG"; exit 1; }
    PYTHONPATH=$(with_gtsam "$PYTHONPATH")
    export PYTHONPATH
    RV_PY=${RV_PY:-/tmp/rv/bin/python}
    for steps in 24 0; do
      seconds=${REANCHOR_SECONDS:-70}
      [[ $steps == 0 ]] && seconds=30
      # shellcheck disable=SC2086 # REANCHOR_ARGS: extra arguments, split on purpose
      step 200 "$RV_PY" -u benchmarks/node_e2e.py --set model.compile_cache_dir=/tmp/cc \
        --set kv_cache.reanchor_steps=$steps --out "/tmp/ne_reanchor_$steps" --rates 30 --seconds "$seconds" \
        --settle-s 4 --segments 7 ${REANCHOR_ARGS:-} --record "$OUT/node_e2e_reanchor_h200.json"
      grep -E "re-anchored|Traceback|Error" "/tmp/ne_reanchor_$steps/node_e2e.log" | tail -4 | tee -a "$LOG"
    done
    (cd benchmarks && step 170 python3 -u reanchor_wait.py --device cuda --preset lingbot-map --frames 1000 \
      --max-stored-frames 320 --reanchor-steps 0,12,24 --record "$OUT/reanchor_wait_h200.json")
    ;;
  gpu-node)
    . "$DEV/device_ros_env.sh" "$DEV/rosw" >>"$LOG" 2>&1 || { echo "ROS env failed" | tee -a "$LOG"; exit 1; }
    PYTHONPATH=$(with_gtsam "$PYTHONPATH")
    export PYTHONPATH
    step 400 /tmp/rv/bin/python -u -m pytest -q -rs test/gpu/test_node_cameras_gpu.py \
      test/gpu/test_multi_stream_gpu.py
    ;;
  bench6)
    . "$DEV/device_env.sh" "$DEV" >>"$LOG" 2>&1 || echo "FlashInfer install failed" | tee -a "$LOG"
    export PYTHONPATH=$PWD:${PYTHONPATH:-}
    (cd benchmarks && step 300 python3 -u multi_camera.py --device cuda --preset lingbot-map --height 378 \
      --width 518 --cameras 1,2,4 --frames 50 --warmup 70 --batch-graphs on --overlap both \
      --cache-dir /tmp/cc --profile-rounds 3 --record "$OUT/multi_camera_h200.json")
    step 170 python3 -u -m pytest -q -rs --noconftest test/gpu/test_batched_graphs_gpu.py \
      test/gpu/test_multi_stream_gpu.py test/gpu/test_verify_graph_gpu.py
    step 110 python3 -u benchmarks/verify_pass.py --cache-dir /tmp/cc --passes 20 --live-frames 80 \
      --record "$OUT/verify_pass_h200.json"
    ;;
  node6)
    . "$DEV/device_ros_env.sh" "$DEV/rosw" >>"$LOG" 2>&1 || { echo "ROS env failed" | tee -a "$LOG"; exit 1; }
    PYTHONPATH=$(with_gtsam "$PWD:$PYTHONPATH")
    export PYTHONPATH
    NODE="/tmp/rv/bin/python -u benchmarks/node_e2e.py --set model.compile_cache_dir=/tmp/cc"
    for enabled in true false true; do
      step 100 $NODE --set loop_closure.enabled=$enabled --out "/tmp/ne_loop_$enabled" --rates 60,30 \
        --seconds 12 --settle-s 4 --segments 3 --record "$OUT/node_e2e_loop_ab_h200.json"
      grep -E "Traceback|Error" "/tmp/ne_loop_$enabled/node_e2e.log" | tail -3 | tee -a "$LOG"
    done
    for steps in 24 0; do  # re-anchors prepared over 24 frames (opt-in) vs the one-step re-anchor (default)
      seconds=60
      [[ $steps == 0 ]] && seconds=40
      step 130 $NODE --set kv_cache.reanchor_steps=$steps --out "/tmp/ne_reanchor_$steps" --rates 30 \
        --seconds $seconds --settle-s 4 --segments 6 --record "$OUT/node_e2e_reanchor_h200.json"
    done
    step 90 $NODE --cameras front,rear --rates 15 --seconds 15 --settle-s 6 --out /tmp/ne_cams \
      --record "$OUT/node_e2e_cameras_h200.json"
    step 100 /tmp/rv/bin/python -u -m pytest -q -rs -s test/gpu/test_node_cameras_gpu.py
    ;;
  *)
    echo "unknown MODE $MODE" >&2
    exit 2
    ;;
esac
echo "== $(date -u +%T) done" | tee -a "$LOG"
