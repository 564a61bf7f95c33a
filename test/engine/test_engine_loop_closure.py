"""Loop closure (issue 23): the pose graph, the keyframe voxels, the real model's descriptor and verification
pass, and `loop-eval` on the drifting oracle (docs/loop_closure.md)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from lingbot_map_ros.engine.builder import EngineSpec, build_engine
from lingbot_map_ros.engine.config import SessionConfig
from lingbot_map_ros.engine.geometry import Sim3
from lingbot_map_ros.engine.loop import (
    Edge,
    EdgeSigma,
    KeyframeVoxels,
    LoopCloser,
    LoopClosureConfig,
    ModelDescriptor,
    PairVerifier,
    PoseGraph,
)
from lingbot_map_ros.engine.loop.similarity import between, compose
from lingbot_map_ros.tools.bags.synthetic_scene import SceneConfig
from lingbot_map_ros.tools.loop.loop_eval import LoopEvalConfig, evaluate
from lingbot_map_ros.tools.loop.loop_oracle import LoopScene


def _yaw(angle: float) -> np.ndarray:
    c, s = np.cos(angle), np.sin(angle)
    return np.array([[c, 0, s], [0, 1, 0], [-s, 0, c]])


def test_pose_graph_undoes_drift_and_drops_a_wrong_loop_edge() -> None:
    """A circle of 40 keyframes measured with yaw and scale drift; one true loop edge (last -> first) and one
    wrong one: the optimised poses come back to the truth, the wrong edge is removed as an outlier."""
    n = 40
    truth = [
        Sim3(
            _yaw(2 * np.pi * i / n),
            np.array([3 * np.sin(2 * np.pi * i / n), 0, 3 * np.cos(2 * np.pi * i / n)]),
        )
        for i in range(n)
    ]
    graph = PoseGraph()
    drifted = truth[0]
    graph.add_node(0, drifted)
    for i in range(1, n):
        step = between(truth[i - 1], truth[i])
        measured = Sim3(_yaw(0.01) @ step.rotation, 1.02 * step.translation, 1.0)  # drift in every step
        drifted = compose(drifted, measured)
        graph.add_node(i, drifted)
        graph.add_edge(Edge(i - 1, i, measured, EdgeSigma(0.02, 0.05, 0.02)))
    before = np.mean([np.linalg.norm(graph.poses[i].translation - truth[i].translation) for i in range(n)])
    loop = EdgeSigma(0.005, 0.01, 0.005)
    graph.add_edge(Edge(0, n - 1, between(truth[0], truth[n - 1]), loop, loop=True))
    wrong = Sim3(_yaw(2.0), np.array([2.0, 0.0, -1.0]), 1.0)
    graph.add_edge(Edge(10, 30, wrong, loop, loop=True))
    result = graph.optimize()
    poses = graph.poses
    # the first node is fixed at the truth's first pose, so the poses compare directly
    after = np.mean([np.linalg.norm(poses[i].translation - truth[i].translation) for i in range(n)])
    assert after < 0.3 * before, (before, after)
    assert [(e.a, e.b) for e in result.outliers] == [(10, 30)]
    assert [(e.a, e.b) for e in graph.loop_edges] == [(0, n - 1)]


def test_keyframe_voxels_moved_equal_voxels_built_at_the_new_poses() -> None:
    """Moving two of three keyframes re-places only their points: the voxels equal a fresh build."""
    rng = np.random.default_rng(0)
    clouds = [(rng.uniform(-1, 1, (500, 3)), rng.integers(0, 255, (500, 3))) for _ in range(3)]
    poses = [Sim3(_yaw(0.1 * i), np.array([0.2 * i, 0, 0]), 1.0) for i in range(3)]
    moved = [
        poses[0],
        Sim3(_yaw(0.5), np.array([0.1, 0.3, 0]), 1.1),
        Sim3(_yaw(-0.2), np.array([1, 0, 2.0]), 0.9),
    ]
    incremental, fresh = KeyframeVoxels(0.05), KeyframeVoxels(0.05)
    for key, ((xyz, rgb), pose) in enumerate(zip(clouds, poses, strict=True)):
        incremental.place(key, pose.apply_points(xyz), rgb)
    for key in (1, 2):
        incremental.place(key, moved[key].apply_points(clouds[key][0]), clouds[key][1])
    for key, ((xyz, rgb), pose) in enumerate(zip(clouds, moved, strict=True)):
        fresh.place(key, pose.apply_points(xyz), rgb)
    a, b = incremental.points(), fresh.points()
    order_a, order_b = np.lexsort(a[0].T), np.lexsort(b[0].T)
    np.testing.assert_allclose(a[0][order_a], b[0][order_b], atol=1e-5)
    np.testing.assert_array_equal(a[1][order_a], b[1][order_b])


def test_real_model_descriptor_and_verification_never_touch_the_live_stream() -> None:
    """The real (tiny, synthetic) model end to end: descriptors from its encoder tokens, the two-frame pass
    in a scratch stream; the live stream's outputs are bit-identical to a run without the closer."""
    scene = LoopScene.render(SceneConfig(width=56, height=42, frames=4, supersample=1), turns=0.4)
    config = SessionConfig(scale_frames=2, sliding_window=4, max_window=4, image_width=56)

    def run(with_closer: bool) -> tuple[list[np.ndarray], LoopCloser | None]:
        session = build_engine(EngineSpec(preset="tiny", device="cpu", seed=0, session=config)).only
        loop_config = LoopClosureConfig(
            exclude_recent=1, min_similarity=-1.0, top_k=1, keyframe_translation=1e-6
        )
        closer = LoopCloser(loop_config, 56, ModelDescriptor(session.model), PairVerifier(session.model))
        poses = []
        for i, image in enumerate(scene.images):
            for result in session.push(image, meta=i):
                poses.append(result.pose_c2w)
                if with_closer:
                    closer.add(result, float(i))
        return poses, closer if with_closer else None

    plain, _ = run(False)
    closed, closer = run(True)
    assert closer is not None and closer.stats.candidates >= 2  # the verification pass ran through the model
    assert closer.stats.verified + closer.stats.rejected == closer.stats.candidates
    descriptor = next(iter(closer.map.keyframes.values())).descriptor
    assert descriptor.shape == (128,) and abs(float(np.linalg.norm(descriptor)) - 1.0) < 1e-5
    for a, b in zip(plain, closed, strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize(("seed", "drift_scale", "yaw"), [(11, 0.02, 1.0)])
def test_loop_eval_on_the_drifting_oracle(seed: int, drift_scale: float, yaw: float) -> None:
    """`loop-eval`'s numbers on a loop it was not tuned for: ATE with <= 35 % of without, no false accept,
    duplicated surface at least halved, and verification both accepted and rejected candidates."""
    result, tracks = evaluate(
        LoopEvalConfig(seed=seed, laps=1, drift_scale=drift_scale, drift_yaw_deg_per_m=yaw, frames=40)
    )
    assert result["ate_with"] <= 0.35 * result["ate_without"], result
    assert result["false_accepts"] == 0 and result["loops_accepted"] >= 1, result
    assert result["loops_rejected"] >= 1, result
    assert result["duplicate_surface_fraction_with"] <= 0.5 * result["duplicate_surface_fraction_without"], (
        result
    )
    assert tracks["with"].shape == tracks["truth"].shape


def test_memory_budget_merges_keyframes_into_submaps_and_still_closes_the_loop() -> None:
    """With a budget of 18 loop keyframes the oldest merge into submaps (graph and index follow) and the loop
    back to the start still closes through a submap's node."""
    result, _ = evaluate(
        LoopEvalConfig(
            seed=11, laps=1, drift_scale=0.02, drift_yaw_deg_per_m=1.0, frames=40, max_keyframes=18
        )
    )
    assert result["ate_with"] <= 0.35 * result["ate_without"], result
    assert result["false_accepts"] == 0 and result["loops_accepted"] >= 1, result
    assert result["submaps"] >= 2 and result["keyframes"] <= 18, result


def test_worker_thread_closes_the_loop_off_the_callers_thread() -> None:
    """`LoopClosureWorker`: keyframes submitted from the stream's thread are processed on its own thread; the
    loop event arrives there with the new correction; a forced pass and a clear run in order."""
    import threading

    from lingbot_map_ros.engine.loop import LoopClosureWorker
    from lingbot_map_ros.tools.loop.loop_oracle import DriftConfig, image_descriptor, oracle_session

    scene = LoopScene.render(SceneConfig(width=112, height=84, frames=40, supersample=1, seed=18), turns=1.25)
    session, oracle = oracle_session(scene, DriftConfig(scale_per_m=0.02, yaw_deg_per_m=1.0), seed=11)
    config = LoopClosureConfig(min_similarity=0.5, queue_depth=64)  # all 40 frames fit: nothing dropped
    closer = LoopCloser(config, 112, image_descriptor, PairVerifier(oracle))
    events, threads = [], set()

    def on_event(event: object) -> None:
        events.append(event)
        threads.add(threading.current_thread().name)

    worker = LoopClosureWorker(closer, on_event)
    try:
        for i, image in enumerate(scene.images):
            for result in session.push(image, meta=i):
                worker.submit(result, float(result.meta))
        worker.join_idle(60.0)
        assert events and threads == {"loop_closure"}
        assert events[-1].correction is closer.correction
        optimizations = closer.stats.optimizations
        worker.request_optimize()
        worker.join_idle(60.0)
        assert closer.stats.optimizations == optimizations + 1
        worker.clear()
        worker.join_idle(60.0)
        assert len(closer.map) == 0 and closer.stats.keyframes == 0
    finally:
        worker.stop()
    assert worker.dropped == 0


def test_model_descriptor_of_a_read_only_image_gives_no_warning() -> None:
    """A keyframe's network image is stored read-only: torch warned on every launch (issue 29)."""
    config = SessionConfig(scale_frames=2, sliding_window=4, max_window=4, image_width=56)
    session = build_engine(EngineSpec(preset="tiny", device="cpu", seed=0, session=config)).only
    image = np.random.default_rng(0).integers(0, 256, (42, 56, 3), dtype=np.uint8)
    image.flags.writeable = False
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        descriptor = ModelDescriptor(session.model)(image)
    assert descriptor.dtype == np.float32 and np.isclose(np.linalg.norm(descriptor), 1.0, atol=1e-4)
