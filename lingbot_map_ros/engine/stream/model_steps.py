"""`ModelSteps`: a session's model steps on its stream — frames to the device, ``model.step``, outputs back.

The uint8 network images travel to the device (pinned and asynchronous on CUDA) and are converted there; the
step's pose encodings, depth and confidence come back through pinned host memory with asynchronous copies, so
a step can be launched (`launch`) and its outputs collected later (`collect`): one synchronisation instead of
one blocking copy each. Collected outputs are checked finite (`NonFiniteOutputError`). The frames' place
descriptors (`StepOutput.place_descriptor`, [S, C], pooled on the GPU inside the step) come back the same way:
the loop closer gets them on the CPU with the results, no second encoder pass.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from lingbot_map_ros.model import StreamState
from lingbot_map_ros.model.anchor_pass import AnchorPass, count_parts

from ..contracts import NonFiniteOutputError, StreamingModel
from .preprocess import PreprocessGeometry, resize_uint8


@dataclass(frozen=True)
class LaunchedStep:
    """A queued model step of S frames: its outputs on the way to the host.

    Attributes:
        outputs: pose_enc [S, 9], depth [S, h, w], depth_conf [S, h, w], place descriptor [S, C] float32
            tensors (on CUDA: pinned host buffers that the copies queued behind the step fill); depth and
            depth_conf None for a step without the depth head, the descriptor None from a model double.
        done: CUDA event recorded after those copies; None off CUDA (the outputs are ready).
    """

    outputs: tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None, torch.Tensor | None]
    done: torch.cuda.Event | None = None


class ModelSteps:
    """Model steps of one stream: ``state`` (the stream's caches) on ``device``, images in ``dtype``."""

    def __init__(
        self, model: StreamingModel, state: StreamState, device: torch.device, dtype: torch.dtype
    ) -> None:
        self.model = model
        self.state = state
        self.device = device
        self.dtype = dtype

    def to_model(self, images_net: list[np.ndarray]) -> torch.Tensor:
        """[S] × [h, w, 3] uint8 → [S, 3, h, w] tensor in [0, 1] on the model's device.

        The uint8 pixels travel (a quarter of the float32 bytes; pinned and asynchronous on CUDA) and are
        converted on the device: x / 255 in float32, the same correctly rounded values as ``to_chw_float``.
        """
        batch = torch.from_numpy(np.stack(images_net))
        if self.device.type == "cuda":
            batch = batch.pin_memory().to(self.device, non_blocking=True)
        images = batch.permute(0, 3, 1, 2).to(torch.float32).div_(255.0).contiguous()
        return images.to(self.dtype)

    def step(self, images_net: list[np.ndarray], keyframe: bool, depth: bool = True) -> tuple:
        """Run ``model.step``; return (pose_enc [S, 9], depth [S, h, w], conf [S, h, w], descriptor [S, C])
        float32 numpy (depth and conf None when ``depth`` is False: the depth head did not run; the
        descriptor None when the model returns none)."""
        return self.collect(self.launch(images_net, keyframe, depth))

    def launch(self, images_net: list[np.ndarray], keyframe: bool, depth: bool = True) -> LaunchedStep:
        """Upload the frames and queue ``model.step`` and the copies of its outputs to the host.

        On CUDA this returns once the work is queued and :meth:`collect` waits for it; elsewhere it is
        synchronous. ``depth`` False skips the depth head.
        """
        images = self.to_model(images_net)
        with torch.inference_mode():
            if depth:  # the call as before issue 22 (test doubles of the model need not know `depth`)
                return self.to_host(self.model.step(images, self.state, keyframe=keyframe))
            return self.to_host(self.model.step(images, self.state, keyframe=keyframe, depth=False))

    def anchor_pass_groups(self, requested: int) -> int:
        """Frames an anchor pass of the stream's S0 frames is spread over when ``requested`` are asked: at
        most one per part of it (`model/anchor_pass.py`); 0 when the model has no anchor pass (a test
        double) or ``requested`` is 0."""
        if requested < 1 or not hasattr(self.model, "begin_anchor_pass"):
            return 0
        config = self.model.config
        return min(requested, count_parts(config.depth, self.state.config.scale_frames))

    def begin_anchor_pass(self, images_net: list[np.ndarray], groups: int) -> AnchorPass:
        """The anchor step of these S0 network images for this stream in ``groups`` runs, beside its
        streaming steps (nothing of the stream changes until its ``install``)."""
        return self.model.begin_anchor_pass(self.to_model(images_net), self.state, groups)

    def to_host(self, out: object) -> LaunchedStep:
        """Queue the copies of a ``StepOutput``'s pose_enc, depth, depth_conf and place descriptor to the host
        (see `launch`)."""
        descriptor = getattr(out, "place_descriptor", None)  # a model double may have none
        return self.tensors_to_host(out.pose_enc, out.depth, out.depth_conf, descriptor)

    def tensors_to_host(self, *tensors: torch.Tensor | None) -> LaunchedStep:
        """Queue float32 copies of ``tensors`` (None stays None) to pinned host memory behind the work queued
        so far (on CUDA; elsewhere they are ready at once); `wait` or `collect` gets them."""
        with torch.inference_mode():
            outputs = tuple(None if t is None else t.detach().float() for t in tensors)
            if self.device.type != "cuda":
                return LaunchedStep(outputs)
            hosts = tuple(
                None if t is None else torch.empty(t.shape, dtype=t.dtype, pin_memory=True) for t in outputs
            )
            for host, t in zip(hosts, outputs, strict=True):
                if t is not None:
                    host.copy_(t, non_blocking=True)
            done = torch.cuda.Event()
            done.record(torch.cuda.current_stream(self.device))
            return LaunchedStep(hosts, done)

    @staticmethod
    def wait(launched: LaunchedStep) -> tuple[np.ndarray | None, ...]:
        """Wait for a launched step's copies; its outputs as numpy (unchecked)."""
        if launched.done is not None:
            launched.done.synchronize()
        return tuple(None if t is None else t.numpy() for t in launched.outputs)

    def collect(self, launched: LaunchedStep) -> tuple[np.ndarray, ...]:
        """Wait for a launched step's outputs; (pose_enc, depth, conf, descriptor) float32 numpy, the first
        three checked finite (a non-finite descriptor is dropped: None).

        Raises:
            NonFiniteOutputError: NaN or inf in any of them.
        """
        arrays = self.wait(launched)
        if arrays[3] is not None and not np.isfinite(arrays[3]).all():
            arrays = (*arrays[:3], None)
        bad = [
            name
            for name, a in zip(("pose", "depth", "depth_conf"), arrays[:3], strict=True)
            if a is not None and not np.isfinite(a).all()
        ]
        if bad:
            raise NonFiniteOutputError(
                f"the model returned non-finite {', '.join(bad)} for {len(arrays[0])} frame(s)"
            )
        return arrays

    def warm_up(self, geometry: PreprocessGeometry, scale_frames: int, streaming_frames: int) -> None:
        """Run random images of ``geometry``'s source size through the stream (the anchor step on
        ``scale_frames`` of them, then ``streaming_frames`` streaming steps, keyframes and non-keyframes
        alternating), then forget them: the stream's caches are reset."""
        rng = np.random.default_rng(0)
        height, width = geometry.source_hw
        frames = [
            resize_uint8(rng.integers(0, 256, (height, width, 3), dtype=np.uint8), geometry)
            for _ in range(scale_frames + streaming_frames)
        ]
        try:
            self.step(frames[:scale_frames], keyframe=True)
            for i, frame in enumerate(frames[scale_frames:]):
                self.step([frame], keyframe=i % 2 == 0)
        finally:
            self.state.reset()
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)
                torch.cuda.empty_cache()  # the capture's side-stream blocks: not needed again

    def release_failed_step(self) -> None:
        """Return what a failed step allocated to the device (out-of-memory recovery; CUDA only)."""
        if self.device.type == "cuda":
            torch.cuda.empty_cache()

    def gpu_memory(self) -> dict[str, float] | None:
        """GPU memory of this process in GiB (allocated now, peak allocated, reserved) on CUDA."""
        if self.device.type != "cuda":
            return None
        gib = 2**30
        return {
            "allocated": round(torch.cuda.memory_allocated(self.device) / gib, 3),
            "peak_allocated": round(torch.cuda.max_memory_allocated(self.device) / gib, 3),
            "reserved": round(torch.cuda.memory_reserved(self.device) / gib, 3),
        }
