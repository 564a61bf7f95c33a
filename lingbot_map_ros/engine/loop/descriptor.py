"""Place recognition: a global descriptor pooled from the model's own tokens, searched over keyframes.

The descriptor is the model's DINOv2 patch tokens of a keyframe's network image (as SwiftVGGT pools VGGT's
encoder tokens), each token L2-normalised, then averaged and L2-normalised ([C] float32, C = 1024 for the
released model; `model.aggregator.place_descriptor`). The live step pools it on the GPU from the tokens it
computes anyway (`StepOutput.place_descriptor` -> `FrameResult.place_descriptor`), so the closer takes it from
the keyframe's result: no second encoder pass (issue 31). `ModelDescriptor` is the same function as a second
pass (the encoder alone, no KV cache): the closer's fallback for a result without one (a model double's).
`DescriptorIndex` holds one row per keyframe and returns the top-k cosine similarities outside a
recent-keyframe exclusion window (numpy).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np
import torch

from lingbot_map_ros.model.aggregator import place_descriptor

from ..contracts import StreamingModel


class Describe(Protocol):
    def __call__(self, image_net: np.ndarray) -> np.ndarray:
        """[h, w, 3] uint8 network-size image -> [D] float32 unit descriptor."""


class ModelDescriptor:
    """Descriptor from a second pass of the model's encoder (module doc). Runs on the model's device, under
    `torch.inference_mode` and the model's autocast (as the live step); touches no stream state."""

    def __init__(self, model: StreamingModel) -> None:
        self.model = model

    def __call__(self, image_net: np.ndarray) -> np.ndarray:
        model = self.model
        dtype = model.precision.aggregator_dtype  # type: ignore[attr-defined]
        with torch.inference_mode(), model.autocast():  # type: ignore[attr-defined]
            # writable and contiguous (copied only when not): torch warns on a read-only array (issue 29)
            images = torch.from_numpy(np.require(image_net, requirements=["C", "W"])).to(model.device)
            images = images.permute(2, 0, 1)[None].to(torch.float32).div_(255.0).to(dtype)
            tokens = model.aggregator.backbone_tokens(images)  # type: ignore[attr-defined]
            return place_descriptor(tokens)[0].cpu().numpy().astype(np.float32)


@dataclass(frozen=True)
class Candidate:
    key: int
    similarity: float


class DescriptorIndex:
    """Descriptors of the keyframes in insertion order (rows [K, D] float32, unit norm), in one matrix that
    grows by doubling: an add writes a row, a query reads a view (no per-query stacking of every row)."""

    def __init__(self) -> None:
        self._keys: list[int] = []
        self._matrix = np.empty((0, 0), np.float32)

    def __len__(self) -> int:
        return len(self._keys)

    def add(self, key: int, descriptor: np.ndarray) -> None:
        row = np.asarray(descriptor, np.float32)
        n = len(self._keys)
        if n == 0:
            self._matrix = np.empty((16, row.shape[0]), np.float32)
        elif row.shape != (self._matrix.shape[1],):
            raise ValueError(f"descriptor of shape {row.shape}, the index holds [{self._matrix.shape[1]}]")
        elif n == len(self._matrix):
            self._matrix = np.concatenate([self._matrix, np.empty_like(self._matrix)])
        self._matrix[n] = row
        self._keys.append(key)

    def remove(self, keys: set[int]) -> None:
        keep = np.array([k not in keys for k in self._keys], bool)
        rows = self._matrix[: len(self._keys)][keep]
        self._keys = [k for k, kept in zip(self._keys, keep, strict=True) if kept]
        self._matrix[: len(rows)] = rows

    def query(
        self, descriptor: np.ndarray, exclude_recent: int, top_k: int, min_similarity: float
    ) -> list[Candidate]:
        """The `top_k` most similar keyframes (cosine >= `min_similarity`), best first, leaving out the
        `exclude_recent` newest (the query's own neighbourhood in time)."""
        searchable = len(self._keys) - exclude_recent
        if searchable <= 0:
            return []
        sims = self._matrix[:searchable] @ np.asarray(descriptor, np.float32)
        order = np.argsort(-sims, kind="stable")[:top_k]
        return [Candidate(self._keys[i], float(sims[i])) for i in order if sims[i] >= min_similarity]
