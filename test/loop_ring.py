"""Test fixture: a long synthetic run of the loop closer alone, without a model (issue 30: the keyframe
budget and the closer's time per keyframe as the map grows; test/engine/test_engine_loop_acceptance.py,
benchmarks/loop_closer.py).

The camera circles a ring `laps` times, one keyframe per step (`keyframes_per_lap` per lap), with a small
heading drift per step. Each keyframe's descriptor is the one-hot of its place on the ring, so place
recognition proposes the same place on earlier laps; the verifier knows the truth and accepts only pairs at
the ring's start (one loop per lap), with the true relative pose. Images are 28 x 28 and depths flat, so a
keyframe costs the closer its bookkeeping, not pixels.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lingbot_map_ros.engine.loop import Keyframe, LoopCloser, LoopClosureConfig, Verification
from lingbot_map_ros.engine.loop.similarity import between, from_pose
from lingbot_map_ros.engine.result import FrameResult

SIZE = 28  # image side (two patches of 14)


@dataclass(frozen=True)
class Ring:
    """The ring: radius (m), keyframes per lap, heading drift per keyframe step (rad)."""

    radius: float = 3.0
    keyframes_per_lap: int = 64
    drift_per_step: float = 0.002

    def truth(self, i: int) -> np.ndarray:
        """[4, 4] camera -> world of keyframe i (looking along the ring, y down)."""
        return self._pose(i, 0.0)

    def stream(self, i: int) -> np.ndarray:
        """[4, 4] the drifting stream's pose of keyframe i: every step turned by the drift so far."""
        return self._pose(i, self.drift_per_step * i)

    def _pose(self, i: int, extra: float) -> np.ndarray:
        angle = 2 * np.pi * i / self.keyframes_per_lap
        pose = np.eye(4)
        c, s = np.cos(angle + extra), np.sin(angle + extra)
        pose[:3, :3] = np.array([[c, 0.0, s], [0.0, 1.0, 0.0], [-s, 0.0, c]])
        pose[:3, 3] = self.radius * np.array([np.sin(angle), 0.0, np.cos(angle)]) * (1 + 0.01 * extra)
        return pose

    def place(self, i: int) -> int:
        return i % self.keyframes_per_lap

    def describe(self, image: np.ndarray) -> np.ndarray:
        """One-hot of the place its image encodes (pixel [0, 0, 0])."""
        out = np.zeros(self.keyframes_per_lap, np.float32)
        out[int(image[0, 0, 0]) % self.keyframes_per_lap] = 1.0
        return out

    def verify(self, a: Keyframe, b: Keyframe) -> Verification:
        """The truth's relative pose for pairs at the ring's start; everything else refused."""
        if self.place(a.key) != 0 or self.place(b.key) != 0:
            return Verification(a.key, b.key, False, "not the start", None, 0.0, 0.0, 0.0)
        relative = between(from_pose(self.truth(a.key)), from_pose(self.truth(b.key)))
        return Verification(a.key, b.key, True, "accepted", relative, 1.0, 3.0, 0.0)

    def result(self, i: int) -> FrameResult:
        """Keyframe i as the engine reports it (flat depth 2 m, the place's code in the image)."""
        rgb = np.full((SIZE, SIZE, 3), self.place(i), np.uint8)
        f = SIZE / 2
        return FrameResult(
            index=i,
            meta=i,
            is_keyframe=True,
            phase=2,
            pose_c2w=self.stream(i),
            intrinsics=np.array([[f, 0, f], [0, f, f], [0, 0, 1.0]]),
            depth=np.full((SIZE, SIZE), 2.0, np.float32),
            depth_conf=np.full((SIZE, SIZE), 3.0, np.float32),
            rgb=rgb,
            pose_enc=np.zeros(9, np.float32),
        )


def ring_closer(ring: Ring, max_keyframes: int, consistent_loops: int = 1) -> LoopCloser:
    """A closer over the ring's descriptor and verifier (every step a keyframe). One pair verifies per lap,
    so by default a single verified loop is enough (`consistent_loops` 1)."""
    config = LoopClosureConfig(
        keyframe_translation=1e-3,
        consistent_loops=consistent_loops,
        max_keyframes=max_keyframes,
        min_similarity=0.5,
        point_stride=7,
        voxel_size=0.5,
    )
    return LoopCloser(config, SIZE, ring.describe, ring.verify)
