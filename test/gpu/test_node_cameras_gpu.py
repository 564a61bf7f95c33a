"""Two cameras in one node on CUDA (issue 14): the in-process node (not spinning) configures one
`MultiStreamSession` over one KV pool, warms both cameras up, and steps both cameras' streaming frames as one
batched model step; each camera's results match a camera of its own within bf16 tolerance. Both ways the node
steps them on CUDA: synchronous rounds and (issue 33, `inference.overlap`, the default) the one-deep pipeline
of rounds with the idle flush at the end; with the default attention backend and with FlashInfer (skipped
without the flashinfer package).

Skipped without CUDA. Run on the H200 (in .device/src): `/tmp/rv/bin/python -m pytest -q -m gpu -s
test/gpu/test_node_cameras_gpu.py`.
"""

from __future__ import annotations

import importlib.util
import time

import numpy as np
import pytest
import rclpy
import torch
from builtin_interfaces.msg import Time
from pose_recorder import recording_pipeline
from rclpy.parameter import Parameter
from std_msgs.msg import Header

from lingbot_map_ros.engine.stream.multi_stream import MultiStreamSession
from lingbot_map_ros.engine.stream.session import StreamingSession
from lingbot_map_ros.ros.cameras.step import flush_cameras, step_cameras
from lingbot_map_ros.ros.input.intake import InputFrame
from lingbot_map_ros.ros.node import LingBotMapNode

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]

FRAMES = 12
PARAMS = {
    "autostart": False, "model.preset": "tiny", "model.device": "cuda", "model.compile_blocks": False,
    "model.warmup_image_size": "518x378", "kv_cache.scale_frames": 3, "kv_cache.sliding_window": 4,
    "kv_cache.max_window": 8, "tf.mode": "map_to_camera", "cameras": ["front", "rear"],
}  # fmt: skip


needs_flashinfer = pytest.mark.skipif(
    importlib.util.find_spec("flashinfer") is None, reason="needs the flashinfer package"
)


@pytest.mark.parametrize("backend", ["auto", pytest.param("flashinfer", marks=needs_flashinfer)])
@pytest.mark.parametrize("overlap", [False, True])
def test_two_cameras_step_as_one_batch_on_cuda(backend: str, overlap: bool) -> None:
    context = rclpy.Context()
    rclpy.init(context=context)
    params = {**PARAMS, "attention.backend": backend}
    node = LingBotMapNode(
        context=context, parameter_overrides=[Parameter(k, value=v) for k, v in params.items()]
    )
    try:
        assert node.autostart()
        multi = node._pipeline.cameras
        assert isinstance(multi, MultiStreamSession)
        images = np.random.default_rng(0).integers(0, 256, (2, FRAMES, 378, 518, 3), dtype=np.uint8)
        results: dict[str, list] = {"front": [], "rear": []}
        pipeline, rounds = recording_pipeline(node)
        start = time.perf_counter()
        for t in range(FRAMES):
            batch = []
            for i, name in enumerate(results):
                camera = node.cameras[name]
                header = Header(stamp=Time(sec=t), frame_id=f"{name}_optical")
                batch.append(
                    (name, InputFrame(header, images[i, t], time.monotonic(), camera.outputs.state.stream))
                )
            assert not step_cameras(node.cameras, batch, pipeline, overlap=overlap)
        assert not flush_cameras(node.cameras, pipeline)  # the inference thread's idle flush
        assert pipeline.stop(30)
        for name, delivered in rounds:
            results[name] += delivered
        seconds = time.perf_counter() - start
        stats = multi.pool_stats()
        print(
            f"2 cameras ({backend}, pipelined {overlap}), {FRAMES} frames each: "
            f"{2 * FRAMES / seconds:.1f} frames/s aggregate (first rounds "
            f"included); batches {stats['batches']}; GPU memory {torch.cuda.memory_allocated() / 2**30:.2f} "
            f"GiB allocated, {torch.cuda.max_memory_allocated() / 2**30:.2f} GiB peak"
        )
        assert [len(r) for r in results.values()] == [FRAMES, FRAMES]
        assert stats["batches"].get(2, 0) >= FRAMES - 4  # the streaming frames went two at a time
        reference = StreamingSession(node._pipeline.model, multi.config)
        expected = [r for t in range(FRAMES) for r in reference.push(images[0, t])]
        worst = max(
            float(np.abs(a.pose_enc - b.pose_enc).max())
            for a, b in zip(results["front"], expected, strict=True)
        )
        assert all(np.isfinite(r.pose_c2w).all() for r in results["front"] + results["rear"])
        assert worst < 5e-2, worst  # bf16, as test_multi_stream_gpu.py
    finally:
        node.trigger_deactivate()
        node.trigger_cleanup()
        node.destroy_node()
        rclpy.shutdown(context=context)
