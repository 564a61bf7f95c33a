"""Issue 16, the pieces in-process (no DDS): stream guard, frame id checks, JPEG structure, EXIF orientation,
pixel budget, output_dir resolution, TUM integer stamps, file modes, the pre-processing copy, a stopped
worker, the services' answers on failure, the sim-clock watch."""

from __future__ import annotations

import io
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import pytest
from PIL import Image as PilImage
from ros_helpers import load_frames
from ros_messages import rgb_to_compressed
from sensor_msgs.msg import CompressedImage
from std_msgs.msg import Header
from std_srvs.srv import Trigger

from lingbot_map_ros.engine.lane_worker import LaneWorker, WorkerStopped
from lingbot_map_ros.engine.mapping.writers import read_tum, write_ply, write_tum
from lingbot_map_ros.engine.stream.preprocess import preprocess_geometry, resize_uint8
from lingbot_map_ros.ros.diagnostics.stats import SimClockWatch
from lingbot_map_ros.ros.input.streams import StreamGuard, StreamKey, frame_id_problem
from lingbot_map_ros.ros.messages.conversions import (
    ImageConversionError,
    check_pixel_budget,
    compressed_to_rgb,
    jpeg_structure_problem,
)
from lingbot_map_ros.ros.params.declare import resolve_directory
from lingbot_map_ros.ros.services.triggers import MappingServices

A = StreamKey(294, 518, "cam")
B = StreamKey(294, 518, "cam_b")
TINY = StreamKey(14, 14, "cam")


def test_one_odd_frame_does_not_switch_the_stream() -> None:
    guard = StreamGuard(confirm_frames=3)
    assert guard.check(A).accept
    for odd in (TINY, B):
        verdict = guard.check(odd)
        assert not verdict.accept and "1 of 3" in verdict.reason
        assert guard.check(A).accept and guard.current == A
    assert [guard.check(B).accept for _ in range(3)] == [False, False, True]
    assert guard.current == B
    guard.forget()
    assert guard.check(TINY).accept and guard.current == TINY


def test_alternating_cameras_are_a_conflict_naming_both() -> None:
    guard = StreamGuard(confirm_frames=3)
    accepted = [guard.check(A if i % 2 == 0 else B).accept for i in range(60)]
    assert accepted == [i % 2 == 0 for i in range(60)]  # the first camera keeps mapping
    conflict = guard.conflict()
    assert conflict is not None and "'cam'" in conflict and "'cam_b'" in conflict
    for _ in range(30):  # once the other camera stops, the conflict clears
        guard.check(A)
    assert guard.conflict() is None
    calm = StreamGuard(confirm_frames=3)
    for key in [A] * 10 + [B] * 3 + [B] * 10:  # a real camera change is not a conflict
        calm.check(key)
    assert calm.current == B and calm.conflict() is None


@pytest.mark.parametrize(
    ("frame_id", "problem"),
    [
        ("/cam", "leading"),
        ("ca m", "whitespace"),
        ("cam\t", "whitespace"),
        ("map", "own frame"),
        ("odom", "own"),
    ],
)
def test_frame_id_problems(frame_id: str, problem: str) -> None:
    reason = frame_id_problem(frame_id, {"map", "odom"})
    assert reason is not None and (problem in reason or "'/'" in reason)


def test_frame_id_ok() -> None:
    assert frame_id_problem("camera_optical_frame", {"map"}) is None
    assert frame_id_problem("", {"map"}) is None


def _jpeg(rgb: np.ndarray, **kwargs: object) -> bytes:
    out = io.BytesIO()
    PilImage.fromarray(rgb).save(out, "JPEG", **kwargs)
    return out.getvalue()


def test_valid_jpegs_pass_the_structure_check() -> None:
    rgb = load_frames(1)[0]
    for kwargs in ({}, {"progressive": True}, {"optimize": True}, {"quality": 5}, {"subsampling": 0}):
        assert jpeg_structure_problem(_jpeg(rgb, **kwargs)) is None, kwargs
    for params in ([], [cv2.IMWRITE_JPEG_RST_INTERVAL, 2], [cv2.IMWRITE_JPEG_PROGRESSIVE, 1]):
        ok, data = cv2.imencode(".jpg", rgb, params)
        assert ok and jpeg_structure_problem(data.tobytes()) is None, params


def test_jpeg_with_random_scan_data_is_undecodable() -> None:
    """Valid headers, random entropy-coded data: libjpeg decodes garbage and only prints a warning."""
    rgb = load_frames(1)[0]
    data = bytearray(_jpeg(rgb))
    sos = data.find(b"\xff\xda")
    start = sos + 2 + int.from_bytes(data[sos + 2 : sos + 4], "big")
    rng = np.random.default_rng(16)
    for _ in range(20):
        data[start:-2] = rng.integers(0, 256, len(data) - 2 - start, dtype=np.uint8).tobytes()
        assert cv2.imdecode(np.frombuffer(bytes(data), np.uint8), cv2.IMREAD_COLOR) is not None  # garbage
        with pytest.raises(ImageConversionError) as err:
            compressed_to_rgb(CompressedImage(format="jpeg", data=bytes(data)))
        assert err.value.cause == "undecodable_image" and "corrupt JPEG" in str(err.value)
    truncated = _jpeg(rgb)[:-500]
    with pytest.raises(ImageConversionError, match="corrupt JPEG"):
        compressed_to_rgb(CompressedImage(format="jpeg", data=truncated))


def test_exif_orientation_is_ignored_consistently_with_the_header() -> None:
    rgb = load_frames(1)[0]  # 294 x 518
    exif = PilImage.Exif()
    exif[0x0112] = 6  # rotate 90 CW to display
    data = _jpeg(rgb, exif=exif.tobytes(), quality=95)
    assert cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR).shape[:2] == (518, 294)  # OpenCV
    decoded = compressed_to_rgb(CompressedImage(format="jpeg", data=data))
    assert decoded.shape == rgb.shape
    assert np.abs(decoded.astype(int) - rgb).mean() < 3


def test_pixel_budget_from_the_header() -> None:
    check_pixel_budget((2160, 3840), 16_777_216, 8.0)
    check_pixel_budget(None, 10, 1.0)  # unknown size: left to the converter
    with pytest.raises(ImageConversionError) as err:
        check_pixel_budget((8000, 8000), 16_777_216, 8.0)
    assert err.value.cause == "oversized_image"
    with pytest.raises(ImageConversionError) as err:
        check_pixel_budget((20000, 14), 16_777_216, 8.0)
    assert err.value.cause == "unsupported_aspect_ratio"


def test_compressed_png_over_the_budget_is_rejected_before_decoding() -> None:
    ok, png = cv2.imencode(".png", np.zeros((300, 200, 3), np.uint8))
    msg = CompressedImage(format="png", data=png.tobytes())
    from lingbot_map_ros.ros.messages.conversions import image_header_size

    assert image_header_size(msg) == (300, 200)


def test_output_dir_must_be_absolute_after_expansion(monkeypatch: pytest.MonkeyPatch) -> None:
    assert resolve_directory("/data/maps") == Path("/data/maps")
    monkeypatch.setenv("HOME", "/home/robot")
    assert resolve_directory("~/maps") == Path("/home/robot/maps")
    for bad in ("", "  ", "maps", "./maps", "~nosuchuser_lingbot/maps"):
        with pytest.raises(ValueError):
            resolve_directory(bad)


def test_tum_stamps_from_integer_nanoseconds(tmp_path: Path) -> None:
    stamps = np.array([2147483647_999999999, 1_700_000_000_000_000_001, 5], dtype=np.int64)
    poses = np.tile(np.eye(4), (3, 1, 1))
    path = write_tum(tmp_path / "t.tum", stamps, poses)
    lines = path.read_text().splitlines()[1:]
    assert [line.split()[0] for line in lines] == [
        "2147483647.999999999",
        "1700000000.000000001",
        "0.000000005",
    ]
    float_path = write_tum(tmp_path / "f.tum", np.array([1.5]), poses[:1])
    assert float_path.read_text().splitlines()[1].split()[0] == "1.500000000"
    assert read_tum(path)[1].shape == (3, 7)


def test_saved_files_honour_the_umask(tmp_path: Path) -> None:
    before = os.umask(0o027)
    try:
        ply = write_ply(tmp_path / "m.ply", np.zeros((2, 3), np.float32), np.zeros((2, 3), np.uint8))
        tum = write_tum(tmp_path / "t.tum", np.array([1], np.int64), np.eye(4)[None])
    finally:
        os.umask(before)
    assert ply.stat().st_mode & 0o777 == 0o640
    assert tum.stat().st_mode & 0o777 == 0o640


def test_cropped_network_image_owns_its_memory() -> None:
    """A portrait image is resized then centre-cropped: the crop must not be a view of the intermediate."""
    rgb = np.zeros((2000, 300, 3), np.uint8)
    geometry = preprocess_geometry(rgb.shape[:2], 56)
    out = resize_uint8(rgb, geometry)
    assert out.shape[:2] == geometry.out_hw and geometry.resized_hw[0] > geometry.out_hw[0]
    assert out.base is None or out.base.nbytes == out.nbytes


def test_submit_to_a_stopped_worker_raises_worker_stopped() -> None:
    worker: LaneWorker[int] = LaneWorker(lambda item: None, 2, lambda item, exc: None)
    worker.stop(5)
    assert worker.stopped
    with pytest.raises(WorkerStopped):
        worker.submit(1)


class _Params:
    kv_cache_scale_frames = 2

    def __init__(self, output_dir: str) -> None:
        self.output_dir = output_dir


class _Outputs:
    def map_size(self) -> int:
        return 1

    def save(self, out_dir: Path, tag: str) -> str:
        raise RuntimeError("Could not determine home directory.")


def test_services_answer_failures_instead_of_raising() -> None:
    failures: list[str] = []
    logger = logging.getLogger("test")
    services = MappingServices(
        logger,
        lambda: _Params("~nosuchuser_lingbot/maps"),
        lambda: _Outputs(),
        lambda: (_ for _ in ()).throw(RuntimeError("boom")),
        lambda: (_ for _ in ()).throw(OSError("disk full")),
        lambda: (_ for _ in ()).throw(ValueError("session is incompatible")),
        lambda where, exc: failures.append(where),
    )
    save = services.on_save_map(Trigger.Request(), Trigger.Response())
    assert not save.success and "cannot be expanded" in save.message
    services._params = lambda: _Params("/tmp/lingbot_ok")
    save = services.on_save_map(Trigger.Request(), Trigger.Response())
    assert not save.success and "Could not determine home directory" in save.message
    callbacks: dict[str, Callable[..., Trigger.Response]] = {}

    class _Node:  # what `create` needs of a node: the callbacks it registers (each one guarded)
        def create_service(
            self, srv_type: object, name: str, callback: Callable[..., Any], **kwargs: object
        ) -> str:
            callbacks[name] = callback
            return name

    assert services.create(_Node()) == ["~/reset", "~/save_map", "~/save_session", "~/load_session"]
    reset = callbacks["~/reset"](Trigger.Request(), Trigger.Response())
    assert (
        not reset.success
        and reset.message == "reset failed: RuntimeError: boom"
        and failures == ["service_reset"]
    )
    for name, why in (("save_session", "disk full"), ("load_session", "session is incompatible")):
        answer = services._session_call(name, Trigger.Response())
        assert not answer.success and answer.message == f"{name} failed: {why}"


def test_sim_clock_watch_warns_once(caplog: pytest.LogCaptureFixture) -> None:
    messages: list[str] = []

    class Logger:
        def warning(self, text: str) -> None:
            messages.append(text)

    watch = SimClockWatch(Logger(), grace_s=0.0)  # type: ignore[arg-type]
    assert watch.check(False, 123) == "system"
    assert watch.check(True, 0) == "sim, no /clock"
    assert watch.check(True, 0) == "sim, no /clock"
    assert len(messages) == 1 and "no /clock" in messages[0]
    assert watch.check(True, 5_000_000_000) == "sim"
    assert watch.check(True, 1_000_000_000) == "sim, ran backwards"
    assert len(messages) == 2 and "jumped back by 4.000 s" in messages[1]


def test_header_frame_of_a_compressed_image_is_kept() -> None:
    msg = rgb_to_compressed(load_frames(1)[0], Header(frame_id="cam"))
    assert compressed_to_rgb(msg).shape == (294, 518, 3)
