"""A load is a transaction (issue 20): every refusal leaves the running session and mapper as they were.

Run B maps its own frames; each refused snapshot of run A (one refusal reason per case, the reproductions of
issue 20 among them) is handed to `persistence.restore`, and B's map points, grid, trajectory, chain, scale,
epoch and counters are compared with the record taken before: any change fails. Before the fix the state was
checked only after the session had been reset (`restore_anchors`) and the mapper cleared (`Mapper.restore`).
Also here: a session saved at another camera size of the same network size continues without a reset, and the
manifest is covered by its own hash. Tiny preset, CPU.
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from mapper_steps import locate_and_integrate
from tiny_stream import pan_frames, tiny_model, tiny_session

from lingbot_map_ros.engine import persistence
from lingbot_map_ros.engine.mapping.grid import GridConfig
from lingbot_map_ros.engine.mapping.mapper import Mapper, MapperConfig
from lingbot_map_ros.engine.mapping.voxel_map import VoxelMapConfig
from lingbot_map_ros.engine.persistence.store import SessionError, SessionSnapshot, load_session, save_session
from lingbot_map_ros.engine.stream.session import StreamingSession
from lingbot_map_ros.model import LingBotMap

S0 = 2
COMPAT = {"preset": "tiny", "weights": "synthetic:tiny", "image_width": 56, "scale_frames": S0}


def pipeline(model: LingBotMap) -> tuple[StreamingSession, Mapper]:
    voxel = VoxelMapConfig(voxel_size=0.01, conf_threshold=0.0, pixel_stride=2)
    return tiny_session(model, S0), Mapper(MapperConfig(voxel=voxel))


def feed(session: StreamingSession, mapper: Mapper, images: list[np.ndarray]) -> list:
    out = []
    for i, rgb in enumerate(images):
        for result in session.push(rgb, meta=(i + 1) * 100_000_000):
            out.append(locate_and_integrate(mapper, result, result.meta * 1e-9))
    return out


@pytest.fixture(scope="module")
def model() -> LingBotMap:
    return tiny_model()


@pytest.fixture(scope="module")
def saved(model: LingBotMap) -> SessionSnapshot:
    """Run A's snapshot (frames of 42x74: network 28x56)."""
    session, mapper = pipeline(model)
    feed(session, mapper, pan_frames(S0 + 4))
    return persistence.capture(session, mapper, COMPAT, int, {"map_frame": "map", "map_odom": None})


@pytest.fixture(scope="module")
def live(model: LingBotMap) -> tuple[StreamingSession, Mapper]:
    """Run B: its own map, streaming at 42x74 too."""
    session, mapper = pipeline(model)
    feed(session, mapper, pan_frames(S0 + 5, seed=7))
    return session, mapper


def record(session: StreamingSession, mapper: Mapper) -> dict[str, object]:
    """Everything a refused load must leave as it was."""
    stats = session.stats()
    xyz, rgb = mapper.voxels.points()
    order = np.lexsort(xyz.T)
    return {
        "counters": (
            stats.epoch,
            stats.frames,
            stats.keyframes,
            stats.frames_total,
            stats.resets_total,
            stats.phase,
            stats.segment,
            stats.network_hw,
            stats.input_hw,
        ),
        "xyz": xyz[order],
        "rgb": rgb[order],
        "grid": mapper.grid.counts(),
        "trajectory": mapper.trajectory.full_history(),
        "chain": (mapper.chain.world_cam0.copy(), mapper.chain.map_cam0.copy(), mapper.mode, mapper.epoch),
        "scale": mapper.scale.state(),
    }


def assert_same(before: dict, after: dict) -> None:
    assert after["counters"] == before["counters"]
    for key in ("xyz", "rgb"):
        np.testing.assert_array_equal(after[key], before[key])
    for got, want in zip(after["grid"], before["grid"], strict=True):
        np.testing.assert_array_equal(got, want)
    for got, want in zip(after["trajectory"], before["trajectory"], strict=True):
        np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(after["chain"][0], before["chain"][0])
    np.testing.assert_array_equal(after["chain"][1], before["chain"][1])
    assert after["chain"][2:] == before["chain"][2:] and after["scale"] == before["scale"]


def _state(key: str, value: object) -> Callable[[SessionSnapshot], None]:
    def edit(s: SessionSnapshot) -> None:
        s.state[key] = value

    return edit


def _chain(key: str, value: object) -> Callable[[SessionSnapshot], None]:
    def edit(s: SessionSnapshot) -> None:
        s.state["chain"][key] = value

    return edit


def _zero_last_quaternion(s: SessionSnapshot) -> None:
    s.trajectory_poses = s.trajectory_poses.copy()
    s.trajectory_poses[-1, 3:] = 0.0


def _extra_anchor(s: SessionSnapshot) -> None:  # 3 anchors for scale_frames 2
    s.anchor_images = np.concatenate([s.anchor_images, s.anchor_images[-1:]])
    s.anchor_stamps_ns = np.append(s.anchor_stamps_ns, s.anchor_stamps_ns[-1] + 1)


def _huge_grid(s: SessionSnapshot) -> None:  # 2001 x 2 cells, past grid max_cells 2000
    s.grid_hits = np.zeros((GridConfig.max_cells + 1, 2), np.uint16)
    s.grid_passes = np.zeros_like(s.grid_hits)


def _map_odom(s: SessionSnapshot) -> None:
    s.state["node"]["map_odom"] = (np.eye(4) * 2).tolist()


def _square_source(s: SessionSnapshot) -> None:  # anchors of another network size than the images say
    s.source_hw = (56, 56)


NON_RIGID = [[2.0, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1]]
REFUSALS = [
    ("tf_mode_bogus", _state("tf_mode", "bogus"), {}, "concrete mode"),
    (
        "tf_mode_not_configured",
        lambda s: None,
        {"tf_mode": "map_to_base"},
        "differs from this node's tf.mode",
    ),
    ("world_cam0_not_rigid", _chain("world_cam0", NON_RIGID), {}, "world_cam0 is not a rigid transform"),
    ("map_cam0_nan", _chain("map_cam0", [[float("nan")] * 4] * 4), {}, "map_cam0 must be a finite"),
    ("chain_scale_negative", _chain("scale", -1.0), {}, "chain scale must be finite and > 0"),
    ("scale_state_malformed", _state("scale", "x"), {}, "malformed"),
    ("grid_2001x2", _huge_grid, {}, "grid.max_cells"),
    ("grid_resolution", _state("grid_resolution", 0.5), {}, "grid resolution 0.5 m in the session"),
    ("grid_resolution_missing", lambda s: s.state.pop("grid_resolution"), {}, "records no grid resolution"),
    ("three_anchors_for_s0_2", _extra_anchor, {}, "this node needs"),
    ("anchor_size", _square_source, {}, "this node needs"),
    ("zero_quaternion", _zero_last_quaternion, {}, "without a unit quaternion"),
    ("map_odom_not_rigid", _map_odom, {}, "map_odom is not a rigid transform"),
    ("frame_ids", lambda s: None, {"node_state": {"map_frame": "world"}}, "saved map_frame 'map' differs"),
    ("camera_network_size", lambda s: None, {"network_hw": (56, 56)}, "would restart the map"),
]


@pytest.mark.parametrize(("edit", "target", "match"), [r[1:] for r in REFUSALS], ids=[r[0] for r in REFUSALS])
def test_a_refused_load_leaves_the_running_map_as_it_was(
    live: tuple[StreamingSession, Mapper], saved: SessionSnapshot, edit: Callable, target: dict, match: str
) -> None:
    session, mapper = live
    bad = copy.deepcopy(saved)
    edit(bad)
    before = record(session, mapper)
    defaults = persistence.load_target(session, mapper)
    check = defaults.__class__(**{**defaults.__dict__, **target})
    with pytest.raises(SessionError, match=match):
        persistence.restore(session, mapper, bad, check)
    assert_same(before, record(session, mapper))


def test_the_unedited_snapshot_loads(model: LingBotMap, saved: SessionSnapshot) -> None:
    """The control: the refusals above come from the edits alone."""
    session, mapper = pipeline(model)
    feed(session, mapper, pan_frames(S0 + 1, seed=3))
    persistence.restore(session, mapper, copy.deepcopy(saved))
    assert len(mapper.voxels) == len(saved.map_xyz) and mapper.chain is not None


def test_another_camera_size_of_the_same_network_size_continues_the_session(
    model: LingBotMap, saved: SessionSnapshot
) -> None:
    """Saved from 42x74 images, continued from 84x148 ones (both 28x56 at the network): no reset. Before the
    fix the first frame counted as a resolution change and the loaded map was gone."""
    session, mapper = pipeline(model)
    persistence.restore(session, mapper, copy.deepcopy(saved))
    epoch, points = session.stats().epoch, len(mapper.voxels)
    bigger = [np.repeat(np.repeat(f, 2, axis=0), 2, axis=1) for f in pan_frames(3, seed=5)]
    (frame, *_) = feed(session, mapper, bigger)
    assert not frame.new_epoch and session.stats().epoch == epoch
    assert session.stats().resets_total == 1  # the load itself
    assert session.stats().input_hw == (84, 148) and len(mapper.voxels) >= points
    # Only the first frame after a load adopts a size: a later change restarts the stream as before.
    feed(session, mapper, pan_frames(1))
    assert session.stats().epoch == epoch + 1


def test_the_manifest_is_covered_by_its_hash(saved: SessionSnapshot, tmp_path: Path) -> None:
    folder = save_session(tmp_path / "s", saved)
    assert (folder / "manifest.sha256").read_text() == hashlib.sha256(
        (folder / "manifest.json").read_bytes()
    ).hexdigest()
    load_session(folder, COMPAT)
    text = (folder / "manifest.json").read_text().replace('"tf_mode": "map_to_camera"', '"tf_mode": "bogus"')
    (folder / "manifest.json").write_text(text)
    with pytest.raises(SessionError, match="does not match manifest.sha256"):
        load_session(folder, COMPAT)
    (folder / "manifest.sha256").unlink()
    with pytest.raises(SessionError, match="manifest.sha256 is missing"):
        load_session(folder, COMPAT)
