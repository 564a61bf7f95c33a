"""Sessions save and load the loop closure's keyframe map and pose graph (issue 23; engine/loop/persist.py,
``loop.npz`` in engine/persistence/store.py): a round trip restores keyframes, descriptors, verification
images
and edges exactly; a closer restored from the folder relocalises by place recognition when the camera comes
back to a saved place; a tampered keyframe map is refused by name; a version-2 session loads without one."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
from mapper_steps import locate_and_integrate

from lingbot_map_ros.engine.geometry import Sim3
from lingbot_map_ros.engine.loop import LoopCloser, LoopClosureConfig, PairVerifier
from lingbot_map_ros.engine.loop.persist import STATE_KEY, check_loop, export_loop
from lingbot_map_ros.engine.persistence.store import (
    MANIFEST,
    MANIFEST_HASH,
    SessionError,
    SessionSnapshot,
    load_session,
    save_session,
)
from lingbot_map_ros.tools.bags.synthetic_scene import SceneConfig
from lingbot_map_ros.tools.loop.loop_oracle import DriftConfig, LoopScene, image_descriptor, oracle_session

#: Frames fed before the save: the first lap up to just before the camera is back at its start.
SAVED_FRAMES = 28


def _snapshot(closer: LoopCloser) -> SessionSnapshot:
    arrays, state = export_loop(closer)
    return SessionSnapshot(
        compat={"preset": "tiny"},
        anchor_images=np.zeros((1, 8, 8, 3), np.uint8),
        anchor_stamps_ns=np.zeros(1, np.int64),
        source_hw=(84, 112),
        alignment=Sim3.identity(),
        state={STATE_KEY: state},
        loop=arrays,
    )


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> tuple[LoopCloser, Path, list, object]:
    """A closer fed the first `SAVED_FRAMES` frames of a drifting loop, saved; the rest of the stream."""
    scene = LoopScene.render(SceneConfig(width=112, height=84, frames=40, supersample=1, seed=18), turns=1.25)
    session, oracle = oracle_session(scene, DriftConfig(scale_per_m=0.02, yaw_deg_per_m=1.0), seed=11)
    closer = LoopCloser(LoopClosureConfig(min_similarity=0.5), 112, image_descriptor, PairVerifier(oracle))
    later = []
    for i, image in enumerate(scene.images):
        for result in session.push(image, meta=i):
            if result.meta < SAVED_FRAMES:
                closer.add(result, float(result.meta))
            else:
                later.append(result)
    folder = save_session(tmp_path_factory.mktemp("loop") / "s", _snapshot(closer))
    return closer, folder, later, oracle


def test_round_trip_restores_keyframes_descriptors_and_graph(saved: tuple) -> None:
    closer, folder, _, oracle = saved
    snapshot = load_session(folder, {"preset": "tiny"})
    restored = LoopCloser(closer.config, 112, image_descriptor, PairVerifier(oracle))
    restored.restore(check_loop(snapshot.loop, snapshot.state[STATE_KEY], closer.config.depth_stride))

    assert list(restored.map.keyframes) == list(closer.map.keyframes) and len(closer.map) >= 5
    for key, kf in closer.map.keyframes.items():
        got = restored.map.keyframes[key]
        for name in ("points", "colors", "descriptor", "image", "depth", "conf"):
            np.testing.assert_array_equal(getattr(got, name), getattr(kf, name), err_msg=f"{key} {name}")
        for name in ("rotation", "translation", "scale"):
            np.testing.assert_array_equal(getattr(got.pose, name), getattr(kf.pose, name))
            np.testing.assert_array_equal(getattr(got.stream_pose, name), getattr(kf.stream_pose, name))
    assert [(e.a, e.b, e.loop, e.sigma) for e in restored.graph.edges] == [
        (e.a, e.b, e.loop, e.sigma) for e in closer.graph.edges
    ]
    assert restored.graph.fixed == closer.graph.fixed
    np.testing.assert_array_equal(restored.correction.rotation, closer.correction.rotation)
    xyz_a, _ = closer.map.voxels.points()
    xyz_b, _ = restored.map.voxels.points()
    np.testing.assert_allclose(np.sort(xyz_b, axis=0), np.sort(xyz_a, axis=0), atol=1e-6)
    assert restored.graph.error(restored.graph._values) == pytest.approx(
        closer.graph.error(closer.graph._values)
    )
    assert restored.stats.verified == closer.stats.verified


def test_loaded_map_relocalises_by_place_recognition(saved: tuple) -> None:
    """The camera's return to its start after the load is recognised against the saved keyframes (their
    saved descriptors), verified with their saved images, and the graph is optimised across the epochs."""
    closer, folder, later, oracle = saved
    snapshot = load_session(folder, {"preset": "tiny"})
    restored = LoopCloser(closer.config, 112, image_descriptor, PairVerifier(oracle))
    restored.restore(check_loop(snapshot.loop, snapshot.state[STATE_KEY], closer.config.depth_stride))
    saved_keys = set(restored.map.keyframes)
    optimizations = restored.stats.optimizations
    events = [event for result in later if (event := restored.add(result, float(result.meta)))]
    into_saved = [(a, b) for a, b in restored.accepted if a in saved_keys and b not in saved_keys]
    assert into_saved, (restored.accepted, restored.stats.as_dict())
    assert events and restored.stats.optimizations > optimizations
    assert all(key > max(saved_keys) for key in set(restored.map.keyframes) - saved_keys)
    poses = np.array([kf.pose.translation for kf in restored.map.keyframes.values()])
    assert np.isfinite(poses).all()


def test_tampered_keyframe_map_is_refused_by_name(saved: tuple) -> None:
    closer, *_ = saved
    arrays, state = export_loop(closer)
    bad = dict(arrays, edge_nodes=arrays["edge_nodes"].copy())
    bad["edge_nodes"][0, 1] = 10**9
    with pytest.raises(SessionError, match="edge 0 .* names a missing keyframe"):
        check_loop(bad, state, closer.config.depth_stride)
    poses = arrays["kf_poses"].copy()
    poses[1, :9] *= 2.0  # not a rotation
    with pytest.raises(SessionError, match="keyframe .*'s pose is not a Sim\\(3\\) pose"):
        check_loop(dict(arrays, kf_poses=poses), state, closer.config.depth_stride)
    with pytest.raises(SessionError, match="depths saved every"):
        check_loop(arrays, state, closer.config.depth_stride + 1)
    with pytest.raises(SessionError, match="correction must be 13 numbers"):
        check_loop(arrays, dict(state, correction=[1.0]), closer.config.depth_stride)


def test_loop_graph_that_lies_is_refused_at_load_with_the_reason(saved: tuple, tmp_path: Path) -> None:
    """Issue 30: a session whose loop.npz holds keyframe poses of scale 1e200 (written through
    `save_session`, so the manifest's hashes agree) loaded and moved the map by 1e200 m. Now the load is
    refused with the reason; so are a keyframe moved away from what its edges measure, edges of absurd
    sigmas, and descriptors of another dimension than the loading model's."""
    closer, _, _, oracle = saved
    arrays, _ = export_loop(closer)
    stride = closer.config.depth_stride
    huge = arrays["kf_poses"].copy()
    huge[:, 9:] *= 1e200
    folder = save_session(tmp_path / "huge", dict_snapshot(closer, kf_poses=huge))
    snapshot = load_session(folder, {"preset": "tiny"})  # the files themselves are consistent
    with pytest.raises(SessionError, match="pose is not a Sim\\(3\\) pose within bounds"):
        check_loop(snapshot.loop, snapshot.state[STATE_KEY], stride)
    moved = arrays["kf_poses"].copy()
    moved[len(moved) // 2, 9:12] += 5.0  # a valid pose, 5 m from where its edges put it
    with pytest.raises(SessionError, match="disagrees with its keyframes' poses"):
        check_loop(dict(arrays, kf_poses=moved), snapshot.state[STATE_KEY], stride)
    with pytest.raises(SessionError, match="edge sigmas must be in"):
        check_loop(dict(arrays, edge_sigmas=arrays["edge_sigmas"] * 1e9), snapshot.state[STATE_KEY], stride)
    dim = arrays["kf_descriptors"].shape[1]
    with pytest.raises(SessionError, match=f"descriptors of {dim} values, this model's have {dim + 1}"):
        check_loop(arrays, snapshot.state[STATE_KEY], stride, descriptor_dim=dim + 1)
    restored = check_loop(arrays, snapshot.state[STATE_KEY], stride, descriptor_dim=closer.descriptor_dim())
    assert restored is not None and len(restored.keyframes) == len(closer.map)


def dict_snapshot(closer: LoopCloser, **loop_arrays: np.ndarray) -> SessionSnapshot:
    """`_snapshot` with some loop.npz arrays replaced."""
    snapshot = _snapshot(closer)
    snapshot.loop = dict(snapshot.loop, **loop_arrays)
    return snapshot


def test_version_2_session_without_keyframe_map_still_loads(tmp_path: Path) -> None:
    snapshot = _snapshot(
        LoopCloser(LoopClosureConfig(), 112, image_descriptor, lambda a, b: None)  # type: ignore[arg-type]
    )
    folder = save_session(tmp_path / "v2", snapshot)
    manifest = json.loads((folder / MANIFEST).read_text())
    manifest["version"] = 2
    del manifest["files"]["loop.npz"]
    (folder / "loop.npz").unlink()
    text = json.dumps(manifest).encode()
    (folder / MANIFEST).write_bytes(text)
    (folder / MANIFEST_HASH).write_bytes(hashlib.sha256(text).hexdigest().encode())
    loaded = load_session(folder, {"preset": "tiny"})
    assert check_loop(loaded.loop, loaded.state.get(STATE_KEY), 2) is None


def test_persistence_saves_the_closer_and_a_bad_keyframe_map_refuses_the_whole_load(tmp_path: Path) -> None:
    """`persistence.capture/load(..., loop=closer)` with the real (tiny) model's closer: the keyframes come
    back in the loading closer; a snapshot whose keyframe map is inconsistent is refused before the session,
    the mapper or the closer is touched (the load is a transaction)."""
    from tiny_stream import pan_frames, tiny_model, tiny_session

    from lingbot_map_ros.engine import persistence
    from lingbot_map_ros.engine.loop import ModelDescriptor
    from lingbot_map_ros.engine.mapping.mapper import Mapper, MapperConfig

    model = tiny_model()
    config = LoopClosureConfig(exclude_recent=1, min_similarity=-1.0, top_k=1, keyframe_translation=1e-6)
    compat = {"preset": "tiny", "weights": "synthetic:tiny", "image_width": 56, "scale_frames": 3}

    def pipeline() -> tuple:
        session = tiny_session(model, 3)
        closer = LoopCloser(config, 56, ModelDescriptor(session.model), PairVerifier(session.model))
        return session, Mapper(MapperConfig()), closer

    session_a, mapper_a, closer_a = pipeline()
    for i, rgb in enumerate(pan_frames(6)):
        for result in session_a.push(rgb, meta=(i + 1) * 100_000_000):
            locate_and_integrate(mapper_a, result, result.meta * 1e-9)
            closer_a.add(result, result.meta * 1e-9)
    assert len(closer_a.map) >= 3 and closer_a.stats.candidates >= 1
    snapshot = persistence.capture(session_a, mapper_a, compat, int, loop=closer_a)
    folder = persistence.save_session(tmp_path / "s", snapshot)

    session_b, mapper_b, closer_b = pipeline()
    snapshot, _ = persistence.load(folder, session_b, mapper_b, compat, loop=closer_b)
    assert list(closer_b.map.keyframes) == list(closer_a.map.keyframes)
    for key, kf in closer_a.map.keyframes.items():
        np.testing.assert_array_equal(closer_b.map.keyframes[key].descriptor, kf.descriptor)

    session_c, mapper_c, closer_c = pipeline()
    bad = dict(snapshot.loop, kf_point_counts=snapshot.loop["kf_point_counts"] + 1)
    snapshot.loop = bad
    with pytest.raises(SessionError, match="kf_points / kf_colors must be"):
        persistence.restore(session_c, mapper_c, snapshot, loop=closer_c)
    assert len(mapper_c.voxels) == 0 and len(closer_c.map) == 0 and session_c.anchor_state() is None
