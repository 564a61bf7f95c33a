"""Issue 20's two memory attacks on the NODE over real DDS, measured: node RSS must stay < 1 GiB above idle.

1. The zip-bomb session: a saved session whose `anchors.npz` (about 1.6 MB) deflates to 32 x 4096² x 3 uint8
   (1.6 GB), its manifest, sizes and hashes consistent (a careful attacker), loaded with `~/load_session`.
   Before issue 20: 13 s, RSS 503 MB -> 3.6 GB, then refused and the current map wiped.
2. The depth flood: 36 `depth_image`s of 4096 x 4096 32FC1 (64 MiB each) with `scale.source: depth`.
   Before: RSS 505 -> 2,506 MB, retained.

The node runs as a subprocess (tiny preset, CPU, `scale.source: depth`, `scale.min_samples` 1) on frames of
../shared/data/loop with a matching depth image each; its RSS is sampled with psutil every 5 ms. Prints a
table (docs/reliability.md "Reliability III"); exit code 1 when a limit was passed or the node did not exit
cleanly.

    .venv/bin/python benchmarks/session_attacks.py         # about 1-2 minutes on the 2-core machine
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import sys
import tempfile
import time
import zipfile
from pathlib import Path

import cv2
import numpy as np
from builtin_interfaces.msg import Time
from nav_msgs.msg import Odometry
from node_child import REPO, use_isolated_dds
from rcl_interfaces.srv import SetParameters
from rclpy.parameter import Parameter
from rclpy.qos import QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import Image
from std_msgs.msg import Header

from lingbot_map_ros.ros.dds_tools.client import ClientNode
from lingbot_map_ros.ros.messages.conversions import depth_to_image, rgb_to_image
from lingbot_map_ros.tools.live.node_process import NodeProcess

sys.path.insert(0, str(REPO / "test"))
from process_memory import PeakRss  # noqa: E402 - the tests' sampler (test/process_memory.py)

FRAMES = REPO.parent / "shared" / "data" / "loop"
NAME = "attack_node"
NODE = f"/{NAME}/{NAME}"
LIMIT_MB = 1024.0
MIB = 2**20


def stamp(i: int) -> Time:
    return Time(sec=5000 + i // 10, nanosec=(i % 10) * 100_000_000)


def depth_msg(width: int, height: int, at: Time) -> Image:
    """A 32FC1 depth image of 2 m everywhere, `width` x `height`, in frame `cam`."""
    return depth_to_image(np.full((height, width), 2.0, np.float32), Header(stamp=at, frame_id="cam"))


def make_bomb(good: Path, target: Path, frames: int = 32, side: int = 4096) -> int:
    """Copy session `good` to `target` with anchors.npz replaced by a deflate bomb; returns its bytes."""
    shutil.copytree(good, target)
    path = target / "anchors.npz"
    shape = (frames, side, side, 3)
    manifest = json.loads((target / "manifest.json").read_text())
    stamps = np.arange(frames, dtype="<i8")
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        with z.open("images.npy", "w", force_zip64=True) as member:
            np.lib.format.write_array_header_1_0(
                member, {"descr": "|u1", "fortran_order": False, "shape": shape}
            )
            chunk = bytes(64 << 20)
            left = int(np.prod(shape))
            while left:
                member.write(chunk[: min(left, len(chunk))])
                left -= min(left, len(chunk))
        with z.open("stamps_ns.npy", "w") as member:
            np.lib.format.write_array(member, stamps)
    manifest["files"]["anchors.npz"] = {
        "bytes": path.stat().st_size,
        "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
        "arrays": {
            "images": {"dtype": "|u1", "shape": list(shape)},
            "stamps_ns": {"dtype": "<i8", "shape": [frames]},
        },
    }
    text = json.dumps(manifest)
    (target / "manifest.json").write_text(text)
    (target / "manifest.sha256").write_text(hashlib.sha256(text.encode()).hexdigest())
    return path.stat().st_size


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--depth-images", type=int, default=36)
    parser.add_argument("--depth-side", type=int, default=4096)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="session_attacks_"))
    use_isolated_dds()
    params = {
        "model.preset": "tiny",
        "model.device": "cpu",
        "model.image_width": 56,
        "kv_cache.scale_frames": 4,
        "qos.reliability": "reliable",
        "qos.depth": 50,
        "queue_size": 50,
        "map.conf_threshold": 0.0,
        "scale.source": "depth",
        "scale.min_samples": 1,
        "session.dir": str(tmp / "sessions"),
        "output_dir": str(tmp / "maps"),
        "diagnostics_rate": 2.0,
    }
    proc = NodeProcess.start(tmp / "node.log", params, name=NAME, namespace=f"/{NAME}", new_session=True)
    client = ClientNode("session_attacks_client", spin_threads=2)
    rows: list[tuple[str, str]] = []
    ok = True
    try:
        proc.wait_for_service(client, f"{NODE}/load_session", 120)
        reliable = QoSProfile(depth=50, reliability=ReliabilityPolicy.RELIABLE)
        odometry: list[Odometry] = []
        client.node.create_subscription(Odometry, f"{NODE}/odometry", odometry.append, reliable)
        image_pub = client.node.create_publisher(Image, f"/{NAME}/image", reliable)
        depth_pub = client.node.create_publisher(Image, f"/{NAME}/depth_image", reliable)
        files = sorted(FRAMES.glob("*.png"))[:12]
        frames = [cv2.cvtColor(cv2.imread(str(f)), cv2.COLOR_BGR2RGB) for f in files]
        h, w = frames[0].shape[:2]
        deadline = time.monotonic() + 120
        i = 0
        while len(odometry) < 8 and time.monotonic() < deadline:
            depth_pub.publish(depth_msg(w, h, stamp(i)))
            image_pub.publish(rgb_to_image(frames[i % len(frames)], Header(stamp=stamp(i), frame_id="cam")))
            i += 1
            time.sleep(0.3)
        time.sleep(2.0)
        sampler = PeakRss(proc.pid)
        idle = sampler.rss() / MIB
        rows.append(("node RSS idle (mapping, then quiet)", f"{idle:.0f} MiB"))
        saved = client.call_trigger(f"{NODE}/save_session", 60)
        assert saved.success, saved.message
        (good,) = (tmp / "sessions").iterdir()
        size = make_bomb(good, tmp / "sessions" / "bomb")
        inflated = 32 * 4096**2 * 3 / 1e9
        rows.append(("zip-bomb anchors.npz on disk / inflated", f"{size / 1e6:.2f} MB / {inflated:.2f} GB"))
        client.call_trigger(f"{NODE}/reset", 30)
        setter = client.node.create_client(SetParameters, f"{NODE}/set_parameters")
        setter.wait_for_service(timeout_sec=30)
        load_path = Parameter("session.load_path", value="bomb").to_parameter_msg()
        future = setter.call_async(SetParameters.Request(parameters=[load_path]))
        while not future.done():
            time.sleep(0.02)
        with sampler:
            start = time.monotonic()
            answer = client.call_trigger(f"{NODE}/load_session", 120)
            seconds = time.monotonic() - start
        rows.append(("zip bomb: answer", f"success={answer.success}: {answer.message[:110]}"))
        rows.append(("zip bomb: time to refuse", f"{seconds:.2f} s"))
        peak = sampler.peak_sampled / MIB
        rows.append(("zip bomb: node peak RSS above idle", f"{peak - idle:.0f} MiB"))
        ok &= not answer.success and peak - idle < LIMIT_MB

        base = sampler.rss() / MIB
        flood = PeakRss(proc.pid)
        with flood:
            for k in range(args.depth_images):
                depth_pub.publish(depth_msg(args.depth_side, args.depth_side, stamp(1000 + k)))
                time.sleep(0.2)
            time.sleep(3.0)
        end, peak = flood.rss() / MIB, flood.peak_sampled / MIB
        sent = args.depth_images * args.depth_side**2 * 4 / 2**20
        rows.append((f"depth flood: {args.depth_images} x {args.depth_side}² 32FC1", f"{sent:.0f} MiB sent"))
        rows.append(
            (
                "depth flood: node peak RSS above idle",
                f"{peak - idle:.0f} MiB (at start {base - idle:+.0f})",
            )
        )
        rows.append(("depth flood: node RSS after, above idle", f"{end - idle:.0f} MiB"))
        ok &= peak - idle < LIMIT_MB
    finally:
        client.close()
        code = proc.stop(30)
        rows.append(("SIGINT -> exit code", str(code)))
        ok &= code == 0 and not proc.killed
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        print(f"| {key.ljust(width)} | {value} |")
    print("PASS" if ok else "FAIL", f"(limit: {LIMIT_MB:.0f} MiB above idle); node log: {proc.log_path}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
