"""Bounded causal K/V history of the camera head: one camera token per keyframe, per pass and trunk block.

The reference keeps every keyframe's fp32 K/V forever and concatenates + clones the whole history each step.
Here one buffer per (pass, block) is preallocated with `capacity + 1` slots:

* slots `[0, anchors)` hold the anchor frames (phase 1), never overwritten;
* slots `[anchors, capacity)` hold later keyframes; once full, a keyframe overwrites the oldest one (ring);
* the last slot is scratch for a non-keyframe when the history is full.

The visible set is always a contiguous prefix `[0, visible)`, so attention needs no gather and no copy.
While fewer than `capacity` keyframes are stored, the semantics are exactly the reference's (attention over
all cached camera tokens plus the new ones). Slot order is irrelevant: the trunk has no mask and no positional
encoding.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F


@dataclass(frozen=True)
class CameraStep:
    """Slots reserved for the new tokens of one step and the visible prefix length.

    `write` is the first slot of `count` consecutive slots; `visible` is the prefix the new tokens attend to;
    `overwrite` marks a keyframe that replaces the oldest non-anchor keyframe of a full history.
    """

    write: int
    count: int
    visible: int
    keyframe: bool
    overwrite: bool = False


class CameraHistory:
    """Preallocated K/V ring per (pass, block): k/v `[passes, blocks, heads, capacity + 1, head_dim]`."""

    def __init__(
        self,
        num_passes: int,
        num_blocks: int,
        num_heads: int,
        head_dim: int,
        capacity: int,
        device: torch.device,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        if capacity < 1:
            raise ValueError(f"camera_history must be >= 1, got {capacity}")
        shape = (num_passes, num_blocks, num_heads, capacity + 1, head_dim)
        self.k = torch.zeros(shape, device=device, dtype=dtype)
        self.v = torch.zeros(shape, device=device, dtype=dtype)
        self.capacity = capacity
        self.stored = 0
        self.anchors = 0
        self._ring_next = 0

    def reset(self) -> None:
        """Forget every stored token (buffers are kept)."""
        self.stored = 0
        self.anchors = 0
        self._ring_next = 0

    def install_anchors(self, source: CameraHistory) -> None:
        """Forget every stored token and take `source`'s anchors (a history holding only its anchor step, of
        the same passes, blocks, heads and head_dim) as this history's (a prepared re-anchor,
        model/anchor_pass.py)."""
        count = source.anchors
        if count == 0 or source.stored != count or count > self.capacity:
            raise ValueError(
                f"need a source holding only its anchors (1..{self.capacity}), got {source.stored} stored, "
                f"{source.anchors} anchors"
            )
        self.reset()
        self.k[:, :, :, :count].copy_(source.k[:, :, :, :count])
        self.v[:, :, :, :count].copy_(source.v[:, :, :, :count])
        self.stored = self.anchors = count

    def begin(self, num_new: int, keyframe: bool) -> CameraStep:
        """Reserve slots for `num_new` tokens (the first step on an empty history sets the anchors)."""
        if self.stored + num_new <= self.capacity:
            return CameraStep(self.stored, num_new, self.stored + num_new, keyframe)
        if num_new != 1:
            raise ValueError(
                f"camera history of {self.capacity} slots cannot take {num_new} new frames "
                f"({self.stored} stored); raise camera_history"
            )
        if not keyframe:
            return CameraStep(self.capacity, 1, self.capacity + 1, keyframe)
        if self.anchors >= self.capacity:
            raise ValueError(f"camera_history {self.capacity} leaves no room next to {self.anchors} anchors")
        return CameraStep(self.anchors + self._ring_next, 1, self.capacity, keyframe, overwrite=True)

    def end(self, step: CameraStep) -> None:
        """Commit a keyframe step (non-keyframe steps leave the history exactly as before `begin`)."""
        if not step.keyframe:
            return
        if self.stored == 0:
            self.anchors = step.count
        if step.overwrite:
            self._ring_next = (self._ring_next + 1) % (self.capacity - self.anchors)
        else:
            self.stored += step.count

    def attend_masked(
        self,
        slot: torch.Tensor,
        bias: torch.Tensor,
        pass_index: int,
        block: int,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
    ) -> torch.Tensor:
        """`attend` with the step as tensors, for CUDA-graph replay: one new token written at slot `slot`
        (`[1]` int64), attention over all `capacity + 1` slots with additive `bias` (`[capacity + 1]`
        float: 0 for the visible prefix, -inf after it). Same keys as `attend`, so the same result up to
        the order of the softmax sums. q/k/v `[1, H, 1, D]` -> `[1, H, 1, D]`."""
        keys, values = self.k[pass_index, block], self.v[pass_index, block]
        keys.index_copy_(1, slot, k[0].to(keys.dtype))
        values.index_copy_(1, slot, v[0].to(values.dtype))
        # One query: two small matrix products, not an attention kernel (those tile over queries and leave
        # the GPU idle for a single one; measured 3.6 ms for the 16 calls of a step with SDPA + mask).
        scores = torch.matmul(q.to(keys.dtype), keys.transpose(-1, -2).unsqueeze(0)) * q.shape[-1] ** -0.5
        return torch.matmul((scores + bias.to(keys.dtype)).softmax(dim=-1), values.unsqueeze(0))

    def attend(
        self, step: CameraStep, pass_index: int, block: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor
    ) -> torch.Tensor:
        """Write k/v of the new tokens and attend: q/k/v `[1, H, S, D]` -> `[1, H, S, D]`."""
        end = step.write + step.count
        self.k[pass_index, block, :, step.write : end] = k[0].to(self.k.dtype)
        self.v[pass_index, block, :, step.write : end] = v[0].to(self.v.dtype)
        keys = self.k[pass_index, block, :, : step.visible].unsqueeze(0)
        values = self.v[pass_index, block, :, : step.visible].unsqueeze(0)
        return F.scaled_dot_product_attention(q.to(keys.dtype), keys, values)
