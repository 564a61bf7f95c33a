"""Streaming state of one camera stream: the global-attention KV cache and the camera-head history.

`StreamConfig` sizes both; `StreamState` owns them (made by `LingBotMap.new_stream`); `StepOutput` is what
`LingBotMap.step` returns. See docs/architecture.md (model contract) and docs/model.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from lingbot_map_ros.cache import DEFAULT_MAX_SPECIAL_FRAMES, KVCacheConfig, KVCacheStats, PagedKVCache
from lingbot_map_ros.cache.config import (
    DEFAULT_MAX_WINDOW,
    DEFAULT_SLIDING_WINDOW,
    StageHook,
    check_sliding_window,
)
from lingbot_map_ros.cache.shared_pool import PooledKVCache, SharedKVPool
from lingbot_map_ros.model.camera_history import CameraHistory
from lingbot_map_ros.model.config import ModelConfig

if TYPE_CHECKING:
    from lingbot_map_ros.model.graphed import GraphedStreamStep

DEFAULT_CAMERA_HISTORY = 1024


@dataclass(frozen=True)
class StreamConfig:
    """Per-stream cache sizes.

    scale_frames: anchor frames of the first step (S0), never evicted; also the scale-token boundary.
    sliding_window / max_window: live window of non-anchor keyframes in global attention (resizable); the
        range is checked where the window is held (the cache's `KVCacheConfig`, `StreamState`), not here.
    max_special_frames: cap on frames whose 6 special tokens stay visible in global attention.
    camera_history: camera-head keyframes kept per refinement pass (anchors included; reference: all).
    backend: global-attention backend of the cache (one of `cache.backends.BACKENDS`).
    cuda_graphs: on CUDA, replay streaming steps (S = 1) as CUDA graphs around the eager global attentions
        (`model/graphed.py`, docs/performance.md); False runs the plain eager path. Ignored on CPU.
    compile_blocks: with cuda_graphs, also fuse the blocks' element-wise work with `torch.compile` (compile
        time on the first streaming step; docs/performance.md).
    """

    scale_frames: int = 8
    sliding_window: int = DEFAULT_SLIDING_WINDOW
    max_window: int = DEFAULT_MAX_WINDOW
    max_special_frames: int = DEFAULT_MAX_SPECIAL_FRAMES
    camera_history: int = DEFAULT_CAMERA_HISTORY
    backend: str = "auto"
    cuda_graphs: bool = True
    compile_blocks: bool = False

    def __post_init__(self) -> None:
        if self.scale_frames < 1:
            raise ValueError(f"scale_frames must be >= 1, got {self.scale_frames}")
        if self.camera_history <= self.scale_frames:
            raise ValueError(
                f"camera_history ({self.camera_history}) must exceed scale_frames ({self.scale_frames})"
            )


@dataclass(frozen=True)
class StepOutput:
    """Predictions for the S frames of one step (tensors on the model's device, float32).

    pose_enc `[S, 9]` (translation, quaternion xyzw, fov_h, fov_w; camera-to-world), pose_enc_list
    `[S, iters, 9]` (after each camera refinement pass), pose_enc_raw_list `[S, iters, 9]` (before the output
    activation), depth `[S, H, W]`, depth_conf `[S, H, W]` (both None after `step(..., depth=False)`), and the
    4 aggregator outputs `[S, P, 2C]` when `step(..., keep_tokens=True)` (else None), and place_descriptor
    `[S, C]`: each frame's DINOv2 patch tokens pooled into a unit vector (`aggregator.place_descriptor`; the
    loop closer's place descriptor, pooled inside the step: no second encoder pass; None from a model double).
    """

    pose_enc: torch.Tensor
    pose_enc_list: torch.Tensor
    pose_enc_raw_list: torch.Tensor
    depth: torch.Tensor | None
    depth_conf: torch.Tensor | None
    aggregated_tokens: list[torch.Tensor] | None = None
    place_descriptor: torch.Tensor | None = None


@dataclass(frozen=True)
class StreamStats:
    """Snapshot for /diagnostics: frames stored, camera-history fill, and the KV cache's own stats."""

    frames_stored: int
    image_hw: tuple[int, int] | None
    camera_frames: int
    camera_capacity: int
    kv_cache: KVCacheStats | None


class StreamState:
    """Caches of one stream. The KV cache is allocated on the first step, when the token count is known.

    With ``pool`` (several streams of one model, `LingBotMap.step_batch`), the KV cache is a region of that
    shared pool (cache/shared_pool.py) instead of a pool of its own.
    """

    def __init__(
        self,
        model_config: ModelConfig,
        config: StreamConfig,
        device: torch.device,
        kv_dtype: torch.dtype,
        pool: SharedKVPool | None = None,
    ) -> None:
        self.model_config = model_config
        self.config = config
        self.device = device
        self.kv_dtype = kv_dtype
        self.pool = pool
        self.kv_cache: PagedKVCache | None = None
        self.image_hw: tuple[int, int] | None = None
        self._window_before_cache = config.sliding_window  # the live window while no cache exists
        self.graphed: GraphedStreamStep | None = None  # CUDA-graph fast path, made by LingBotMap.step
        self._stage_hook: StageHook | None = None
        camera_dim = 2 * model_config.embed_dim
        self.camera = CameraHistory(
            model_config.camera_num_iterations,
            model_config.camera_trunk_depth,
            model_config.camera_num_heads,
            camera_dim // model_config.camera_num_heads,
            config.camera_history,
            device,
        )

    @property
    def frames_stored(self) -> int:
        """Frames committed to the KV cache since the last reset (the next frame's temporal RoPE index)."""
        return 0 if self.kv_cache is None else self.kv_cache.frames_stored

    @property
    def in_anchor_phase(self) -> bool:
        """True until the first (anchor) step has been committed."""
        return self.frames_stored == 0

    def reset(self) -> None:
        """Forget all frames; the next step is an anchor step and may use a new resolution."""
        if self.kv_cache is not None:
            self.kv_cache.reset()
        self.camera.reset()
        self.image_hw = None

    @property
    def stage_hook(self) -> StageHook | None:
        """Instrumentation of its steps (`cache.config.StageHook`), called by its cache and graphs."""
        return self._stage_hook

    @stage_hook.setter
    def stage_hook(self, hook: StageHook | None) -> None:
        self._stage_hook = hook
        if self.kv_cache is not None:
            self.kv_cache.stage_hook = hook
        if self.graphed is not None:
            self.graphed.stage_hook = hook

    @property
    def sliding_window(self) -> int:
        """The live window of global attention: the cache's once it exists."""
        return self._window_before_cache if self.kv_cache is None else self.kv_cache.sliding_window

    def set_sliding_window(self, sliding_window: int) -> None:
        """Resize the live window of global attention (1..max_window) without a reset."""
        if self.kv_cache is not None:
            self.kv_cache.set_sliding_window(sliding_window)
        else:
            self._window_before_cache = check_sliding_window(sliding_window, self.config.max_window)

    def stats(self) -> StreamStats:
        return StreamStats(
            frames_stored=self.frames_stored,
            image_hw=self.image_hw,
            camera_frames=self.camera.stored,
            camera_capacity=self.camera.capacity,
            kv_cache=None if self.kv_cache is None else self.kv_cache.stats(),
        )

    def cache_for(self, image_hw: tuple[int, int]) -> PagedKVCache:
        """The KV cache for frames of `image_hw`; fixes the resolution until `reset()` (else ValueError)."""
        if self.image_hw is not None and self.image_hw != image_hw:
            raise ValueError(
                f"stream resolution is fixed at {self.image_hw} (H, W) until reset(); got {image_hw}"
            )
        patch = self.model_config.patch_size
        patches = (image_hw[0] // patch) * (image_hw[1] // patch)
        if self.kv_cache is None or self.kv_cache.config.patches_per_frame != patches:
            c, m, window = self.config, self.model_config, self.sliding_window
            self.kv_cache = None  # release the old pools before allocating new ones
            kv_config = KVCacheConfig(
                num_layers=m.depth,
                num_heads=m.num_heads,
                head_dim=m.head_dim,
                patches_per_frame=patches,
                num_special=m.num_special_tokens,
                scale_frames=c.scale_frames,
                sliding_window=window,
                max_window=c.max_window,
                max_special_frames=c.max_special_frames,
                dtype=self.kv_dtype,
                device=self.device,
            )
            if self.pool is None:
                self.kv_cache = PagedKVCache(kv_config, backend=c.backend)
            else:
                self.kv_cache = PooledKVCache(self.pool, kv_config, backend=c.backend)
            self.kv_cache.stage_hook = self._stage_hook
        self.image_hw = image_hw
        return self.kv_cache
