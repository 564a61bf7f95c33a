"""Tracking health per camera and frame: `tracking | degraded | lost | relocalised` (docs/robot.md "Tracking
state"). No rclpy; the node publishes the state, inflates the odometry covariance by `inflation` and skips
the map for frames whose `maps` is false.

Signals (each exists for the real model and for the stand-ins):

* **confidence**: the median depth confidence of the frame (pixels with confidence > 0: the crop's rows are
  0) below `min_confidence`, or below `confidence_drop` x its running mean while tracking;
* **no information**: the grey image (decimated) too dark (`dark_level`), saturated (`bright_level`), flat
  (standard deviation below `flat_std`: a covered lens) or blurred (variance of its Laplacian below
  `blur_drop` x its running mean while tracking);
* **implausible motion**: the stream's step since the previous frame longer than `max_step_depths` x the
  frame's median depth (stream units, so no metric scale is needed), or turned more than `max_turn_deg`; each
  bound rises to `jump_factor` x the stream's own running mean step / turn while tracking, so only a stream
  that already moves erratically (e.g. synthetic weights' poses, 20-90 deg between frames; a real 30 Hz
  stream turns a few degrees) gets a looser one: a jump is implausible for *this* stream. Judged once
  `motion_warmup` good frames' motion is known (a stream's first steps, its anchor frames among them, have
  no motion of its own to be measured against);
* **odometry disagreement** (robot modes, when the caller has both lengths in metres): the stream's step and
  the wheels' step differ by more than `odometry_tolerance_m` + `odometry_tolerance` x the wheels' step.

Hysteresis: one bad frame makes `degraded`; `lost_after` bad frames in a row make `lost`; `degraded` returns
to `tracking` after `recover_after` good frames. `lost` is sticky: only `relocalised(...)` (a verified match
against the keyframe map, engine/loop/relocalise.py) ends it, or, in mapping mode only, `new_segment_after`
good frames in a row (the stream then starts a new, unconnected segment of the map; 0 = never). Only
`tracking` and `relocalised` frames add to the map.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from enum import StrEnum

import cv2
import numpy as np

from .geometry import rotation_angle
from .result import FrameResult


class TrackingState(StrEnum):
    TRACKING = "tracking"
    DEGRADED = "degraded"
    LOST = "lost"
    RELOCALISED = "relocalised"


@dataclass(frozen=True)
class HealthConfig:
    """Thresholds of the signals and the hysteresis (module doc). `degraded_inflation` / `lost_inflation`:
    the odometry covariance factors (lost >= 100); `running_rate`: weight of a good frame in the running
    means (confidence, sharpness, step, turn); `thumbnail`: (w, h) of the grey image the statistics use;
    `sample_stride`: the median confidence and depth use every n-th pixel in each axis (a few ms less per
    frame on the pose path at 518x378)."""

    min_confidence: float = 1.2
    confidence_drop: float = 0.5
    dark_level: float = 12.0
    bright_level: float = 245.0
    flat_std: float = 4.0
    blur_drop: float = 0.05
    max_step_depths: float = 1.0
    max_turn_deg: float = 45.0
    jump_factor: float = 3.0
    motion_warmup: int = 5
    odometry_tolerance_m: float = 0.1
    odometry_tolerance: float = 0.5
    lost_after: int = 3
    recover_after: int = 2
    new_segment_after: int = 0
    degraded_inflation: float = 10.0
    lost_inflation: float = 1e4
    running_rate: float = 0.1
    thumbnail: tuple[int, int] = (64, 48)
    sample_stride: int = 4

    def __post_init__(self) -> None:
        if (
            self.lost_after < 1
            or self.recover_after < 1
            or self.new_segment_after < 0
            or self.sample_stride < 1
            or self.motion_warmup < 0
        ):
            raise ValueError(
                "health: need lost_after, recover_after, sample_stride >= 1 and new_segment_after, "
                "motion_warmup >= 0"
            )
        if self.degraded_inflation < 1.0 or self.lost_inflation < 100.0:
            raise ValueError("health: need degraded_inflation >= 1 and lost_inflation >= 100")


@dataclass(frozen=True)
class HealthReport:
    """One frame's verdict: `state`, the signals that fired (`reasons`), the covariance factor
    (`inflation`, 1 while tracking) and whether the frame may add to the map (`maps`)."""

    state: TrackingState
    reasons: tuple[str, ...]
    inflation: float
    maps: bool
    bad_run: int


@dataclass(frozen=True)
class Verdict:
    """One frame's health as the pose path saw it (`TrackingHealth.assess`) and what the loop closer's side
    does with it (engine/loop/relocalise.py `LostAndFound.follow`): `lost_started` (a new loss: forget partial
    agreements), `search` (a lost frame that is itself good: match it against the map), `new_segment` (a
    loss ended without a match, in mapping mode: the stream starts an unconnected segment), `loss`: which loss
    of the stream (`TrackingHealth.losses`) the frame was judged in: the closer's side runs behind the pose
    path, so a search of a loss that already ended (or a match found for one) must not end a later one."""

    report: HealthReport
    lost_started: bool
    search: bool
    new_segment: bool
    loss: int = 0


@dataclass
class _Running:
    confidence: float | None = None
    sharpness: float | None = None
    step: float | None = None  # stream step / median depth
    turn: float | None = None  # degrees
    moves: int = 0  # good frames whose turn was learned

    def update(self, name: str, value: float, rate: float) -> None:
        old = getattr(self, name)
        setattr(self, name, value if old is None else (1 - rate) * old + rate * value)


def image_information(rgb: np.ndarray, size: tuple[int, int]) -> tuple[float, float, float]:
    """(grey mean, grey standard deviation, Laplacian variance) of `rgb` [H, W, 3] uint8 at `size` (w, h).
    A large image is first sampled down to about twice `size` by a pixel stride, then area-averaged."""
    h, w = rgb.shape[:2]
    stride = max(1, min(h // size[1], w // size[0]) // 2)
    small = cv2.resize(np.ascontiguousarray(rgb[::stride, ::stride]), size, interpolation=cv2.INTER_AREA)
    grey = cv2.cvtColor(small, cv2.COLOR_RGB2GRAY).astype(np.float32)
    return float(grey.mean()), float(grey.std()), float(cv2.Laplacian(grey, cv2.CV_32F).var())


def median_confidence(result: FrameResult, stride: int = 1) -> float | None:
    """Median depth confidence over the frame's pixels, every `stride`-th in each axis (None when the step
    skipped the depth head)."""
    if result.depth_conf is None:
        return None
    sampled = result.depth_conf[::stride, ::stride]
    conf = sampled[sampled > 0]
    return float(np.median(conf)) if conf.size else 0.0


class TrackingHealth:
    """One camera's state machine (module doc). Feed every frame to `observe` in order."""

    def __init__(self, config: HealthConfig | None = None, mapping: bool = True) -> None:
        self.config = config or HealthConfig()
        self.mapping = mapping
        self.lock = threading.Lock()  # a leaf: the pose path's `assess` against the closer's `relocalised`
        self.losses = 0  # losses started so far (never reset: a stale verdict's loss stays stale)
        self.reset()

    def reset(self, lost: bool = False) -> None:
        """A new stream (the node's reset or a new epoch): tracking, no history; `lost`: a stream on a
        loaded map in localization mode, whose place in it is unknown until a verified match (a new loss)."""
        self.losses += 1  # a search of the previous stream ends nothing in this one
        self.state = TrackingState.LOST if lost else TrackingState.TRACKING
        self._bad = 0
        self._good = 0
        self._reasons: tuple[str, ...] = ()
        self._previous: np.ndarray | None = None
        self._running = _Running()
        self._measured: dict[str, float | None] = {}

    @property
    def lost(self) -> bool:
        return self.state is TrackingState.LOST

    def observe(
        self,
        result: FrameResult,
        odometry_step_m: float | None = None,
        stream_step_m: float | None = None,
    ) -> HealthReport:
        """The verdict for `result` (its `pose_c2w`, `depth`, `depth_conf`, `rgb`); `odometry_step_m` /
        `stream_step_m`: the wheels' and the stream's step since the previous frame in metres (robot modes
        with a metric scale; both or neither)."""
        reasons = self._signals(result, odometry_step_m, stream_step_m)
        self._previous = result.pose_c2w
        bad = bool(reasons)
        self._bad, self._good = (self._bad + 1, 0) if bad else (0, self._good + 1)
        cfg = self.config
        if self.state is TrackingState.LOST:
            if not bad and self.mapping and 0 < cfg.new_segment_after <= self._good:
                self.state = TrackingState.TRACKING
                reasons = ("new segment",)
        elif bad:
            self.state = TrackingState.LOST if self._bad >= cfg.lost_after else TrackingState.DEGRADED
            self.losses += self.state is TrackingState.LOST
        elif self.state is TrackingState.RELOCALISED or self._good >= cfg.recover_after:
            self.state = TrackingState.TRACKING
        if not bad and self.state is TrackingState.TRACKING:
            self._learn()
        self._reasons = reasons
        return self._report(reasons)

    def assess(
        self, result: FrameResult, odometry_step_m: float | None = None, stream_step_m: float | None = None
    ) -> Verdict:
        """`observe` under `lock`, with what the closer's side needs to know (`Verdict`)."""
        with self.lock:
            was_lost = self.lost
            report = self.observe(result, odometry_step_m, stream_step_m)
            lost, loss = self.lost, self.losses
        return Verdict(
            report,
            lost_started=lost and not was_lost,
            search=lost and not report.reasons,  # a frame that is itself bad cannot be matched
            new_segment=was_lost and report.state is TrackingState.TRACKING,
            loss=loss,
        )

    def current(self, verdict: Verdict) -> bool:
        """Whether `verdict` was judged in the loss that is still on (call under `lock`)."""
        return self.lost and verdict.loss == self.losses

    def relocalised(self) -> HealthReport:
        """A verified match ended a loss (the current frame): `relocalised`, maps again."""
        self.state = TrackingState.RELOCALISED
        self._bad = 0
        self._reasons = ("verified match",)
        return self._report(self._reasons)

    def report(self) -> HealthReport:
        """The current state as a report (no new frame), with the last frame's reasons."""
        return self._report(self._reasons)

    # ------------------------------------------------------------------------------------------------
    def _report(self, reasons: tuple[str, ...]) -> HealthReport:
        cfg = self.config
        inflation = {
            TrackingState.TRACKING: 1.0,
            TrackingState.RELOCALISED: 1.0,
            TrackingState.DEGRADED: cfg.degraded_inflation,
            TrackingState.LOST: cfg.lost_inflation,
        }[self.state]
        maps = self.state in (TrackingState.TRACKING, TrackingState.RELOCALISED)
        return HealthReport(self.state, reasons, inflation, maps, self._bad)

    def _signals(
        self, result: FrameResult, odometry_step_m: float | None, stream_step_m: float | None
    ) -> tuple[str, ...]:
        cfg, running = self.config, self._running
        reasons: list[str] = []
        mean, std, sharpness = image_information(result.rgb, cfg.thumbnail)
        if mean < cfg.dark_level:
            reasons.append("black image")
        elif mean > cfg.bright_level:
            reasons.append("saturated image")
        elif std < cfg.flat_std:
            reasons.append("covered image")
        elif running.sharpness is not None and sharpness < cfg.blur_drop * running.sharpness:
            reasons.append("blurred image")
        confidence = median_confidence(result, cfg.sample_stride)
        if confidence is not None and (
            confidence < cfg.min_confidence
            or (running.confidence is not None and confidence < cfg.confidence_drop * running.confidence)
        ):
            reasons.append(f"low confidence {confidence:.2f}")
        step, turn = self._motion(result)
        self._measured = {"confidence": confidence, "sharpness": sharpness, "step": step, "turn": turn}
        if self.state is not TrackingState.LOST:
            if step is not None and step > self._bound(cfg.max_step_depths, running.step):
                reasons.append("jump")
            elif turn is not None and turn > self._bound(cfg.max_turn_deg, running.turn):
                reasons.append("jump (turn)")
        if odometry_step_m is not None and stream_step_m is not None:
            allowed = cfg.odometry_tolerance_m + cfg.odometry_tolerance * abs(odometry_step_m)
            if abs(stream_step_m - odometry_step_m) > allowed:
                reasons.append("disagrees with odometry")
        return tuple(reasons)

    def _motion(self, result: FrameResult) -> tuple[float | None, float | None]:
        """(step / median depth, turn in degrees) of the stream since the previous frame (None: unknown)."""
        if self._previous is None:
            return None, None
        step = np.linalg.inv(self._previous) @ result.pose_c2w
        depth = _median_depth(result, self.config.sample_stride)
        length = float(np.linalg.norm(step[:3, 3])) / depth if depth else None
        return length, float(np.degrees(rotation_angle(step[:3, :3])))

    def _bound(self, floor: float, running: float | None) -> float:
        """A motion bound: `floor`, or `jump_factor` x the stream's running mean when that is larger; none
        (infinite) before `motion_warmup` good frames' motion was learned."""
        if self._running.moves < self.config.motion_warmup:
            return float("inf")
        return floor if running is None else max(floor, self.config.jump_factor * running)

    def _learn(self) -> None:
        """Fold the last good frame's measurements (confidence, sharpness, step, turn) into the running
        means."""
        for name, value in self._measured.items():
            if value is not None:
                self._running.update(name, value, self.config.running_rate)
        if self._measured.get("turn") is not None:
            self._running.moves += 1


def _median_depth(result: FrameResult, stride: int) -> float | None:
    if result.depth is None:
        return None
    sampled = result.depth[::stride, ::stride]
    valid = sampled[np.isfinite(sampled) & (sampled > 0)]
    return float(np.median(valid)) if valid.size else None
