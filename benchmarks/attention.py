"""Time one frame step's global attention (all layers) through PagedKVCache, per backend, as a stream grows.

For each backend a cache with the model's geometry (24 layers, 16 x 64, 999 patches + 6 specials per frame at
518x378, 8 anchors, window 64, max_window 128, bf16) is fast-forwarded with random frames
(``CacheStep.write``, no attention) to each checkpoint (default 100, 1,000 and 10,000 frames), then timed
over ``--repeats`` keyframe steps with CUDA events:

* ``step ms``: begin_step (plan) + attend on every layer (K/V write + attention) + end_step, i.e. everything
the
  cache adds to a frame;
* ``attn ms``: the backends' attention kernels alone, all layers.

Medians are printed per backend and checkpoint, with the visible keys and the pool's bytes, then the ratio
of the last checkpoint to the first (flatness). Usage on the H200 (see docs/benchmarks.md)::

    python3 benchmarks/attention.py --backends torch,flashinfer
    python3 benchmarks/attention.py --device cpu --layers 2 --patches 27 --frames 20,200 --repeats 3  # smoke
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import dataclass

import torch

from lingbot_map_ros.cache import KVCacheConfig, PagedKVCache
from lingbot_map_ros.cache.config import DEFAULT_MAX_WINDOW, DEFAULT_SLIDING_WINDOW


@dataclass
class Row:
    backend: str  # as requested ("auto" is printed with what it resolved to)
    resolved: str
    frames: int
    visible_keys: int
    step_ms: float
    attn_ms: float
    pool_bytes: int


class Timer:
    """CUDA events on CUDA, perf_counter on CPU; ``elapsed_ms`` synchronises."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"

    def start(self) -> object:
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            return event
        return time.perf_counter()

    def elapsed_ms(self, begin: object) -> float:
        if self.cuda:
            end = torch.cuda.Event(enable_timing=True)
            end.record()
            end.synchronize()
            return begin.elapsed_time(end)
        return (time.perf_counter() - begin) * 1e3


def random_frames(config: KVCacheConfig, count: int, seed: int) -> torch.Tensor:
    """A bank of ``count`` random frames: ``[count, 3, L, tokens, H, D]`` (q, k, v per layer)."""
    gen = torch.Generator(device=config.device).manual_seed(seed)
    shape = (count, 3, config.num_layers, config.tokens_per_frame, config.num_heads, config.head_dim)
    return torch.randn(shape, generator=gen, device=config.device, dtype=config.dtype)


def advance(cache: PagedKVCache, bank: torch.Tensor, frames: int) -> None:
    """Stream keyframes (written, not attended) until ``cache.frames_stored == frames``."""
    config = cache.config
    if cache.frames_stored == 0:
        step = cache.begin_step(config.scale_frames, keyframe=True)
        kv = bank[: config.scale_frames, 1:].permute(1, 2, 0, 3, 4, 5).flatten(2, 3)
        for layer in range(config.num_layers):
            step.write(layer, kv[0, layer], kv[1, layer])
        cache.end_step(step)
    while cache.frames_stored < frames:
        frame = bank[cache.frames_stored % bank.shape[0]]
        step = cache.begin_step(1, keyframe=True)
        for layer in range(config.num_layers):
            step.write(layer, frame[1, layer], frame[2, layer])
        cache.end_step(step)


def time_steps(
    cache: PagedKVCache, bank: torch.Tensor, repeats: int, timer: Timer
) -> tuple[float, float, int]:
    """Median step ms, median all-layer attention-kernel ms and the visible keys of timed keyframe steps."""
    config = cache.config
    step_ms, attn_ms = [], []
    visible = 0
    for i in range(repeats + 2):  # two warm-up steps
        frame = bank[i % bank.shape[0]]
        begin = timer.start()
        step = cache.begin_step(1, keyframe=True)
        for layer in range(config.num_layers):
            step.attend(layer, frame[0, layer], frame[1, layer], frame[2, layer])
        cache.end_step(step)
        elapsed = timer.elapsed_ms(begin)
        begin = timer.start()
        for layer in range(config.num_layers):
            cache.backend.run(frame[0, layer], cache.k_pool[layer], cache.v_pool[layer])
        kernels = timer.elapsed_ms(begin)
        if i >= 2:
            step_ms.append(elapsed)
            attn_ms.append(kernels)
            visible = step.visible_tokens
    return statistics.median(step_ms), statistics.median(attn_ms), visible


def time_dense_contiguous(config: KVCacheConfig, keys: int, repeats: int, timer: Timer) -> float:
    """All-layer ms of cuDNN-first SDPA over fresh contiguous ``[1, H, keys, D]`` K/V (the layout floor)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    h, d = config.num_heads, config.head_dim
    q = torch.randn(1, h, config.tokens_per_frame, d, device=config.device, dtype=config.dtype)
    k, v = torch.randn(2, 1, h, keys, d, device=config.device, dtype=config.dtype).unbind(0)
    order = [SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION]
    times = []
    with sdpa_kernel(order, set_priority=True):
        for _ in range(repeats + 2):
            begin = timer.start()
            for _ in range(config.num_layers):
                torch.nn.functional.scaled_dot_product_attention(q, k, v)
            times.append(timer.elapsed_ms(begin))
    return statistics.median(times[2:])


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--backends", default="torch,flashinfer")
    parser.add_argument("--frames", default="100,1000,10000", help="checkpoints (frames stored)")
    parser.add_argument("--layers", type=int, default=24)
    parser.add_argument("--patches", type=int, default=999, help="patches per frame (999 = 518x378)")
    parser.add_argument("--window", type=int, default=DEFAULT_SLIDING_WINDOW)
    parser.add_argument("--anchors", type=int, default=8)
    parser.add_argument("--max-window", type=int, default=DEFAULT_MAX_WINDOW)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args()
    device = torch.device(args.device)
    torch.set_num_threads(1)
    config = KVCacheConfig(
        num_layers=args.layers,
        patches_per_frame=args.patches,
        scale_frames=args.anchors,
        sliding_window=args.window,
        max_window=args.max_window,
        dtype=torch.bfloat16,
        device=device,
    )
    checkpoints = sorted(int(f) for f in args.frames.split(","))
    timer = Timer(device)
    bank = random_frames(config, 16, seed=0)
    rows: list[Row] = []
    for name in args.backends.split(","):
        cache = PagedKVCache(config, backend=name)
        for frames in checkpoints:
            start = time.perf_counter()
            advance(cache, bank, frames)
            fill_s = time.perf_counter() - start
            step_ms, attn_ms, visible = time_steps(cache, bank, args.repeats, timer)
            rows.append(Row(name, cache.backend.name, frames, visible, step_ms, attn_ms, cache.pool_bytes))
            print(
                f"{name:>10} frames {frames:>6} (fast-forward {fill_s:5.1f} s): visible {visible:>6} keys, "
                f"step {step_ms:7.2f} ms, attention {attn_ms:7.2f} ms "
                f"(frames kernel: {getattr(cache.backend, 'frames_kernel', cache.backend.name)})",
                flush=True,
            )
        del cache
        if device.type == "cuda":
            torch.cuda.empty_cache()
    device_name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    tokens = config.tokens_per_frame
    print(f"\n{device_name}, torch {torch.__version__}, {args.layers} layers, {tokens} tokens/frame")
    header = [
        "backend",
        "frames stored",
        "visible keys",
        "step ms (all layers)",
        "attn ms (all layers)",
        "pool GiB",
    ]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for row in rows:
        name = row.backend if row.backend == row.resolved else f"{row.backend} ({row.resolved})"
        cells = [name, row.frames, row.visible_keys, f"{row.step_ms:.2f}", f"{row.attn_ms:.2f}"]
        print("| " + " | ".join(str(c) for c in cells) + f" | {row.pool_bytes / 2**30:.2f} |")
    if device.type == "cuda":
        keys = rows[-1].visible_keys
        dense = time_dense_contiguous(config, keys, args.repeats, timer)
        print(f"floor: cuDNN SDPA over contiguous [1, H, {keys}, D] K/V, all layers: {dense:.2f} ms")
    for name in args.backends.split(","):
        mine = [row for row in rows if row.backend == name]
        ratio = mine[-1].step_ms / mine[0].step_ms
        print(f"{name}: step ms at {mine[-1].frames} frames / at {mine[0].frames} frames = {ratio:.3f}")


if __name__ == "__main__":
    main()
