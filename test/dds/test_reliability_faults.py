"""Faults over real DDS (node subprocess, tiny preset on CPU): bad checkpoints, out-of-memory / NaN / errors
in a step (injected through `LINGBOT_MAP_FAULTS`, test/fault_injection.py), services racing inference and each
other, atomic ~/save_map files, SIGINT during a step (docs/reliability.md)."""

from __future__ import annotations

import random
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from attack_helpers import collect, latest_values, warm_up
from builtin_interfaces.msg import Time
from diagnostic_msgs.msg import DiagnosticArray
from lifecycle_msgs.msg import State, Transition
from lifecycle_msgs.srv import ChangeState, GetState
from nav_msgs.msg import Odometry
from rclpy.parameter import Parameter
from rclpy.parameter_client import AsyncParameterClient
from rclpy.qos import QoSProfile, ReliabilityPolicy
from ros_helpers import RosClient, load_frames, start_tiny_node
from sensor_msgs.msg import Image
from std_msgs.msg import Header
from std_srvs.srv import Trigger

from lingbot_map_ros.engine.mapping.voxel_map import read_tum
from lingbot_map_ros.model import LingBotMap, ModelConfig
from lingbot_map_ros.ros.lifecycle.shutdown import SHUTDOWN_GRACE_S
from lingbot_map_ros.ros.messages.conversions import rgb_to_image

pytestmark = pytest.mark.dds

RELIABLE = QoSProfile(depth=200, reliability=ReliabilityPolicy.RELIABLE)
S0 = 2
#: What these tests change of the base parameters (`TINY_NODE_PARAMS`).
FAULT_PARAMS = {
    "kv_cache.scale_frames": S0,
    "qos.depth": 100,
    "diagnostics_rate": 20.0,
    "publish.frame_cloud": False,
    "publish.depth": False,
}


def stamp(i: int) -> Time:
    return Time(sec=3000 + i // 10, nanosec=(i % 10) * 100_000_000)


def stamps(msgs: list[Odometry]) -> list[tuple[int, int]]:
    return [(m.header.stamp.sec, m.header.stamp.nanosec) for m in msgs]


def expect(indices: list[int]) -> list[tuple[int, int]]:
    return [(stamp(i).sec, stamp(i).nanosec) for i in indices]


@pytest.fixture(scope="module")
def frames() -> list[np.ndarray]:
    return load_frames(8, step=6)


def publish(pub: object, frames: list[np.ndarray], indices: range, period: float = 0.05) -> None:
    for i in indices:
        pub.publish(rgb_to_image(frames[i % len(frames)], Header(stamp=stamp(i), frame_id="cam")))
        time.sleep(period)


# ------------------------------------------------------------------------------------------- checkpoints
@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """valid / truncated / wrong (a key missing, a shape changed) tiny checkpoints, and a missing path."""
    tmp = tmp_path_factory.mktemp("checkpoints")
    torch.manual_seed(0)
    state = LingBotMap(ModelConfig.preset("tiny")).state_dict()
    valid = tmp / "tiny.pt"
    torch.save(state, valid)
    truncated = tmp / "truncated.pt"
    truncated.write_bytes(valid.read_bytes()[: valid.stat().st_size // 2])
    wrong_state = dict(state)
    first, second = list(wrong_state)[:2]
    del wrong_state[first]
    wrong_state[second] = torch.zeros(3, 3)
    wrong = tmp / "wrong.pt"
    torch.save(wrong_state, wrong)
    return {"valid": valid, "truncated": truncated, "wrong": wrong, "missing": tmp / "missing.pt"}


def test_bad_checkpoint_with_autostart_exits_nonzero_with_one_error(
    tmp_path: Path, checkpoints: dict[str, Path]
) -> None:
    procs = {
        kind: start_tiny_node(
            tmp_path, f"ckpt_{kind}", FAULT_PARAMS, {"model.checkpoint": str(checkpoints[kind])}
        )
        for kind in ("missing", "truncated", "wrong")
    }
    for kind, proc in procs.items():
        code = proc.proc.wait(90)
        proc.stop()
        out = proc.output()
        assert code == 1, (kind, out)
        assert out.count("configure failed: cannot load model.checkpoint") == 1, (kind, out)
        assert "autostart failed" in out and "Traceback" not in out, (kind, out)
    assert "does not exist" in procs["missing"].output()
    assert "does not match the model" in procs["wrong"].output()


def test_bad_checkpoint_in_lifecycle_stays_unconfigured_until_a_good_one(
    ros_client: RosClient, tmp_path: Path, checkpoints: dict[str, Path], frames: list[np.ndarray]
) -> None:
    node = "/ckpt_lc/ckpt_lc"
    missing = {"autostart": False, "model.checkpoint": str(checkpoints["missing"])}
    proc = start_tiny_node(tmp_path, "ckpt_lc", FAULT_PARAMS, missing)
    try:
        assert ros_client.client(ChangeState, f"{node}/change_state").wait_for_service(timeout_sec=60)

        def transition(transition_id: int) -> bool:
            request = ChangeState.Request(transition=Transition(id=transition_id))
            return ros_client.call(ChangeState, f"{node}/change_state", request, timeout=60).success

        def state() -> int:
            return ros_client.call(GetState, f"{node}/get_state").current_state.id

        for kind in ("missing", "truncated", "wrong"):
            (result,) = ros_client.set_parameters(node, {"model.checkpoint": str(checkpoints[kind])})
            assert result.successful, result.reason  # reload-only parameters may change while unconfigured
            assert not transition(Transition.TRANSITION_CONFIGURE), kind
            assert state() == State.PRIMARY_STATE_UNCONFIGURED and proc.alive(), kind
        assert proc.output().count("configure failed: cannot load model.checkpoint") == 3
        (result,) = ros_client.set_parameters(node, {"model.checkpoint": str(checkpoints["valid"])})
        assert result.successful
        assert transition(Transition.TRANSITION_CONFIGURE) and transition(Transition.TRANSITION_ACTIVATE)
        assert state() == State.PRIMARY_STATE_ACTIVE
        odom = collect(ros_client, Odometry, f"{node}/odometry")
        pub = ros_client.publisher(Image, "/ckpt_lc/image", RELIABLE)
        ros_client.wait_for_subscribers(pub)
        publish(pub, frames, range(S0 + 1))
        assert stamps(odom.wait_for(S0 + 1)) == expect(list(range(S0 + 1)))
    finally:
        assert proc.stop() == 0, proc.output()


# ------------------------------------------------------------------------------------ faults in a step
def test_oom_nan_and_errors_drop_the_frame_reset_the_cache_and_keep_mapping(
    ros_client: RosClient, tmp_path: Path, frames: list[np.ndarray]
) -> None:
    # model.step calls: 1 = anchor (frames 0, 1); frame k >= 2 -> call k - 1 until frame 5 (call 5, OOM);
    # frame 6 re-anchors (call 6) and steps (7); frame 7 -> call 8 (NaN); frame 8 re-anchors (9), steps (10);
    # frames 9..11 -> calls 11..13; after ~/reset the anchor step of frames 12, 13 is call 14 (error).
    name = "faults"
    proc = start_tiny_node(tmp_path, name, FAULT_PARAMS, faults="oom@5,nan@8,error@14")
    try:
        proc.wait_ready(ros_client, [f"/{name}/{name}/reset"])
        odom = collect(ros_client, Odometry, f"/{name}/{name}/odometry")
        diag = collect(ros_client, DiagnosticArray, "/diagnostics")
        pub = ros_client.publisher(Image, f"/{name}/image", RELIABLE)
        ros_client.wait_for_subscribers(pub)
        publish(pub, frames, range(5))
        odom.wait_for(5)
        # the map thread integrates after the poses are out (issue 13): wait for it too
        before = latest_values(
            diag,
            name,
            lambda v: v.get("session.last_frame.index") == "4" and int(v.get("map_points", "0")) > 0,
        )
        publish(pub, frames, range(5, 12))
        survivors = [0, 1, 2, 3, 4, 6, 8, 9, 10, 11]
        msgs = odom.wait_for(len(survivors))
        time.sleep(0.3)
        assert stamps(odom.messages) == expect(survivors)  # exactly the failed frames were dropped
        assert all(np.isfinite([m.pose.pose.position.x, m.pose.pose.orientation.w]).all() for m in msgs)
        after = latest_values(diag, name, lambda v: v.get("session.last_frame.index") == "9")
        assert after["failed_OutOfMemoryError"] == "1" and after["failed_NonFiniteOutputError"] == "1"
        assert after["session.recoveries_total"] == "2" and after["session.segment"] == "2"
        assert after["session.epoch"] == before["session.epoch"]  # same map frame: the map was kept
        assert int(after["map_points"]) >= int(before["map_points"]) > 0
        log = proc.output()
        assert "inference failed (OutOfMemoryError, 1 so far), frame skipped, caches reset" in log
        assert "inference failed (NonFiniteOutputError, 1 so far)" in log and "non-finite pose" in log

        assert ros_client.call(Trigger, f"/{name}/{name}/reset").success
        odom.clear()
        publish(pub, frames, range(12, 16))  # the first anchor step fails: a new anchor phase starts
        assert stamps(odom.wait_for(2)) == expect([14, 15])
        final = latest_values(
            diag, name, lambda v: v.get("failed_RuntimeError") == "1" and v.get("session.phase") == "2"
        )
        assert int(final["session.epoch"]) == int(before["session.epoch"]) + 2
        assert "the stream restarts with a new anchor phase" in proc.output()
        assert proc.alive()
    finally:
        assert proc.stop() == 0, proc.output()


# ----------------------------------------------------------------------------- services racing inference
def check_complete(path: Path) -> None:
    """A ~/save_map file must be whole whenever it is visible under its final name."""
    data = path.read_bytes()
    if path.suffix == ".ply":
        end = data.index(b"end_header\n") + len(b"end_header\n")
        count = next(
            int(line.split()[2]) for line in data[:end].split(b"\n") if line.startswith(b"element vertex")
        )
        assert len(data) == end + 15 * count, f"{path.name}: {len(data)} bytes for {count} vertices"
    else:
        assert data.startswith(b"# timestamp") and data.endswith(b"\n"), path.name
        stamps_s, rows = read_tum(path)
        assert rows.shape[1] == 7 and len(stamps_s) == data.count(b"\n") - 1


def test_reset_and_save_map_race_inference_and_each_other_safely(
    ros_client: RosClient, tmp_path: Path, frames: list[np.ndarray]
) -> None:
    name = "races"
    out_dir = tmp_path / "maps"
    params = {
        "output_dir": str(out_dir),
        "map.stride": 1,
        "map.voxel_size": 0.0005,
        "map.max_points": 400000,
        "kv_cache.max_window": 64,
    }  # room for the live windows 1..64 set below
    proc = start_tiny_node(tmp_path, name, FAULT_PARAMS, params)
    try:
        proc.wait_ready(ros_client, [f"/{name}/{name}/reset", f"/{name}/{name}/save_map"])
        odom = collect(ros_client, Odometry, f"/{name}/{name}/odometry")
        pub = ros_client.publisher(Image, f"/{name}/image", RELIABLE)
        ros_client.wait_for_subscribers(pub)
        stop = threading.Event()
        seen: dict[str, int] = {}
        problems: list[str] = []

        def stream() -> None:  # inference all along, 20 Hz
            i = 100
            while not stop.is_set():
                publish(pub, frames, range(i, i + 1))
                i += 1

        def watch() -> None:  # a reader that opens every final-named file the moment it appears
            while not stop.is_set():
                for path in list(out_dir.glob("map_*.ply")) + list(out_dir.glob("trajectory_*.tum")):
                    if path.name not in seen:
                        try:
                            check_complete(path)
                            seen[path.name] = path.stat().st_size
                        except Exception as exc:  # noqa: BLE001 - recorded and asserted below
                            problems.append(f"{type(exc).__name__}: {exc}")
                            seen[path.name] = -1
                time.sleep(0.001)

        responses: list[tuple[str, bool, str]] = []

        def caller(client: object, service: str, calls: int, seed: int) -> None:
            rng = random.Random(seed)
            for _ in range(calls):
                future = client.call_async(Trigger.Request())
                deadline = time.monotonic() + 30
                while not future.done() and time.monotonic() < deadline:
                    time.sleep(0.002)
                response = future.result()
                responses.append((service, response.success, response.message))
                time.sleep(rng.uniform(0.0, 0.15))

        windows: list[tuple[int, bool]] = []
        params_client = AsyncParameterClient(ros_client.node, f"/{name}/{name}")
        assert params_client.wait_for_services(timeout_sec=10)

        def resize_window(calls: int) -> None:  # the live kv_cache.sliding_window, changed mid-inference
            rng = random.Random(7)
            for _ in range(calls):
                value = rng.randint(1, 64)
                future = params_client.set_parameters([Parameter("kv_cache.sliding_window", value=value)])
                deadline = time.monotonic() + 30
                while not future.done() and time.monotonic() < deadline:
                    time.sleep(0.002)
                windows.append((value, future.result().results[0].successful))
                time.sleep(rng.uniform(0.0, 0.15))

        # DDS discovery is not symmetric: frames sent the moment the node's reader is seen can still be lost
        # (seen: 0 of 8 odometry, on main too), so warm up until odometry flows, then count; warm-up stamps
        # lie before every stamp below, however many frames it takes
        warm_up(
            pub, odom, lambda i: rgb_to_image(frames[i % 8], Header(stamp=stamp(i - 1000), frame_id="cam"))
        )
        odom.clear()
        publish(pub, frames, range(60, 60 + S0 + 6))
        odom.wait_for(S0 + 6)
        assert ros_client.call(Trigger, f"/{name}/{name}/save_map").success
        (first_map,) = out_dir.glob("map_*.ply")
        check_complete(first_map)
        # The races below reset every ~0.1 s, faster than an anchor phase refills the map, so the real map is
        # checked here, before them; during them only wholeness and success are checked.
        assert first_map.stat().st_size > 10_000
        threads = [threading.Thread(target=stream), threading.Thread(target=watch)]
        threads.append(threading.Thread(target=resize_window, args=(12,)))
        for k, service in enumerate(("save_map", "save_map", "reset", "reset")):
            client = ros_client.node.create_client(Trigger, f"/{name}/{name}/{service}")
            assert client.wait_for_service(timeout_sec=10)
            threads.append(threading.Thread(target=caller, args=(client, service, 12, k)))
        for t in threads:
            t.start()
        for t in threads[2:]:
            t.join(120)
        time.sleep(0.3)
        stop.set()
        for t in threads[:2]:
            t.join(10)
        # a save_map right after a reset finds 0 points: answered false with that reason, nothing written
        empty = [r for r in responses if r[0] == "save_map" and not r[1] and "the map has 0 points" in r[2]]
        failed = [r for r in responses if not r[1] and r not in empty]
        assert len(responses) == 48 and not failed, failed
        assert len(windows) == 12 and all(ok for _, ok in windows), windows
        assert not problems, problems
        saved = [r[2] for r in responses if r[0] == "save_map" and r[1]]
        assert len(seen) == 2 * (len(saved) + 1) and all(size > 0 for size in seen.values())
        assert not list(out_dir.glob(".*.tmp"))  # no temp file left behind
        print(
            f"\nraces: {len(responses)} service calls, {len(windows)} window changes, {len(seen)} files read "
            "at first sight, 0 partial, "
            f"largest {max(seen.values())} B"
        )
        assert ros_client.call(Trigger, f"/{name}/{name}/reset").success
        time.sleep(0.5)  # odometry of frames inferred before the reset may still be on the wire
        odom.clear()
        publish(pub, frames, range(500, 500 + S0 + 2))
        assert stamps(odom.wait_for(S0 + 2)) == expect(list(range(500, 500 + S0 + 2)))  # still mapping
    finally:
        assert proc.stop() == 0, proc.output()


# --------------------------------------------------------------------------------------------- SIGINT
@pytest.mark.parametrize(("faults", "abandons"), [("delay@*:0.5", False), ("delay@1:20", True)])
def test_sigint_during_a_step_exits_cleanly_within_the_grace_period(
    ros_client: RosClient, tmp_path: Path, frames: list[np.ndarray], faults: str, abandons: bool
) -> None:
    name = "sigint_" + ("long" if abandons else "short")
    proc = start_tiny_node(tmp_path, name, FAULT_PARAMS, faults=faults)
    try:
        proc.wait_ready(ros_client, [f"/{name}/{name}/reset"])
        diag = collect(ros_client, DiagnosticArray, "/diagnostics")
        pub = ros_client.publisher(Image, f"/{name}/image", RELIABLE)
        ros_client.wait_for_subscribers(pub)
        latest_values(
            diag, name, lambda v: v.get("frames_received") == "0"
        )  # /diagnostics flows before the step
        publish(pub, frames, range(S0), period=0.0)
        # frame 0 is taken at once (anchor phase collecting), frame 1 runs the anchor step
        latest_values(
            diag,
            name,
            lambda v: v.get("frames_received") == str(S0) and v.get("frames_processed") == str(S0 - 1),
        )
    except BaseException:
        proc.stop(timeout=10)  # never leave a node behind: its /diagnostics would mislead later tests
        raise
    t0 = time.monotonic()
    code = proc.stop(timeout=10)
    elapsed = time.monotonic() - t0
    out = proc.output()
    # the clean shutdown ends within the grace period (no fast exit); since issue 19 it publishes what was
    # inferred and drains the map before the context goes (1.4-2.1 s here, was 0.6-0.8 s when it did not)
    assert code == 0 and elapsed < SHUTDOWN_GRACE_S + 1.0, f"exit {code} after {elapsed:.2f} s:\n{out}"
    assert "clean shutdown complete" in out and "exiting now" not in out, out
    assert "Traceback" not in out
    assert ("exiting without waiting" in out) == abandons
    print(f"\nSIGINT during a step ({faults}): exit 0 after {elapsed:.2f} s")
