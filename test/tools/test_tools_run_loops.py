"""`run` closes loops with the node's engine (issue 28): a bag mapped by `run_bag` and the same frames fed
through the node's engine path (`CameraPipeline`: one round a frame, the pose stage, the map work as the map
thread does it, the loop closer on its own thread, each frame let through before the next) give the same
loop-corrected trajectory, on the drifting oracle (tools/loop/loop_oracle.py: loops are found and corrected)
and on the tiny model (synthetic weights). `--no-loop-closure` leaves the stream's trajectory."""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from lingbot_map_ros.engine.builder import EngineSpec, build_engine
from lingbot_map_ros.engine.camera_pipeline import CameraPipeline
from lingbot_map_ros.engine.camera_state import CameraState, loop_closer
from lingbot_map_ros.engine.config import SessionConfig
from lingbot_map_ros.engine.loop import LoopClosureConfig
from lingbot_map_ros.engine.loop.descriptor import Describe
from lingbot_map_ros.engine.mapping.writers import read_tum
from lingbot_map_ros.tools.bags.make_bag import MakeBagConfig, write_camera_bag
from lingbot_map_ros.tools.bags.synthetic_scene import SceneConfig
from lingbot_map_ros.tools.loop.loop_oracle import DriftConfig, DriftingOracle, LoopScene, image_descriptor
from lingbot_map_ros.tools.run.bag import run_bag
from lingbot_map_ros.tools.run.options import RunConfig

WIDTH, HEIGHT, FRAMES, TURNS = 112, 84, 40, 1.25  # the node's loop test scene (test/loop_oracle_node.py)
DRIFT = DriftConfig(scale_per_m=0.03, yaw_deg_per_m=3.0)
START_NS, PERIOD_NS = 1_700_000_000_000_000_000, 100_000_000
#: The oracle's streaming policy (tools/loop/loop_oracle.py `oracle_session`).
SESSION = SessionConfig(
    scale_frames=2, sliding_window=4, max_window=4, image_width=WIDTH, max_stored_frames=48, camera_history=12
)
LOOPS = LoopClosureConfig(min_similarity=0.5)
#: Frames of the tiny model's run (its two-frame verification passes are what takes the time).
TINY_FRAMES = 20


@pytest.fixture(scope="module")
def scene_bag(tmp_path_factory: pytest.TempPathFactory) -> tuple[LoopScene, Path]:
    scene = LoopScene.render(
        SceneConfig(width=WIDTH, height=HEIGHT, frames=FRAMES, seed=18, supersample=1), TURNS
    )
    path = tmp_path_factory.mktemp("loops") / "scene"
    write_camera_bag(
        MakeBagConfig(output=path, storage="sqlite3", rate_hz=10.0, start_time_ns=START_NS, compressed="png"),
        iter(scene.images),
        total=FRAMES,
    )
    return scene, path


class EngineSink:
    """The node's `PoseSink` reduced to its engine part: the camera's `CameraState`, the map work integrated
    as the map thread does (`MapSide.integrate`)."""

    def __init__(self, state: CameraState) -> None:
        self.state = state

    @contextmanager
    def pose_round(self, stream: object):  # noqa: ANN201
        yield self.state

    def where(self, result) -> tuple[str, float]:  # noqa: ANN001
        return "", result.meta / 1e9

    def delivered(self, posed) -> None:  # noqa: ANN001
        for item in posed:
            assert item.frame is not None, f"untracked: {item.missing}"
            self.state.map_side.integrate(item.frame.work)


def node_path(
    scene: LoopScene, oracle: bool, describe: Describe | None, frames: int = FRAMES
) -> tuple[np.ndarray, np.ndarray, CameraState]:
    """The scene's first `frames` frames through the node's engine path; (stamps [N] s, rows [N, 7], the
    camera's state)."""
    cameras = build_engine(EngineSpec(preset="tiny", device="cpu", seed=0, session=SESSION))
    if oracle:
        cameras.model = DriftingOracle(cameras.model, scene, DRIFT, seed=0)  # the engine's model seam
    state = CameraState(RunConfig(Path("bag"), Path("out")).mapper_config())
    state.attach_loop(loop_closer(LOOPS, WIDTH, cameras.model, describe), threaded=True)
    errors: list[Exception] = []
    pipeline = CameraPipeline(
        cameras, {"": EngineSink(state)}, lambda meta: 0, lambda name, e: errors.append(e)
    )
    try:
        for i, image in enumerate(scene.images[:frames]):
            pipeline.step({"": (image, START_NS + i * PERIOD_NS)}, overlap=False, depth={""})
            assert pipeline.wait_delivered(30.0)
            state.join_loop(30.0)  # a pace that lets every frame (and its loop) through
    finally:
        pipeline.stop(5.0)
        state.stop()
    assert not errors, errors
    stamps, rows = state.mapper.trajectory.full_history()
    return stamps, rows, state


def run_path(
    scene: LoopScene,
    bag: Path,
    out: Path,
    oracle: bool,
    describe: Describe | None,
    loops: bool,
    frames: int = FRAMES,
):  # noqa: ANN201
    """`run_bag` on the scene's bag's first `frames` frames (over the oracle: its model seam); (stamps,
    rows, RunResult)."""
    config = RunConfig(bag, out, session=SESSION, max_frames=frames, progress=False, loop_closure=loops)
    model = None
    if oracle:
        inner = build_engine(EngineSpec(preset="tiny", device="cpu", seed=0, session=SESSION)).model
        model = DriftingOracle(inner, scene, DRIFT, seed=0)
    result = run_bag(config, model, describe=describe, loop_config=LOOPS)
    stamps, rows = read_tum(out / "trajectory.tum")
    return stamps, rows, result


def test_run_and_the_node_engine_close_the_oracle_loop_alike(scene_bag, tmp_path: Path) -> None:  # noqa: ANN001
    scene, bag = scene_bag
    stamps, rows, result = run_path(scene, bag, tmp_path / "run", True, image_descriptor, True)
    node_stamps, node_rows, state = node_path(scene, True, image_descriptor)
    loops = result.loop_closure
    assert loops["loops_accepted"] >= 1 and len(loops["corrections"]) >= 1, loops
    assert state.loop_summary()["loops_accepted"] == loops["loops_accepted"]
    assert len(state.corrections) == len(loops["corrections"])
    np.testing.assert_allclose(stamps, node_stamps, atol=1e-6)
    np.testing.assert_allclose(rows[:, :3], node_rows[:, :3], atol=1e-5)  # TUM text: 1e-6 m digits
    # the correction moved the trajectory: off, run writes the stream's own poses
    _, plain, plain_result = run_path(scene, bag, tmp_path / "plain", True, image_descriptor, False)
    assert plain_result.loop_closure == {"enabled": False}
    assert np.abs(plain[:, :3] - rows[:, :3]).max() > 0.05


def test_run_and_the_node_engine_agree_on_the_tiny_model(scene_bag, tmp_path: Path) -> None:  # noqa: ANN001
    scene, bag = scene_bag
    stamps, rows, result = run_path(scene, bag, tmp_path / "run", False, None, True, TINY_FRAMES)
    node_stamps, node_rows, state = node_path(scene, False, None, TINY_FRAMES)
    assert result.loop_closure["keyframes"] >= 2, result.loop_closure
    assert state.loop_summary() == result.loop_closure
    np.testing.assert_allclose(stamps, node_stamps, atol=1e-6)
    np.testing.assert_allclose(rows[:, :3], node_rows[:, :3], atol=1e-5)


def test_no_loop_closure_reports_it_off(scene_bag, tmp_path: Path) -> None:  # noqa: ANN001
    scene, bag = scene_bag
    config = RunConfig(bag, tmp_path / "off", session=SESSION, progress=False, max_frames=6)
    result = run_bag(replace(config, loop_closure=False))
    assert result.loop_closure == {"enabled": False} and len(result.stamps_s) == 6
