"""engine/persistence/save_load.py: a session + mapper saved and restored into new ones (tiny preset, CPU).

Run A maps frames 0..N and saves; run B (new session, new mapper) loads and gets the same map, grid,
trajectory, scale and TF mode, and frame S0 fed to B gets exactly run A's mapped pose for it (both attend
to the anchors alone). Localisation mode (`mapping_enabled = False`) keeps the map unchanged while poses flow.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from mapper_steps import locate_and_integrate
from tiny_stream import pan_frames, tiny_model, tiny_session

from lingbot_map_ros.engine import persistence
from lingbot_map_ros.engine.mapping.mapper import Mapper, MapperConfig
from lingbot_map_ros.engine.mapping.voxel_map import VoxelMapConfig
from lingbot_map_ros.engine.persistence.store import SessionError
from lingbot_map_ros.engine.stream.session import StreamingSession
from lingbot_map_ros.model import LingBotMap

S0 = 3
COMPAT = {"preset": "tiny", "weights": "synthetic:tiny", "image_width": 56, "scale_frames": S0}


@pytest.fixture(scope="module")
def model() -> LingBotMap:
    return tiny_model()


frames = pan_frames


def pipeline(model: LingBotMap) -> tuple[StreamingSession, Mapper]:
    session = tiny_session(model, S0)
    mapper = Mapper(MapperConfig(voxel=VoxelMapConfig(voxel_size=0.01, conf_threshold=0.0, pixel_stride=2)))
    return session, mapper


def feed(session: StreamingSession, mapper: Mapper, images: list[np.ndarray], first_index: int = 0) -> list:
    out = []
    for i, rgb in enumerate(images, start=first_index):
        for result in session.push(rgb, meta=(i + 1) * 100_000_000):
            out.append(locate_and_integrate(mapper, result, result.meta * 1e-9))
    return out


def test_save_then_load_continues_the_map_frame(model: LingBotMap, tmp_path: Path) -> None:
    images = frames(S0 + 6)
    session_a, mapper_a = pipeline(model)
    mapped_a = feed(session_a, mapper_a, images)
    saved = persistence.capture(session_a, mapper_a, COMPAT, int, {"map_frame": "map"})
    folder = persistence.save_session(tmp_path / "s1", saved)
    assert saved.map_xyz.shape[0] == len(mapper_a.voxels) > 0
    assert saved.trajectory_poses.shape == (S0 + 6, 7)

    session_b, mapper_b = pipeline(model)
    _, replayed = persistence.load(folder, session_b, mapper_b, COMPAT)
    assert [r.meta for r in replayed] == [(i + 1) * 100_000_000 for i in range(S0)]
    xyz_a, rgb_a = mapper_a.voxels.points()
    xyz_b, rgb_b = mapper_b.voxels.points()
    order_a, order_b = np.lexsort(xyz_a.T), np.lexsort(xyz_b.T)
    np.testing.assert_array_equal(xyz_b[order_b], xyz_a[order_a])
    np.testing.assert_array_equal(rgb_b[order_b], rgb_a[order_a])
    np.testing.assert_array_equal(mapper_b.grid.grid().data, mapper_a.grid.grid().data)
    for got, want in zip(mapper_b.trajectory.full_history(), mapper_a.trajectory.full_history(), strict=True):
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-9)
    assert mapper_b.mode == mapper_a.mode and mapper_b.scale.value == mapper_a.scale.value

    # Frame S0 again: attends to the anchors alone in both runs -> run A's mapped pose, bit for bit, and it
    # continues the restored epoch (no new map frame).
    (frame,) = feed(session_b, mapper_b, [images[S0]], first_index=S0)
    assert not frame.new_epoch
    np.testing.assert_array_equal(frame.camera_pose, mapped_a[S0].camera_pose)
    np.testing.assert_array_equal(frame.body_pose, mapped_a[S0].body_pose)
    assert mapper_b.trajectory.history_length == S0 + 7


def test_localisation_mode_keeps_the_map(model: LingBotMap, tmp_path: Path) -> None:
    images = frames(S0 + 8)
    session, mapper = pipeline(model)
    feed(session, mapper, images[: S0 + 2])
    mapper.mapping_enabled = False
    points, grid = len(mapper.voxels), mapper.grid.grid().data.copy()
    mapped = feed(session, mapper, images[S0 + 2 :], first_index=S0 + 2)
    assert len(mapped) == 6 and all(not f.map_changed for f in mapped)
    assert len(mapper.voxels) == points
    np.testing.assert_array_equal(mapper.grid.grid().data, grid)
    mapper.mapping_enabled = True
    (frame,) = feed(session, mapper, images[:1], first_index=99)
    assert frame.map_changed and len(mapper.voxels) >= points


def test_nothing_to_save_during_the_anchor_phase(model: LingBotMap, tmp_path: Path) -> None:
    session, mapper = pipeline(model)
    feed(session, mapper, frames(1))
    with pytest.raises(SessionError, match="anchor phase has not completed"):
        persistence.save_session(tmp_path / "early", persistence.capture(session, mapper, COMPAT, int))
    assert not (tmp_path / "early").exists()


def test_malformed_mapper_state_is_one_error_and_touches_nothing(model: LingBotMap, tmp_path: Path) -> None:
    """Refused before the session or the mapper is touched (test_session_transaction.py has every reason)."""
    session_a, mapper_a = pipeline(model)
    feed(session_a, mapper_a, frames(S0 + 1))
    snapshot = persistence.capture(session_a, mapper_a, COMPAT, int)
    snapshot.state["chain"]["map_cam0"] = [[2.0, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1]]
    session_b, mapper_b = pipeline(model)
    with pytest.raises(SessionError, match="map_cam0 is not a rigid transform"):
        persistence.restore(session_b, mapper_b, snapshot)
    assert len(mapper_b.voxels) == 0 and mapper_b.chain is None
    assert session_b.stats().phase == 1 and session_b.stats().epoch == 0  # no reset: never touched
