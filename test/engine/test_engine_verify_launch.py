"""How `PairVerifier` runs a graphed pass (engine/loop/verify.py, issue 31), with a stand-in side stream.

The CUDA part (`SidePairPasses`: pinned buffers, the graph, the event) is tested on the GPU
(test/gpu/test_verify_graph_gpu.py); here the verifier's side of it, on CPU: only the launch goes through
`run` (the inference thread's gap), the wait and the charge of its GPU time happen on the caller's thread,
and a capture that fails leaves the verifier on the eager pass for good, with the reason.
"""

from __future__ import annotations

import threading

import numpy as np
from tiny_stream import tiny_model

from lingbot_map_ros.engine.loop import PairVerifier
from lingbot_map_ros.engine.loop.pair_launch import warm_up_pair_pass

HW = (28, 56)


class _Launched:
    def __init__(self, result: tuple[np.ndarray, ...], waits: list[int]) -> None:
        self.result, self.waits = result, waits

    def wait(self) -> tuple[tuple[np.ndarray, ...], float]:
        self.waits.append(threading.get_ident())
        return self.result, 0.012


class _Side:
    """Stands in for `SidePairPasses`: records what was staged, fails the first launch when told to."""

    def __init__(self, fail: bool = False) -> None:
        self.graph = None
        self.fail = fail
        self.staged: list[tuple[np.ndarray, np.ndarray]] = []
        self.launches: list[int] = []
        self.waits: list[int] = []

    def stage(self, image_a: np.ndarray, image_b: np.ndarray) -> None:
        self.staged.append((image_a, image_b))

    def captured(self, image_hw: tuple[int, int]) -> bool:
        return self.graph is not None

    def launch(self) -> _Launched:
        self.launches.append(threading.get_ident())
        if self.fail:
            raise RuntimeError("capture failed")
        self.graph = "captured"
        outputs = (np.zeros((2, 9), np.float32), np.ones((2, *HW), np.float32), np.ones((2, *HW), np.float32))
        return _Launched(outputs, self.waits)


def _images() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    return rng.integers(0, 256, (*HW, 3), dtype=np.uint8), rng.integers(0, 256, (*HW, 3), dtype=np.uint8)


def test_only_the_launch_runs_in_the_gap_and_the_gpu_time_is_charged() -> None:
    ran_in_gap: list[object] = []
    charged: list[float] = []

    def run(task):  # noqa: ANN001, ANN202
        ran_in_gap.append(task)
        return task()

    verifier = PairVerifier(tiny_model(), run=run, charge=charged.append)
    side = _Side()
    verifier.graphs, verifier._side = True, side  # as on CUDA
    image_a, image_b = _images()
    pose_enc, depth, _ = verifier.pair_pass(image_a, image_b)
    assert ran_in_gap == [side.launch] and len(side.staged) == 1 and side.staged[0][0] is image_a
    assert side.waits == [threading.get_ident()]  # waited for on the caller's thread, outside the gap
    assert charged == [0.012] and pose_enc.shape == (2, 9) and depth.shape == (2, *HW)
    assert verifier.graph_error is None and verifier.graphs


def test_a_failed_capture_falls_back_to_the_eager_pass_for_good() -> None:
    model = tiny_model()
    tasks: list[object] = []

    def run(task):  # noqa: ANN001, ANN202
        tasks.append(task)
        return task()

    verifier = PairVerifier(model, run=run)
    side = _Side(fail=True)
    verifier.graphs, verifier._side = True, side
    image_a, image_b = _images()
    got = verifier.pair_pass(image_a, image_b)
    expected = PairVerifier(model, graphs=False).pair_pass(image_a, image_b)
    for a, b in zip(got, expected, strict=True):
        np.testing.assert_array_equal(a, b)
    assert verifier.graph_error == "RuntimeError: capture failed" and not verifier.graphs
    assert (
        len(tasks) == 2 and len(side.launches) == 1
    )  # the failed launch, then the eager pass: both in the gap
    verifier.pair_pass(image_a, image_b)
    assert len(side.launches) == 1 and len(tasks) == 3  # never tried again


def test_the_configure_warm_up_captures_nothing_without_cuda() -> None:
    model = tiny_model()
    assert warm_up_pair_pass(model, (42, 74), 56) == 0.0 and model.pair_graphs == {}
    assert warm_up_pair_pass(object(), (42, 74), 56) == 0.0  # a model double
