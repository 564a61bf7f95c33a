"""The drifting oracle when the camera is kidnapped, covered, or lives in twin rooms (`reloc-eval`, tests).

`KidnapOracle` extends `DriftingOracle` (tools/loop/loop_oracle.py) with a stream that integrates like a real
one:

* a streaming step of the next frame of the path (or of a declared `corridor` step) moves the stream pose by
  the true camera-frame step, its translation in the stream's local unit ``exp(drift_scale · d)`` and turned
  ``drift_yaw · d`` about the camera's vertical (d: metres travelled);
* a step that is not the path's next frame (a kidnap) or a covered image (not a frame of the scene: black)
  leaves the pose where it was (the model keeps integrating from there) at a confidence of `lost_confidence`
  for `confused_frames` frames; afterwards the stream tracks again from its wrong place.

Twin rooms (`TwinRooms`): room B is room A moved rigidly by `offset` (its frames are A's images with one bit
flipped, so the oracle tells them apart and the descriptors do not), except a `distinct` part of the lap
where B's images have their colour channels rotated (a poster: a place that tells the rooms apart). With
`aliasing` on, a verification pass of a frame of A with a look-alike frame of B relates the images, not the
places: it returns the relative pose of the two look-alikes in A, so verification accepts a wrong place.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import numpy as np
import torch

from lingbot_map_ros.engine.face import StreamingSession
from lingbot_map_ros.engine.offline import rigid
from lingbot_map_ros.model import StepOutput
from lingbot_map_ros.tools.loop.loop_oracle import (
    DriftConfig,
    DriftingOracle,
    LoopScene,
    _axis_angle,
    _digest,
    oracle_session,
    pair_relative,
)


@dataclass(frozen=True)
class TwinRooms:
    """Room B = room A moved by `offset` (m, optical world); `distinct`: the lap fractions [start, end) where
    B looks different from A."""

    offset: tuple[float, float, float] = (20.0, 0.0, 0.0)
    distinct: tuple[float, float] = (0.5, 0.75)


@dataclass
class _Track:
    """One stream's oracle state: last frame of the path (None after a cover), pose, metres travelled,
    confused frames left."""

    frame: int | None
    pose: np.ndarray
    travelled: float = 0.0
    confused: int = 0


class KidnapOracle(DriftingOracle):
    """Module doc. Frames are global ids: 0..N-1 room A, N..2N-1 room B (twin rooms only)."""

    def __init__(
        self,
        inner: torch.nn.Module,
        scene: LoopScene,
        drift: DriftConfig,
        seed: int = 0,
        twins: TwinRooms | None = None,
        confused_frames: int = 5,
        lost_confidence: float = 1.0,
    ) -> None:
        super().__init__(inner, scene, drift, seed)
        self.twins = twins
        self.confused_frames, self.lost_confidence = confused_frames, lost_confidence
        self.aliasing = False
        self.corridors: set[tuple[int, int]] = set()
        n = len(scene.images)
        self.poses = scene.poses.copy()
        self.images = scene.images
        if twins is not None:
            offset = rigid(np.eye(3), np.asarray(twins.offset, np.float64))
            phase = (np.arange(n) / scene.frames_per_lap) % 1.0
            self.distinct = (phase >= twins.distinct[0]) & (phase < twins.distinct[1])
            room_b = scene.images.copy()
            room_b[:, 0, 0, 0] ^= 1
            room_b[self.distinct] = room_b[self.distinct][..., [2, 0, 1]]
            self.images = np.concatenate([scene.images, room_b])
            self.poses = np.concatenate([scene.poses, offset @ scene.poses])
        self._index = {_digest(image): i for i, image in enumerate(self.images)}
        if len(self._index) != len(self.images):
            raise ValueError("two frames render the same image; the oracle cannot tell them apart")

    @property
    def frames(self) -> int:
        return len(self.images)

    def room_frame(self, frame: int) -> int:
        """The scene frame (room A) whose view `frame` shares."""
        return frame % len(self.scene.images)

    def unique(self, frame: int) -> bool:
        """Whether `frame`'s view exists once in the world (always without twin rooms)."""
        return self.twins is None or bool(self.distinct[self.room_frame(frame)])

    def step(
        self, images: torch.Tensor, state, keyframe: bool = True, keep_tokens: bool = False
    ) -> StepOutput:  # noqa: ANN001 - the StreamingModel seam
        anchoring = state.in_anchor_phase
        cache = state.cache_for((int(images.shape[-2]), int(images.shape[-1])))
        self._book(cache, int(images.shape[0]), keyframe)
        pixels = (images * 255).round().to(torch.uint8).permute(0, 2, 3, 1).cpu().numpy()
        frames = [self._index.get(_digest(img)) for img in pixels]
        # a verification pass: two frames that are not consecutive on the path (the stream's anchor pair is)
        pair = len(frames) == 2 and None not in frames and frames[1] != frames[0] + 1
        if pair:
            poses, depths, conf = self._pair(frames)  # type: ignore[arg-type]
        else:
            if anchoring or getattr(state, "oracle_track", None) is None:
                state.oracle_track = _Track(frames[0], np.eye(4))
            poses, depths, conf = [], [], []
            for frame in frames:
                pose, depth, confidence = self._stream_step(state.oracle_track, frame)
                poses.append(pose)
                depths.append(depth)
                conf.append(np.full_like(depth, confidence))
        pose_enc = torch.tensor(np.stack([self._encode(p) for p in poses]), dtype=torch.float32)
        depth_t = torch.tensor(np.stack(depths), dtype=torch.float32)
        return StepOutput(
            pose_enc=pose_enc,
            pose_enc_list=pose_enc[:, None],
            pose_enc_raw_list=pose_enc[:, None],
            depth=depth_t,
            depth_conf=torch.tensor(np.stack(conf), dtype=torch.float32),
        )

    # ------------------------------------------------------------------------------------------------
    def _unit(self, travelled: float) -> float:
        return self.drift.unit * float(np.exp(self.drift.scale_per_m * travelled))

    def _stream_step(self, track: _Track, frame: int | None) -> tuple[np.ndarray, np.ndarray, float]:
        """The stream's pose, depth and confidence for `frame` (None: a covered image)."""
        shape = self.scene.depths.shape[1:]
        if frame is None:  # no information: stay, depth meaningless
            track.frame, track.confused = None, self.confused_frames
            return track.pose.copy(), np.ones(shape, np.float32), self.lost_confidence
        previous = track.frame
        depth = self.scene.depths[self.room_frame(frame)] * self._unit(track.travelled)
        if previous == frame:  # the first anchor frame
            return track.pose.copy(), depth, self.drift.confidence
        track.frame = frame
        if previous is None or (frame != previous + 1 and (previous, frame) not in self.corridors):
            track.confused = self.confused_frames  # kidnapped (or uncovered elsewhere): stays where it was
        else:
            step = np.linalg.inv(self.poses[previous]) @ self.poses[frame]
            corridor = frame != previous + 1  # measured truly: no drift on the way between the rooms
            length = 0.0 if corridor else float(np.linalg.norm(step[:3, 3]))
            track.travelled += length
            unit = self._unit(track.travelled)
            drifted = step.copy()
            drifted[:3, 3] *= unit
            yaw = np.radians(self.drift.yaw_deg_per_m) * length
            drifted[:3, :3] = _axis_angle(np.array([0.0, 1.0, 0.0]), yaw) @ drifted[:3, :3]
            track.pose = track.pose @ drifted
            depth = self.scene.depths[self.room_frame(frame)] * unit
        confidence = self.drift.confidence
        if track.confused > 0:
            track.confused -= 1
            confidence = self.lost_confidence
        return track.pose.copy(), depth, confidence

    def _pair(self, frames: list[int]) -> tuple[list[np.ndarray], list[np.ndarray], list[np.ndarray]]:
        """A verification pass: the relation of what the two images show (module doc), or a failure."""
        a, b = frames
        self.pair_passes += 1
        rng = np.random.default_rng([self._seed, a, b])
        pair_unit = float(rng.uniform(0.5, 2.0))
        n = len(self.scene.images)
        same_room = a // n == b // n
        look_alike = not (self.unique(a) or self.unique(b))
        ra, rb = self.room_frame(a), self.room_frame(b)
        if same_room or (self.aliasing and look_alike):  # the images relate as in room A
            relative = np.linalg.inv(self.scene.poses[ra]) @ self.scene.poses[rb]
            overlap = self.scene.overlap(ra, rb)
        else:
            relative, overlap = np.eye(4), 0.0
        relative = pair_relative(rng, self.drift, relative, overlap, pair_unit)
        depths = [self.scene.depths[ra] * pair_unit, self.scene.depths[rb] * pair_unit]
        return [np.eye(4), relative], depths, [np.full_like(d, self.drift.confidence) for d in depths]


def kidnap_session(
    scene: LoopScene, drift: DriftConfig, frames: int, seed: int = 0, twins: TwinRooms | None = None
) -> tuple[StreamingSession, KidnapOracle]:
    """`oracle_session` over a `KidnapOracle` (`twins`: the twin rooms), sized for `frames` pushes."""
    return oracle_session(scene, drift, seed, frames, partial(KidnapOracle, twins=twins))  # type: ignore[return-value]
