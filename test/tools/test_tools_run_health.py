"""`run --tracking-health` (and `batch`, same options): the camera's engine of a run judges every frame as the
node does (engine/camera_state.py): covered frames are lost, inflate the pose covariance and map nothing."""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from lingbot_map_ros.engine.health import TrackingState
from lingbot_map_ros.engine.loop import LoopClosureConfig
from lingbot_map_ros.tools.bags.synthetic_scene import SceneConfig
from lingbot_map_ros.tools.loop.loop_oracle import DriftConfig, LoopScene, image_descriptor
from lingbot_map_ros.tools.loop.reloc_oracle import kidnap_session
from lingbot_map_ros.tools.run.bag import PosedFrames, camera_state, track_frame
from lingbot_map_ros.tools.run.options import RunConfig, add_run_options, run_config


def test_the_flag_turns_health_on_and_a_covered_camera_maps_nothing() -> None:
    parser = argparse.ArgumentParser()
    add_run_options(parser)
    assert not run_config(parser.parse_args([]), None, None).tracking_health
    assert run_config(parser.parse_args(["--tracking-health"]), None, None).tracking_health

    scene = LoopScene.render(SceneConfig(112, 84, 50, seed=9, supersample=1), 1.25)
    session, oracle = kidnap_session(scene, DriftConfig(), frames=60)
    config = RunConfig(Path("bag"), Path("out"), tracking_health=True)
    state = camera_state(config, oracle, image_descriptor, LoopClosureConfig(min_similarity=0.5))
    assert state.health is not None and state.lost_and_found is not None
    posed = PosedFrames()
    black = np.zeros_like(oracle.images[0])

    def push(image: np.ndarray, i: int) -> None:
        for result in session.push(image, meta=i * 100_000_000):  # meta: the stamp in ns (0.1 s apart)
            track_frame(state, result, posed)

    for i in range(30):
        push(oracle.images[i], i)
    report = state.tracking_report()
    assert report is not None and report.state is TrackingState.TRACKING
    points = state.map_side.size()
    assert points > 0
    for i in range(30, 36):
        push(black, i)
    report = state.tracking_report()
    assert report is not None and report.state is TrackingState.LOST and report.inflation >= 100.0
    assert state.map_side.size() == points
    assert len(posed.poses) == 36  # a lost camera is still posed (its covariance says how little to trust it)
