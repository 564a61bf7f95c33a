"""Verification of a loop candidate: the relative pose of two keyframes from the model itself.

A two-frame pass (the model's anchor step with S = 2: bidirectional attention between the two images; the
live cache is never touched) gives the pair's poses and depths. On CUDA with a `LingBotMap` it is ONE CUDA
graph replayed on a low-priority side stream (`pair_launch.py`, `model/pair_step.py`, issue 31): the
inference thread only launches it in a gap between live steps (about a millisecond), this thread waits for its
outputs and charges its GPU time to the gaps' budget (`charge`). Elsewhere (CPU, a model double, `graphs`
False, or a capture that failed: `graph_error`) it runs eagerly through `run` in a scratch stream with its own
small KV pool (`model.new_stream(...)`), reset before each pair. From its output, on this thread:

* relative pose ``T_ab = T_a⁻¹ T_b`` (rigid, in the pair's own unit), intrinsics from its FoVs;
* the unit of each keyframe: ``u_x = median(d_keyframe / d_pair)`` over confident pixels (stream units per
  pair unit), with its robust spread (1.4826·MAD/median) — the two frames' depths must agree with the
  stream's up to one scale;
* geometric agreement: frame b's confident points, moved into a with ``T_ab`` and projected, must land in a's
  image at a consistent depth (relative `depth_tolerance`) for at least `min_overlap` of them.

Accepted when the median confidence of both frames, the overlap and both spreads pass. The measurement is
the Sim(3) ``a⁻¹ ∘ b`` in the keyframes' local units: rotation of T_ab, translation ``u_a·t_ab``, scale
``u_a / u_b``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from lingbot_map_ros.model import LingBotMap, StreamConfig

from ..contracts import StreamingModel
from ..geometry import Sim3
from ..gpu_gaps import GpuGapsDetached
from ..stream.decode import fov_to_intrinsics, pose_encoding_to_c2w
from .keyframes import Keyframe
from .pair_launch import PassResult, SidePairPasses

#: Runs a task where GPU work of the closer may run and returns its result (the node's `GpuGaps.call`).
GapRun = Callable[[Callable[[], Any]], Any]


@dataclass(frozen=True)
class VerifyConfig:
    """`loop_closure.verify_*`: thresholds of a pair's acceptance (module doc)."""

    min_confidence: float = 1.5
    min_overlap: float = 0.35
    depth_tolerance: float = 0.05
    max_scale_spread: float = 0.1

    def __post_init__(self) -> None:
        if not 0.0 < self.min_overlap <= 1.0 or not 0.0 < self.depth_tolerance < 1.0:
            raise ValueError("verify: need 0 < min_overlap <= 1 and 0 < depth_tolerance < 1")


@dataclass(frozen=True)
class Verification:
    """One candidate pair's verdict; `relative` = ``a⁻¹ ∘ b`` (local units) when accepted."""

    a: int
    b: int
    accepted: bool
    reason: str
    relative: Sim3 | None
    overlap: float
    confidence: float
    spread: float


class PairVerifier:
    """Two-frame passes through `model`: graph-replayed on a side stream, or eager in a scratch stream (module
    doc).

    ``run(task)`` runs a task (the graphed pass's launch, or the whole eager pass) and returns its result: by
    default on the calling thread; the node passes `GpuGaps.call` (engine/gpu_gaps.py), so it runs on the
    inference thread between live steps, never beside one's launch. ``charge(seconds)``: the GPU time of a
    graphed pass, once it is done (the node's `GpuGaps.charge`). ``graphs`` False: always the eager pass."""

    def __init__(
        self,
        model: StreamingModel,
        config: VerifyConfig | None = None,
        run: GapRun | None = None,
        charge: Callable[[float], None] | None = None,
        graphs: bool = True,
    ) -> None:
        self.model = model
        self.config = config or VerifyConfig()
        self.run = run or (lambda task: task())
        self.charge = charge or (lambda seconds: None)
        self._state = None
        self.graphs = graphs and isinstance(model, LingBotMap) and model.device.type == "cuda"
        self.graph_error: str | None = None  # why the graphed pass was given up (its capture failed)
        self._side: SidePairPasses | None = None
        self._lock = threading.Lock()  # one pass at a time: the side stream's buffers are reused

    def __call__(self, a: Keyframe, b: Keyframe) -> Verification:
        if a.image is None or b.image is None or a.image.shape != b.image.shape:
            return Verification(a.key, b.key, False, "no image to verify with", None, 0.0, 0.0, 0.0)
        image_a, image_b = a.image, b.image
        try:
            pose_enc, depth, conf = self.pair_pass(image_a, image_b)
        except GpuGapsDetached:  # the node deactivated with the pass queued: not verified, not an error
            return Verification(a.key, b.key, False, "inference thread stopped", None, 0.0, 0.0, 0.0)
        stride = a.depth_stride
        depth, conf = depth[:, ::stride, ::stride], conf[:, ::stride, ::stride]
        c2w = pose_encoding_to_c2w(pose_enc)
        k_a = fov_to_intrinsics(pose_enc[0], a.image.shape[:2])
        k_a[:2] /= stride
        t_ab = np.linalg.inv(c2w[0]) @ c2w[1]
        confidence = float(min(np.median(conf[0]), np.median(conf[1])))
        (u_a, spread_a), (u_b, spread_b) = _unit(a, depth[0], conf[0]), _unit(b, depth[1], conf[1])
        spread = max(spread_a, spread_b)
        overlap = _overlap(depth[0], depth[1], conf[1], t_ab, k_a, self.config)
        cfg = self.config
        if confidence < cfg.min_confidence:
            reason = f"confidence {confidence:.2f} < {cfg.min_confidence}"
        elif not (np.isfinite(u_a) and np.isfinite(u_b)) or spread > cfg.max_scale_spread:
            reason = f"depth disagrees with the stream (spread {spread:.3f})"
        elif overlap < cfg.min_overlap:
            reason = f"overlap {overlap:.2f} < {cfg.min_overlap}"
        else:
            relative = Sim3(t_ab[:3, :3], u_a * t_ab[:3, 3], u_a / u_b)
            return Verification(a.key, b.key, True, "accepted", relative, overlap, confidence, spread)
        return Verification(a.key, b.key, False, reason, None, overlap, confidence, spread)

    def pair_pass(self, image_a: np.ndarray, image_b: np.ndarray) -> PassResult:
        """pose_enc `[2, 9]`, depth `[2, h, w]`, conf `[2, h, w]` (numpy float32) of the two-frame anchor step
        of images `[h, w, 3]` uint8: graphed on the side stream where it can be, else eager (module doc)."""
        with self._lock:
            if self.graphs:
                side = self._side = self._side or SidePairPasses(self.model)
                side.stage(image_a, image_b)
                capturing = not side.captured(image_a.shape[:2])
                try:
                    launched = self.run(side.launch)
                except RuntimeError as exc:
                    if not capturing or isinstance(exc, GpuGapsDetached):
                        raise
                    self.graphs, self._side = False, None  # the eager pass from now on
                    self.graph_error = f"{type(exc).__name__}: {exc}"
                else:
                    result, gpu_s = launched.wait()
                    self.charge(gpu_s)
                    return result
            return self.run(lambda: self._eager_pass(image_a, image_b))

    def _eager_pass(self, image_a: np.ndarray, image_b: np.ndarray) -> PassResult:
        """`pair_pass` through the scratch stream, eagerly (the contract's `new_stream` / `step`)."""
        model = self.model
        if self._state is None:
            self._state = model.new_stream(
                StreamConfig(
                    scale_frames=2,
                    sliding_window=1,
                    max_window=1,
                    max_special_frames=3,
                    camera_history=3,
                    backend="torch",
                    cuda_graphs=False,
                )
            )
        self._state.reset()
        images = torch.from_numpy(np.stack([image_a, image_b])).to(model.device)
        images = images.permute(0, 3, 1, 2).to(torch.float32).div_(255.0)
        out = model.step(images, self._state, keyframe=True)
        self._state.reset()
        return out.pose_enc.cpu().numpy(), out.depth.cpu().numpy(), out.depth_conf.cpu().numpy()


def _unit(keyframe: Keyframe, pair_depth: np.ndarray, pair_conf: np.ndarray) -> tuple[float, float]:
    """Stream units per pair unit of a keyframe, and the ratio's relative spread (inf when too few pixels)."""
    ok = (
        np.isfinite(keyframe.depth)
        & (keyframe.depth > 0)
        & (pair_depth > 0)
        & np.isfinite(pair_depth)
        & (pair_conf > 1.0)
        & (keyframe.conf > 1.0)
    )
    if ok.sum() < 20:
        return float("inf"), float("inf")
    ratio = keyframe.depth[ok] / pair_depth[ok]
    med = float(np.median(ratio))
    return med, float(1.4826 * np.median(np.abs(ratio - med)) / med)


def _overlap(
    depth_a: np.ndarray,
    depth_b: np.ndarray,
    conf_b: np.ndarray,
    t_ab: np.ndarray,
    k: np.ndarray,
    config: VerifyConfig,
) -> float:
    """Fraction of b's confident points that project into a at a depth within the tolerance of a's."""
    h, w = depth_b.shape
    v, u = np.nonzero((conf_b > 1.0) & np.isfinite(depth_b) & (depth_b > 0))
    if v.size == 0:
        return 0.0
    z = depth_b[v, u]
    k_inv = np.linalg.inv(k)
    cam_b = (np.stack([u, v, np.ones_like(u)], axis=1).astype(np.float64) @ k_inv.T) * z[:, None]
    cam_a = cam_b @ t_ab[:3, :3].T + t_ab[:3, 3]
    front = cam_a[:, 2] > 1e-6
    pix = cam_a[front] @ k.T
    ua, va = pix[:, 0] / pix[:, 2], pix[:, 1] / pix[:, 2]
    ia, ja = np.rint(va).astype(np.int64), np.rint(ua).astype(np.int64)
    inside = (ia >= 0) & (ia < depth_a.shape[0]) & (ja >= 0) & (ja < depth_a.shape[1])
    observed = depth_a[ia[inside], ja[inside]]
    predicted = cam_a[front][inside, 2]
    agree = np.abs(observed - predicted) <= config.depth_tolerance * observed
    return float(agree.sum() / v.size)
