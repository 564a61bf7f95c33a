#!/usr/bin/env python3
"""Digest of `lingbot-map-ros run`'s output files for a refactor's "behaviour unchanged" check (issue 21).

Writes two small bags from ../shared/data/loop (one camera, 30 frames; two cameras, 16 + 8 frames), runs
`lingbot-map-ros run` on them with two settings and the two cameras (tiny preset, synthetic weights, CPU, one
thread: deterministic), and prints one row per output file with its SHA-256. With `--expect FILE` (a JSON
written earlier by `--write FILE`) it exits 1 when any digest differs.

    .venv/bin/python scripts/run_digest.py --write /tmp/before.json    # on the old commit
    .venv/bin/python scripts/run_digest.py --expect /tmp/before.json   # on the new one: 0 = byte-identical

`--flag` (repeatable) adds a flag to every run, e.g. `--flag=--no-loop-closure` (issue 28: with loop closure
off, `run` writes what it wrote before loops were closed). `--shared DIR` reads the images from DIR/data/loop
(default: ../shared next to the repository).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile
from pathlib import Path

from lingbot_map_ros.tools import cli
from lingbot_map_ros.tools.bags.make_bag import MakeBagConfig, image_files, read_images, write_camera_bag

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "test"))
from run_bags import write_two_camera_bag  # noqa: E402 - the tests' two-camera bag (test/run_bags.py)

START_NS = 1_700_000_000_000_000_000
#: The runs: name -> (bag, extra flags). Files compared: every trajectory.tum and map.ply they write.
RUNS = {
    "default": ("one", []),
    "window4_kf2": ("one", ["--sliding-window", "4", "--keyframe-interval", "2", "--scale-frames", "4"]),
    "two_cameras": ("two", ["--scale-frames", "4"]),
}
OUTPUTS = ("trajectory.tum", "map.ply")


def write_bags(folder: Path, loop: Path) -> dict[str, Path]:
    """The one-camera bag (30 frames at 10 Hz) and the two-camera bag (front 10 Hz, rear 5 Hz) of the images
    in `loop`."""
    images = list(read_images(image_files(loop)[:30], 160))
    one = folder / "one"
    write_camera_bag(
        MakeBagConfig(output=one, storage="sqlite3", rate_hz=10.0, start_time_ns=START_NS, compressed="png"),
        iter(images),
        total=len(images),
    )
    two = write_two_camera_bag(folder / "two", images, START_NS)
    return {"one": one, "two": two}


def digests(folder: Path, loop: Path, flags: list[str]) -> dict[str, str]:
    """{run/relative file: sha256} for every run in `RUNS` (each with `flags` added)."""
    bags = write_bags(folder, loop)
    out: dict[str, str] = {}
    for name, (bag, extra) in RUNS.items():
        target = folder / name
        argv = ["run", str(bags[bag]), "-o", str(target), "--width", "112", *extra, *flags]
        if cli.main(argv) != 0:
            raise SystemExit(f"run {name} failed: {' '.join(argv)}")
        for path in sorted(p for p in target.rglob("*") if p.name in OUTPUTS):
            out[f"{name}/{path.relative_to(target)}"] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", type=Path, help="write the digests to this JSON file")
    parser.add_argument(
        "--expect", type=Path, help="compare with digests written earlier; exit 1 if any differ"
    )
    parser.add_argument("--flag", action="append", default=[], help="a flag added to every run (repeatable)")
    parser.add_argument("--shared", type=Path, default=REPO.parent / "shared", help="the shared data folder")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        found = digests(Path(tmp), args.shared / "data" / "loop", args.flag)
    expected = json.loads(args.expect.read_text()) if args.expect else {}
    print(f"{'file':34} {'sha256':16} {'same' if expected else ''}")
    for key, digest in found.items():
        same = ("yes" if expected.get(key) == digest else "NO") if expected else ""
        print(f"{key:34} {digest[:16]} {same}")
    if args.write:
        args.write.write_text(json.dumps(found, indent=1) + "\n")
    if expected and (found != expected):
        missing = sorted(set(expected) - set(found))
        print(f"run outputs differ{f' (missing: {missing})' if missing else ''}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
