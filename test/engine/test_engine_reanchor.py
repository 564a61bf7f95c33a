"""Long-stream re-anchor alignment (restarted stream → map Sim(3)) and SessionConfig validation."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from lingbot_map_ros.engine.config import SessionConfig
from lingbot_map_ros.engine.geometry import Sim3, quat_xyzw_to_matrix, rotation_angle
from lingbot_map_ros.engine.stream.reanchor import KeyframeRecord, estimate_alignment


def _poses(rng: np.random.Generator, n: int) -> np.ndarray:
    poses = np.tile(np.eye(4), (n, 1, 1))
    poses[:, :3, :3] = quat_xyzw_to_matrix(rng.normal(size=(n, 4)))
    poses[:, :3, 3] = rng.normal(size=(n, 3))
    return poses


def test_alignment_recovers_a_known_sim3() -> None:
    rng = np.random.default_rng(3)
    truth = Sim3(quat_xyzw_to_matrix(rng.normal(size=4)), np.array([2.0, -1.0, 0.5]), 2.5)
    new_c2w = _poses(rng, 4)
    new_depth = rng.uniform(0.5, 3.0, size=(4, 8, 14)).astype(np.float32)
    conf = np.full((4, 8, 14), 3.0, np.float32)
    records = [
        KeyframeRecord(
            np.zeros((8, 14, 3), np.uint8), truth.apply_pose(new_c2w[i]), new_depth[i] * 2.5, conf[i]
        )
        for i in range(4)
    ]
    records[1].depth_net[:2] = 1e6  # outliers in one frame do not move the median
    align = estimate_alignment(records, new_c2w, new_depth, conf)
    assert align.scale == pytest.approx(2.5, rel=1e-5)
    assert rotation_angle(align.rotation @ truth.rotation.T) < 1e-6
    np.testing.assert_allclose(align.translation, truth.translation, atol=1e-5)
    np.testing.assert_allclose(align.apply_pose(new_c2w[-1]), records[-1].pose_c2w, atol=1e-6)


def test_alignment_anchors_on_the_latest_keyframe_and_uses_confident_pixels() -> None:
    rng = np.random.default_rng(4)
    new_c2w = _poses(rng, 3)
    old = _poses(rng, 3)  # inconsistent old poses: the latest one is matched exactly
    new_depth = np.ones((3, 10, 10), np.float32)
    old_depth = np.full((3, 10, 10), 4.0, np.float32)
    old_depth[:, :5] = 100.0  # ... but these pixels are unconfident
    conf = np.full((3, 10, 10), 2.0, np.float32)
    conf[:, :5] = 1.0
    records = [
        KeyframeRecord(np.zeros((10, 10, 3), np.uint8), old[i], old_depth[i], conf[i]) for i in range(3)
    ]
    align = estimate_alignment(records, new_c2w, new_depth, conf, conf_threshold=1.5)
    assert align.scale == pytest.approx(4.0)
    np.testing.assert_allclose(align.apply_pose(new_c2w[2]), old[2], atol=1e-9)
    with pytest.raises(ValueError, match="one new pose and depth per record"):
        estimate_alignment(records, new_c2w[:2], new_depth, conf)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"scale_frames": 0}, "scale_frames"),
        ({"sliding_window": 200}, "max_window"),
        ({"keyframe_interval": 0}, "keyframe_interval"),
        ({"image_width": 100}, "multiple of 14"),
        ({"max_stored_frames": 2000}, "max_stored_frames"),
        ({"max_stored_frames": 8}, "max_stored_frames"),
        ({"camera_history": 4}, "camera_history"),
        ({"backend": "cuda"}, "backend"),
        ({"dtype": torch.int8}, "dtype"),
    ],
)
def test_session_config_rejects_bad_values(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        SessionConfig(**kwargs)
