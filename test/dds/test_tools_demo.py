"""End to end over real DDS: make-bag on the corridor frames -> replay into the node subprocess (tiny preset,
CPU) -> record its outputs -> ~/save_map -> SIGINT. Every published frame is posed or counted as dropped,
output stamps equal input stamps, the TUM has one line per posed frame and the PLY has points."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import torch
from rosbags.rosbag2 import Reader

from lingbot_map_ros.engine.mapping.writers import read_ply, read_tum
from lingbot_map_ros.model import ModelConfig, build_model
from lingbot_map_ros.tools import cli
from lingbot_map_ros.tools.bags.bag_io import BagError, iter_frames, ros2_typestore
from lingbot_map_ros.tools.bags.make_bag import MakeBagConfig, image_files, read_images, write_camera_bag
from lingbot_map_ros.tools.bags.synthetic_scene import SceneConfig
from lingbot_map_ros.tools.demo.command import DemoConfig, prepare_input, run_demo
from lingbot_map_ros.tools.evaluation.ate import compare

SHARED = Path(__file__).resolve().parents[2].parent / "shared"
LOOP = SHARED / "data" / "loop"
FRAMES = 30

pytestmark = [pytest.mark.dds, pytest.mark.skipif(not LOOP.is_dir(), reason="../shared/data/loop is missing")]


def _header_stamps(bag: Path, topic: str) -> list[int]:
    ts = ros2_typestore()
    with Reader(bag) as reader:
        conns = [c for c in reader.connections if c.topic == topic]
        return [
            (m := ts.deserialize_cdr(raw, c.msgtype)).header.stamp.sec * 10**9 + m.header.stamp.nanosec
            for c, _, raw in reader.messages(connections=conns)
        ]


@pytest.mark.parametrize(("storage", "compressed"), [("mcap", None), ("sqlite3", "jpeg")])
def test_bag_replayed_into_the_node_comes_back_posed_or_counted(
    tmp_path: Path, dds_env: dict[str, str], storage: str, compressed: str | None
) -> None:
    bag = tmp_path / "loop"
    topic = "/front/image_raw" + ("/compressed" if compressed else "")
    write_camera_bag(
        MakeBagConfig(
            output=bag,
            storage=storage,
            rate_hz=10.0,
            topic=topic,
            info_topic="/front/camera_info",
            compressed=compressed,
            start_time_ns=1_700_000_000_000_000_000,
        ),
        read_images(image_files(LOOP)[:FRAMES], 160),
        total=FRAMES,
    )
    config = DemoConfig(output_dir=tmp_path / "demo", bag=bag, image_width=112, queue_size=2, timeout_s=150.0)
    outcome = run_demo(config, {**os.environ, **dds_env})

    assert outcome.sent == outcome.received == FRAMES
    assert outcome.posed > 0 and outcome.accounted, outcome  # posed + dropped (+ rejected, ...) == sent
    assert outcome.node_exit_code == 0

    run_dir = Path(outcome.files["run"])
    input_stamps = [f.stamp_ns for f in iter_frames(bag)]
    odometry = _header_stamps(run_dir / "outputs", "/lingbot_map/odometry")
    assert set(odometry) <= set(input_stamps) and odometry == sorted(odometry)  # stamps kept, in order
    assert _header_stamps(run_dir / "outputs", "/lingbot_map/path")[-1] == odometry[-1]

    stamps, rows = read_tum(outcome.files["trajectory"])
    assert len(stamps) == outcome.posed  # one TUM line per posed frame
    np.testing.assert_allclose(stamps, np.array(odometry) / 1e9, atol=1e-6)
    xyz, rgb = read_ply(outcome.files["map"])
    assert len(xyz) == outcome.map_points > 0 and np.isfinite(xyz).all()
    assert Path(outcome.files["plot"]).read_bytes()[:4] == b"\x89PNG"
    assert outcome.ok

    # the recorded odometry and the saved trajectory are the same poses (no alignment at all)
    result, _, _ = compare(run_dir / "outputs", Path(outcome.files["trajectory"]), alignment="none")
    assert result.matched == outcome.posed and result.rmse < 1e-6
    assert (
        cli.main(
            [
                "ate",
                str(run_dir / "outputs"),
                outcome.files["trajectory"],
                "--align",
                "se3",
                "--plot",
                str(tmp_path / "ate.png"),
            ]
        )
        == 0
    )
    assert (tmp_path / "ate.png").read_bytes()[:4] == b"\x89PNG"
    with pytest.raises(BagError, match="odometry topics none"):
        compare(bag, Path(outcome.files["trajectory"]))


def test_demo_reports_a_missing_topic_before_starting_anything(
    tmp_path: Path, dds_env: dict[str, str]
) -> None:
    bag = tmp_path / "loop"
    write_camera_bag(MakeBagConfig(output=bag), read_images(image_files(LOOP)[:2], 64), total=2)
    config = DemoConfig(output_dir=tmp_path / "demo", bag=bag, topic="/nope", scene=SceneConfig(frames=2))
    with pytest.raises(ValueError, match="topic /nope not in bag"):
        run_demo(config, {**os.environ, **dds_env})
    assert not list((tmp_path / "demo").glob("run_*"))


def test_node_over_dds_and_offline_run_agree_and_ate_is_reported(
    tmp_path: Path, dds_env: dict[str, str]
) -> None:
    """Same checkpoint, every frame processed (deep queue): the node's trajectory equals `run`'s."""
    torch.manual_seed(0)
    checkpoint = tmp_path / "tiny.pt"
    torch.save(build_model(ModelConfig.preset("tiny")).state_dict(), checkpoint)
    scene = SceneConfig(width=128, height=96, frames=16, supersample=1)
    config = DemoConfig(
        output_dir=tmp_path / "demo",
        checkpoint=checkpoint,
        image_width=112,
        scene=scene,
        queue_size=100,
        timeout_s=150.0,
    )
    outcome = run_demo(config, {**os.environ, **dds_env})
    assert outcome.ok and outcome.posed == outcome.sent == scene.frames and outcome.dropped == 0
    assert outcome.ate is not None and outcome.ate["matched"] == scene.frames
    assert np.isfinite([outcome.ate[k] for k in ("rmse", "mean", "median", "max")]).all()

    bag = next((tmp_path / "demo").glob("scene_*hz"))
    assert (
        cli.main(
            [
                "run",
                str(bag),
                "-o",
                str(tmp_path / "offline"),
                "--checkpoint",
                str(checkpoint),
                "--width",
                "112",
            ]
        )
        == 0
    )
    online_stamps, online = read_tum(outcome.files["trajectory"])
    offline_stamps, offline = read_tum(tmp_path / "offline" / "trajectory.tum")
    np.testing.assert_array_equal(online_stamps, offline_stamps)
    np.testing.assert_allclose(online[:, :3], offline[:, :3], atol=1e-5)  # one Mapper in both (issue 11)
    np.testing.assert_allclose(np.abs(np.sum(online[:, 3:] * offline[:, 3:], axis=1)), 1.0, atol=1e-5)
    online_xyz, online_rgb = read_ply(outcome.files["map"])
    offline_xyz, offline_rgb = read_ply(tmp_path / "offline" / "map.ply")
    assert len(online_xyz) == len(offline_xyz) > 100
    nearest = np.concatenate(
        [  # distance of each node map point to the closest `run` map point
            np.sqrt(((chunk[:, None, :] - offline_xyz[None]) ** 2).sum(-1)).min(axis=1)
            for chunk in np.array_split(online_xyz, 64)
        ]
    )
    assert nearest.max() < 1e-5, nearest.max()


def test_demo_turns_an_image_folder_into_its_input_bag(tmp_path: Path) -> None:
    frames = tmp_path / "frames"
    frames.mkdir()
    for path in image_files(LOOP)[:3]:
        (frames / path.name).write_bytes(path.read_bytes())
    source = prepare_input(DemoConfig(output_dir=tmp_path, images=frames, rate_hz=4.0), tmp_path)
    assert (source.topic, source.msgtype, source.info_topics) == (
        "/camera/image_raw",
        "sensor_msgs/msg/Image",
        ("/camera/camera_info",),
    )
    assert source.ground_truth is None
    stamps = [f.stamp_ns for f in iter_frames(source.bag)]
    assert len(stamps) == 3 and np.diff(stamps).tolist() == [250_000_000, 250_000_000]
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="holds no images"):
        prepare_input(DemoConfig(output_dir=tmp_path, images=tmp_path / "empty"), tmp_path / "run2")
