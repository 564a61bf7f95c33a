"""One layer's global attention of B streams over the shared pool: one call (strided views) vs a loop.

B streams of the full model's geometry (16 heads x 64, bf16, 1,005 tokens per frame at 518x378) are
fast-forwarded in lockstep to ``--frames`` keyframes (K/V written, no attention), then one batched step is
planned and ``BatchCacheStep.attend`` of one layer is timed with CUDA events (median of ``--repeats``),
once with the torch batch backend's one call over equally spaced regions (cache/batch.py, issue 33) and once
with its loop over the requests. Prints ms per layer and per layer and stream. Usage (docs/benchmarks.md)::

    python benchmarks/batch_attention.py --streams 1,2,4 --frames 80 --frames 300
"""

from __future__ import annotations

import argparse
import statistics

import torch

from lingbot_map_ros.cache import KVCacheConfig
from lingbot_map_ros.cache.batch import TorchBatchAttention, begin_batch, end_batch
from lingbot_map_ros.cache.shared_pool import PooledKVCache, SharedKVPool

TOKENS, HEADS, DIM, LAYERS = 1005, 16, 64, 2


def config(device: torch.device) -> KVCacheConfig:
    return KVCacheConfig(
        num_layers=LAYERS, num_heads=HEADS, head_dim=DIM, patches_per_frame=999, scale_frames=8,
        sliding_window=64, max_window=128, max_special_frames=8 + 128 + 60, dtype=torch.bfloat16,
        device=device,
    )  # fmt: skip


def time_layer(streams: int, frames: int, one_call: bool, repeats: int, device: torch.device) -> float:
    """Median ms of one layer's batched attention of `streams` streams at `frames` stored keyframes."""
    pool = SharedKVPool.for_config(config(device), backend="torch")
    pool.streams = streams
    caches = [PooledKVCache(pool, config(device), backend="torch") for _ in range(streams)]
    kv = torch.randn(2, 8 * TOKENS, HEADS, DIM, device=device, dtype=torch.bfloat16)
    for index in range(frames):
        count = 8 if index == 0 else 1
        for cache in caches:
            step = cache.begin_step(count, keyframe=True)
            for layer in range(LAYERS):
                step.write(layer, kv[0, : count * TOKENS], kv[1, : count * TOKENS])
            cache.end_step(step)
    q = torch.randn(3, streams * TOKENS, HEADS, DIM, device=device, dtype=torch.bfloat16)
    times = []
    for _ in range(repeats):
        step = begin_batch(pool, caches, [False] * streams)
        if not one_call:
            pool.batch_backend.spacing = None
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        step.attend(0, q[0], q[1], q[2])
        stop.record()
        step.attend(1, q[0], q[1], q[2])
        end_batch(step)
        torch.cuda.synchronize(device)
        times.append(start.elapsed_time(stop))
    if one_call and streams > 1 and not TorchBatchAttention.one_call:
        print(f"cuDNN refused the strided views of {streams} streams: the loop ran instead", flush=True)
        TorchBatchAttention.one_call = True
    return statistics.median(times[2:])


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--streams", default="1,2,4")
    parser.add_argument("--frames", type=int, action="append", help="stored keyframes (repeatable)")
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    device = torch.device("cuda")
    print("| stored frames | streams | one call ms/layer | loop ms/layer | one call ms/layer/stream |")
    print("|---|---|---|---|---|")
    for frames in args.frames or [80, 300]:
        for streams in (int(s) for s in args.streams.split(",")):
            one = time_layer(streams, frames, True, args.repeats, device)
            loop = time_layer(streams, frames, False, args.repeats, device)
            print(f"| {frames} | {streams} | {one:.3f} | {loop:.3f} | {one / streams:.3f} |", flush=True)


if __name__ == "__main__":
    main()
