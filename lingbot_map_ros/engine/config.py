"""`SessionConfig`: streaming policy of a `StreamingSession` (anchors, window, keyframes, long streams)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

# The choices and defaults below are owned by cache/ and model/ and re-exported here, so ros/ and tools/ reach
# them through engine/ (the node's parameter table, `run`'s flags, benchmarks): import them, never copy them.
from lingbot_map_ros.cache.backends import BACKENDS as BACKENDS
from lingbot_map_ros.cache.backends import check_backend
from lingbot_map_ros.cache.config import DEFAULT_MAX_WINDOW as DEFAULT_MAX_WINDOW
from lingbot_map_ros.cache.config import DEFAULT_SLIDING_WINDOW as DEFAULT_SLIDING_WINDOW
from lingbot_map_ros.cache.config import check_sliding_window
from lingbot_map_ros.model import StreamConfig
from lingbot_map_ros.model.config import PATCH_SIZE as PATCH_SIZE
from lingbot_map_ros.model.config import PRESETS
from lingbot_map_ros.model.config import check_image_width as check_image_width

from .settings import setting

#: The model presets (`ModelConfig.preset`): the released model first, then the small one for tests.
PRESET_NAMES: tuple[str, ...] = tuple(PRESETS)
#: Length of the released model's 3D-RoPE table: the temporal index of a step must stay below it.
ROPE_TABLE_FRAMES = 1024


@dataclass(frozen=True)
class SessionConfig:
    """Streaming policy.

    Attributes:
        scale_frames: S0, anchor frames run together (bidirectionally) at a stream's start; never evicted.
        sliding_window: live window of non-anchor keyframes in the global-attention cache (live-resizable).
        max_window: capacity of the window pool; ``set_sliding_window`` accepts 1..max_window.
        keyframe_interval: every N-th streaming frame is a keyframe (stored); the first streaming frame
            always is. Non-keyframes attend to the cache and are rolled back.
        image_width: network input width in pixels (multiple of ``PATCH_SIZE``; 518 for the released model).
        device: where the images go; None = the device of the model's parameters.
        dtype: dtype of the image tensor handed to the model (the model applies its own precision policy).
        max_stored_frames: long-stream bound. When the cache holds this many frames (anchors + keyframes since
            the last (re-)anchor), the stream is re-anchored on the most recent ``scale_frames`` keyframes and
            the trajectory is carried over with a Sim(3) (docs/engine.md). At most 1,024 (the RoPE table);
            default 320, the sequence length the model was trained on.
        reanchor_steps: a re-anchor at ``max_stored_frames`` is prepared over this many streaming frames
            before the bound (the model's anchor pass in parts beside the live stream, then a take-over that
            only copies caches: engine/stream/prepared_reanchor.py); 0 runs it in one step at the bound.
        backend: attention backend of the global-attention cache (one of ``cache.backends.BACKENDS``).
        cuda_graphs: on CUDA, run streaming steps through the model's CUDA-graph fast path
            (docs/performance.md); False keeps the plain eager path. Ignored on CPU.
        compile_blocks: with cuda_graphs, fuse the blocks' element-wise work with torch.compile (compiles on
            the first streaming step).
        camera_history: camera-head keyframe history; None = ``max_stored_frames`` (exactly the reference's
            full-history semantics, since a segment never stores more frames than that).
        realign_conf_threshold: pixels used for the re-anchor depth-scale estimate need confidence above
            this in both the old and the new prediction (falls back to all pixels when too few pass).
        timing_window: number of recent steps the per-stage timing statistics average over.
        depth_every_n: run the depth head on every n-th streaming frame only (plus frames pushed with
            ``depth=True`` and what a re-anchor needs: engine/stream/depth_schedule.py); the others' results
            have no
            depth (``FrameResult.depth`` None). 1 (default): every frame.
    """

    scale_frames: int = setting(8, "Anchor frames (phase 1), never evicted.", bounds=(1, 64))
    sliding_window: int = setting(
        DEFAULT_SLIDING_WINDOW, "Non-anchor frames kept in the KV cache.", bounds=(1, ROPE_TABLE_FRAMES)
    )
    max_window: int = setting(
        DEFAULT_MAX_WINDOW,
        "Cache pool capacity: upper bound of kv_cache.sliding_window.",
        bounds=(1, ROPE_TABLE_FRAMES),
    )
    keyframe_interval: int = setting(
        1, "Every N-th streaming frame is stored in the cache.", bounds=(1, 1000)
    )
    image_width: int = setting(
        518,
        f"Network input width in pixels (multiple of {PATCH_SIZE}; 518 as released).",
        bounds=(2 * PATCH_SIZE, 74 * PATCH_SIZE),
    )
    device: str | None = None
    dtype: torch.dtype = torch.float32
    max_stored_frames: int = 320
    backend: str = setting("auto", "Global-attention backend.", choices=BACKENDS)
    cuda_graphs: bool = setting(
        True,
        "On CUDA, replay streaming steps as CUDA graphs around the attention (same outputs, faster).",
    )
    compile_blocks: bool = setting(
        False,
        "With model.cuda_graphs, torch.compile the blocks inside the graphs (~24% faster on the H200). "
        "Compiled during configure by the warm-up (about a minute the first time, seconds with the compile "
        "cache); false: no compiler at all.",
        node_default=True,
    )
    reanchor_steps: int = setting(
        0,
        "Prepare each long-stream re-anchor over this many streaming frames before the cache bound (the "
        "new anchor pass runs in parts beside the live stream, then takes over), so no frame waits for the "
        "whole pass; its anchors are then that many frames old (continuity across the bound unverified "
        "with real weights: docs/engine.md). 0: one step at the bound.",
        bounds=(0, 1000),
    )
    camera_history: int | None = None
    realign_conf_threshold: float = 1.5
    timing_window: int = 100
    depth_every_n: int = setting(
        1,
        "Run the depth head (~2.7 ms of a ~31 ms step on an H200) on every n-th streaming frame only, and on "
        "every frame while ~/depth has a subscriber (with publish.depth); frames without it still get "
        "TF, odometry, camera_pose and camera_info, but no ~/depth, ~/frame_cloud or map update. 1: every "
        "frame (docs/performance.md, issue 22).",
        bounds=(1, 1000),
    )

    def __post_init__(self) -> None:
        def _int_at_least(name: str, low: int) -> None:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"SessionConfig.{name} must be an int >= {low}, got {value!r}")

        _int_at_least("scale_frames", 1)
        _int_at_least("max_window", 1)
        _int_at_least("keyframe_interval", 1)
        _int_at_least("timing_window", 1)
        _int_at_least("depth_every_n", 1)
        _int_at_least("reanchor_steps", 0)
        check_sliding_window(self.sliding_window, self.max_window)
        check_image_width(self.image_width, "SessionConfig.image_width")
        if not self.scale_frames < self.max_stored_frames <= ROPE_TABLE_FRAMES:
            raise ValueError(
                f"SessionConfig.max_stored_frames must be in ({self.scale_frames}, {ROPE_TABLE_FRAMES}] "
                f"(more than scale_frames, at most the RoPE table), got {self.max_stored_frames}"
            )
        if self.camera_history is not None and self.camera_history <= self.scale_frames:
            raise ValueError(
                f"SessionConfig.camera_history must be > scale_frames={self.scale_frames}, "
                f"got {self.camera_history}"
            )
        check_backend(self.backend)
        if self.dtype not in (torch.float32, torch.float16, torch.bfloat16):
            raise ValueError(f"SessionConfig.dtype must be a float dtype, got {self.dtype}")

    @property
    def effective_camera_history(self) -> int:
        return self.max_stored_frames if self.camera_history is None else self.camera_history

    def stream_config(self) -> StreamConfig:
        """The model stream's configuration: the window, the cache's specials (every frame stored until a
        re-anchor, at least the anchors and a full window), camera history, backend, graphs, compilation."""
        return StreamConfig(
            scale_frames=self.scale_frames,
            sliding_window=self.sliding_window,
            max_window=self.max_window,
            max_special_frames=max(self.max_stored_frames, self.scale_frames + self.max_window),
            camera_history=self.effective_camera_history,
            backend=self.backend,
            cuda_graphs=self.cuda_graphs,
            compile_blocks=self.compile_blocks,
        )
