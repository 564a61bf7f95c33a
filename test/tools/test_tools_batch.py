"""`batch` on a local Ray instance (tiny preset, synthetic weights, CPU, 2 workers), issue 24.

One module fixture does the expensive part once: four bags (three synthetic scenes with ground truth, one
whose every message is corrupt) go through `lingbot-map-ros batch` in a subprocess that is SIGKILLed (with
its Ray processes) as soon as the first bag is complete; then `batch --resume` runs in this process while a
thread SIGKILLs one busy worker once. The tests check what that left against `lingbot-map-ros run` on each
bag, the resume and the retry. Two Ray start-ups in all.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import psutil
import pytest

from lingbot_map_ros.tools import cli
from lingbot_map_ros.tools.bags.bag_io import IMAGE, BagWriter
from lingbot_map_ros.tools.bags.synthetic_scene import SceneConfig, write_scene_bag
from lingbot_map_ros.tools.batch import command as batch_tool
from lingbot_map_ros.tools.batch import summary as batch_summary
from lingbot_map_ros.tools.batch.command import find_bags, plan
from lingbot_map_ros.tools.batch.pool import BatchConfig
from lingbot_map_ros.tools.batch.summary import DONE_MARKER
from lingbot_map_ros.tools.run.options import RunConfig

FRAMES = {"s0": 8, "s1": 10, "s2": 12}
OPTIONS = ["--width", "56", "--scale-frames", "4"]
START_NS = 1_700_000_000_000_000_000
TIMING_KEYS = ("wall_s", "fps", "latency_ms", "session", "files")
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def bags(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("batch") / "bags"
    for i, (name, frames) in enumerate(FRAMES.items()):
        scene = SceneConfig(width=64, height=48, frames=frames, seed=i)
        write_scene_bag(scene, folder / name, folder / f"{name}.gt.tum", start_time_ns=START_NS + i * 10**9)
    with BagWriter(folder / "corrupt") as writer:  # no frame decodes (one corrupt frame is skipped by run)
        for i in range(4):
            writer.write_raw("/camera/image_raw", IMAGE, b"\x00\x01\x00\x00garbage", START_NS + i * 10**8)
    return folder


@pytest.fixture(scope="module")
def reference(bags: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`lingbot-map-ros run` on each good bag: REFERENCE/<name>/."""
    out = tmp_path_factory.mktemp("reference")
    for name in FRAMES:
        assert cli.main(["run", str(bags / name), "-o", str(out / name), *OPTIONS]) == 0
    return out


@dataclass
class BatchRun:
    out: Path
    exit_code: int
    complete_at_kill: dict[str, os.stat_result]  # bag name -> stat of its trajectory.tum after the kill
    killed_worker: bool
    ray_processes: list[psutil.Process]  # of the resumed run, seen while it ran
    summary: dict[str, object]

    def rows(self) -> dict[str, dict[str, object]]:
        return {row["name"]: row for row in self.summary["bags"]}


def _kill_tree(procs: list[psutil.Process]) -> None:
    """SIGKILL the given processes (the job's driver and the Ray processes it started) and wait for them."""
    for proc in procs:
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.send_signal(signal.SIGKILL)
    psutil.wait_procs(procs, timeout=30)


class WorkerKiller(threading.Thread):
    """SIGKILLs the first Ray worker of this process seen mapping a bag (title `ray::BagWorker.map_bag`)."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.killed = False
        self.stop = threading.Event()
        self.ray_processes: dict[int, psutil.Process] = {}  # every Ray process this job started

    def run(self) -> None:
        while not self.stop.is_set():
            for proc in psutil.Process().children(recursive=True):
                try:
                    title = " ".join(proc.cmdline())
                    if "ray" in title:
                        self.ray_processes.setdefault(proc.pid, proc)
                    if not self.killed and "BagWorker.map_bag" in title:
                        proc.send_signal(signal.SIGKILL)
                        self.killed = True
                except psutil.Error:
                    continue
            time.sleep(0.05)


@pytest.fixture(scope="module")
def batch(bags: Path, tmp_path_factory: pytest.TempPathFactory) -> BatchRun:
    out = tmp_path_factory.mktemp("batch_out") / "out"
    argv = ["batch", str(bags), "-o", str(out), *OPTIONS]
    log = out.parent / "first_run.log"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    ray_temps = set(Path("/tmp").glob("lmr-ray-*"))
    with log.open("w") as stderr:  # one worker: bags one after the other, so some are left at the kill
        command = [sys.executable, "-m", "lingbot_map_ros.tools.cli", *argv, "--workers", "1"]
        proc = subprocess.Popen(command, env=env, stdout=stderr, stderr=stderr)
    driver = psutil.Process(proc.pid)
    deadline = time.monotonic() + 300
    while not list(out.glob(f"*/{DONE_MARKER}")):
        assert proc.poll() is None, (
            f"batch exited ({proc.returncode}) before a bag was complete:\n{log.read_text()}"
        )
        assert time.monotonic() < deadline, f"no bag complete after 300 s:\n{log.read_text()}"
        time.sleep(0.05)
    _kill_tree([driver, *driver.children(recursive=True)])
    proc.wait()
    for temp in set(Path("/tmp").glob("lmr-ray-*")) - ray_temps:  # the killed job could not remove its own
        shutil.rmtree(temp, ignore_errors=True)
    complete = {p.parent.name: (p.parent / "trajectory.tum").stat() for p in out.glob(f"*/{DONE_MARKER}")}

    killer = WorkerKiller()
    killer.start()
    try:
        code = cli.main([*argv, "--workers", "2", "--resume"])
    finally:
        killer.stop.set()
        killer.join()
    summary = json.loads((out / "summary.json").read_text())
    return BatchRun(out, code, complete, killer.killed, list(killer.ray_processes.values()), summary)


def test_each_bag_equals_run_and_the_corrupt_one_has_a_failed_row(batch: BatchRun, reference: Path) -> None:
    rows = batch.rows()
    assert batch.exit_code == 1 and list(rows) == ["corrupt", "s0", "s1", "s2"]
    assert (batch.summary["ok"], batch.summary["failed"]) == (3, 1)
    corrupt = rows["corrupt"]
    assert corrupt["status"] == "failed" and corrupt["frames"] == 0 and corrupt["ate"] is None
    assert "deserializ" in corrupt["error"].lower() or "cdr" in corrupt["error"].lower(), corrupt["error"]
    assert not (batch.out / "corrupt").exists() and not (batch.out / ".partial").exists()
    for name, frames in FRAMES.items():
        row = rows[name]
        assert (row["status"], row["frames"], row["posed"], row["error"]) == ("ok", frames, frames, None)
        assert row["fps"] > 0 and np.isfinite(row["ate"]) and Path(row["bag"]).name == name
        for file in ("trajectory.tum", "map.ply"):
            assert (batch.out / name / file).read_bytes() == (reference / name / file).read_bytes(), (
                name,
                file,
            )
        ours, theirs = (json.loads((d / name / "summary.json").read_text()) for d in (batch.out, reference))
        assert {k: v for k, v in ours.items() if k not in TIMING_KEYS} == {
            k: v for k, v in theirs.items() if k not in TIMING_KEYS
        }
        assert (
            ours["files"]
            == theirs["files"]
            == {"trajectory": "trajectory.tum", "map": "map.ply", "plot": "run.png"}
        )
    csv_rows = (batch.out / "summary.csv").read_text().splitlines()
    assert csv_rows[0].startswith("bag,name,status,frames,posed,fps,ate,error") and len(csv_rows) == 5
    assert (batch.out / "summary.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_resume_maps_only_what_was_not_complete(batch: BatchRun) -> None:
    rows = batch.rows()
    assert 1 <= len(batch.complete_at_kill) < len(FRAMES), batch.complete_at_kill
    for name in FRAMES:
        trajectory = (batch.out / name / "trajectory.tum").stat()
        if name in batch.complete_at_kill:  # kept: not mapped again, its files untouched
            assert rows[name]["attempts"] == 0
            before = batch.complete_at_kill[name]
            assert (trajectory.st_ino, trajectory.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
        else:
            assert rows[name]["attempts"] >= 1
    assert rows["corrupt"]["attempts"] >= 1  # a failed bag is not complete: mapped again


def test_a_complete_output_is_refused_without_resume(
    batch: BatchRun, bags: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["batch", str(bags), "-o", str(batch.out), *OPTIONS]) == 2
    assert "pass --resume" in capsys.readouterr().err
    assert cli.main(["batch", str(bags), "-o", str(batch.out), "--resume", "--width", "112"]) == 2
    assert "other options" in capsys.readouterr().err


def test_a_killed_worker_is_replaced_and_its_bag_retried_once(batch: BatchRun) -> None:
    assert batch.killed_worker
    retried = [row for row in batch.rows().values() if row["attempts"] == 2]
    assert len(retried) == 1, batch.rows()
    # a good bag is complete on its second worker (equal to `run`: first test); the corrupt one fails again
    assert retried[0]["status"] == ("failed" if retried[0]["name"] == "corrupt" else "ok"), retried


def test_no_ray_process_is_left_running(batch: BatchRun) -> None:
    """`batch` ends its workers and its local Ray instance (GCS, raylet, agents) before it returns."""
    assert len(batch.ray_processes) >= 4  # GCS, raylet, agents, workers
    _, alive = psutil.wait_procs(batch.ray_processes, timeout=30)
    assert not alive, [p.pid for p in alive]


def test_inputs_are_bags_folders_of_bags_and_lists(bags: Path, tmp_path: Path) -> None:
    listing = tmp_path / "bags.txt"
    listing.write_text(f"# two bags\n{bags / 's1'}\n\n{os.path.relpath(bags / 's0', tmp_path)}  # relative\n")
    assert find_bags((listing, bags / "s1")) == [bags / "s1", bags / "s0"]
    assert [b.name for b in find_bags((bags,))] == ["corrupt", "s0", "s1", "s2"]
    twin = tmp_path / "elsewhere" / "s0"
    twin.mkdir(parents=True)
    (twin / "metadata.yaml").write_text("{}")
    with pytest.raises(ValueError, match="two bags would map to OUT/s0/"):
        find_bags((bags, twin.parent))
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="no bags"):
        find_bags((tmp_path / "empty",))


def test_a_bag_without_the_camera_topic_fails_before_any_worker(bags: Path, tmp_path: Path) -> None:
    options = RunConfig(bag=Path(), output_dir=Path(), topic="/front/image")
    rows, jobs = plan(BatchConfig(inputs=(bags,), output=tmp_path, options=options), [bags / "s0"])
    assert jobs == [] and rows[0].status == "failed" and rows[0].attempts == 0
    assert rows[0].error.startswith("BagError: topic /front/image not in bag"), rows[0].error


@pytest.fixture
def no_ray(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests are about what `batch` refuses before it starts Ray: starting it fails the test."""

    def refuse(config: BatchConfig) -> None:
        raise AssertionError("batch started Ray")

    monkeypatch.setattr(batch_tool, "start_ray", refuse)


def _files(folder: Path) -> dict[Path, bytes]:
    return {path: path.read_bytes() for path in folder.rglob("*") if path.is_file()}


def test_an_output_folder_at_or_around_an_input_is_refused_and_the_bags_are_untouched(
    bags: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], no_ray: None
) -> None:
    """Issue 30: `batch DATA -o DATA` removed every bag (each bag's output folder was the bag itself)."""
    before = _files(bags)
    listing = tmp_path / "bags.txt"
    listing.write_text(f"{bags / 's1'}\n")
    cases = [
        ((bags,), bags, "is"),
        ((bags,), bags / "s0", "lies inside"),
        ((bags,), bags / "maps", "lies inside"),
        ((bags,), bags.parent, "contains"),
        ((listing,), bags / "s1", "is"),
        ((listing,), tmp_path, "contains"),
    ]
    for inputs, out, relation in cases:
        assert cli.main(["batch", *map(str, inputs), "-o", str(out), *OPTIONS]) == 2, (inputs, out)
        assert f"{relation} the input" in capsys.readouterr().err, (inputs, out)
    assert _files(bags) == before and not (bags / "maps").exists()


def test_a_bag_without_metadata_gets_a_failed_row_naming_reindex(bags: Path, tmp_path: Path) -> None:
    """Issue 30: an .mcap without metadata.yaml (a killed `ros2 bag record`) was skipped without a row."""
    data = tmp_path / "data"
    shutil.copytree(bags / "s0", data / "s0")
    mcap = next((bags / "s1").glob("*.mcap"))
    (data / "killed").mkdir()
    shutil.copy(mcap, data / "killed" / mcap.name)
    found = find_bags((data,))
    assert [bag.name for bag in found] == ["killed", "s0"]
    assert find_bags((data / "killed" / mcap.name,)) == [(data / "killed").resolve()]
    options = RunConfig(bag=Path(), output_dir=Path())
    rows, jobs = plan(BatchConfig(inputs=(data,), output=tmp_path / "out", options=options), found)
    assert [job.name for job in jobs] == ["s0"] and rows[0].status == "failed", rows
    assert "no metadata.yaml" in rows[0].error and "ros2 bag reindex" in rows[0].error, rows[0].error


def test_resume_with_a_done_marker_of_the_wrong_shape_exits_2(
    bags: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], no_ray: None
) -> None:
    out = tmp_path / "out"
    (out / "s0").mkdir(parents=True)
    for text in ("[]", '{"row": 1, "options": {}}', '{"options": {}}', '{"row": {"bag": 1}, "options": {}}'):
        (out / "s0" / DONE_MARKER).write_text(text)
        assert cli.main(["batch", str(bags / "s0"), "-o", str(out), "--resume", *OPTIONS]) == 2, text
        assert "is not a done-marker of `batch`" in capsys.readouterr().err, text
    assert (out / "s0" / DONE_MARKER).is_file()


def test_batch_removes_only_folders_it_created(bags: Path, tmp_path: Path) -> None:
    """An OUT/<name>/ not written by `batch` gets a failed row and is kept (the worker removed it before
    its rename); OUT/.partial/ without batch's marker is refused, never emptied."""
    out = tmp_path / "out"
    (out / "s0").mkdir(parents=True)
    (out / "s0" / "notes.txt").write_text("mine")
    options = RunConfig(bag=Path(), output_dir=Path())
    rows, jobs = plan(BatchConfig(inputs=(bags,), output=out, options=options), [bags / "s0", bags / "s1"])
    assert [job.name for job in jobs] == ["s1"] and rows[0].status == "failed", rows
    assert "was not written by `batch`" in rows[0].error, rows[0].error
    batch_summary.claim_partial_dir(out)
    partial = batch_summary.partial_folder(out, "s0")
    partial.mkdir()
    (partial / "trajectory.tum").write_text("0 0 0 0 0 0 0 1\n")
    error = batch_summary.finish_bag(partial, out / "s0", {"row": {}, "options": {}})
    assert error is not None and "was not written by this batch" in error, error
    assert (out / "s0" / "notes.txt").read_text() == "mine" and not partial.exists()
    foreign = tmp_path / "elsewhere" / batch_summary.PARTIAL_DIR
    foreign.mkdir(parents=True)
    (foreign / "keep.txt").write_text("mine")
    with pytest.raises(ValueError, match="was not created by `batch`"):
        batch_summary.claim_partial_dir(foreign.parent)
    batch_summary.remove_partial(foreign)
    assert (foreign / "keep.txt").read_text() == "mine"


def test_ctrl_c_during_the_ray_start_up_stops_the_job_with_130(
    bags: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 30: Ctrl-C while Ray started was lost (the job ran to its end, exit 0). The stand-in start-up
    swallows a KeyboardInterrupt raised inside it, as Ray's did; the job must stop anyway, before a worker."""
    started: list[BatchConfig] = []
    handler = signal.getsignal(signal.SIGINT)

    def start_up(config: BatchConfig) -> None:
        started.append(config)
        with contextlib.suppress(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.5)

    def no_pool(*args: object) -> None:
        raise AssertionError("the workers started after Ctrl-C")

    monkeypatch.setattr(batch_tool, "start_ray", start_up)
    monkeypatch.setattr(batch_tool.WorkerPool, "run", no_pool)
    assert cli.main(["batch", str(bags / "s0"), "-o", str(tmp_path / "out"), *OPTIONS]) == 130
    assert len(started) == 1 and "interrupted" in capsys.readouterr().err
    assert signal.getsignal(signal.SIGINT) is handler  # restored
