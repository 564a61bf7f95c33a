"""Numerical parity run of the released-preset model on a fixture of ../shared/parity (synthetic weights).

    python -m lingbot_map_ros.tools.parity CASE_DIR --out OUT.npz [--shared DIR]

Builds the "lingbot-map" preset on the meta device, adopts `synthetic_state_dict(keys, seed)` (4.6 GB, held
once), runs the case's protocol from `inputs.npz` + `case.json` in float32 on the CPU (phase 1 with S0 frames,
then one frame per step with the keyframe rule) and writes `pose_enc`, `depth`, `depth_conf` and the debug
arrays under the fixture's names. It never reads `expected.npz`; compare with `check_parity.py` or
test/model/test_parity.py.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import time
from pathlib import Path
from types import ModuleType

import numpy as np
import torch

from lingbot_map_ros.model import ModelConfig, PrecisionPolicy, StreamConfig, build_model

DEFAULT_SHARED = Path(__file__).resolve().parents[2].parent / "shared"


def import_synthetic_weights(shared: Path) -> ModuleType:
    """Import `<shared>/parity/synthetic_weights.py` by path."""
    path = shared / "parity" / "synthetic_weights.py"
    if not path.is_file():
        raise ValueError(f"synthetic weights module not found at {path}; pass --shared DIR")
    spec = importlib.util.spec_from_file_location("synthetic_weights", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def keyframe_schedule(num_frames: int, scale_frames: int, keyframe_interval: int) -> list[bool]:
    """Anchors are keyframes; streaming frame i is one if interval <= 1 or (i - S0) % interval == 0."""
    return [
        i < scale_frames or keyframe_interval <= 1 or (i - scale_frames) % keyframe_interval == 0
        for i in range(num_frames)
    ]


def run_case(case_dir: Path, shared: Path = DEFAULT_SHARED, log: bool = True) -> dict[str, np.ndarray]:
    """Run one fixture and return its output arrays (names, shapes and dtypes of the fixture)."""
    case = json.loads((case_dir / "case.json").read_text())
    inputs = np.load(case_dir / "inputs.npz")
    images = torch.from_numpy(inputs["images"]).float()
    num_frames, scale_frames = images.shape[0], int(case["S0"])
    schedule = keyframe_schedule(num_frames, scale_frames, int(case["keyframe_interval"]))
    if list(map(bool, inputs["is_keyframe"])) != schedule:
        raise ValueError(f"{case_dir}: inputs.npz is_keyframe disagrees with the keyframe rule {schedule}")

    started = time.perf_counter()
    weights = import_synthetic_weights(shared)
    state_dict = weights.synthetic_state_dict(
        weights.load_keys_and_shapes(str(shared / "parity" / "state_dict_keys.tsv")), int(case["seed"])
    )
    model = build_model(ModelConfig.preset("lingbot-map"), state_dict, "cpu", PrecisionPolicy())
    del state_dict
    if log:
        print(f"model ready in {time.perf_counter() - started:.1f} s")

    window = int(case["sliding_window"])
    stream = model.new_stream(
        StreamConfig(scale_frames=scale_frames, sliding_window=window, max_window=window)
    )
    first = model.step(images[:scale_frames], stream, keyframe=True, keep_tokens=True)
    outputs = [first]
    for index in range(scale_frames, num_frames):
        frame = images[index : index + 1]
        outputs.append(model.step(frame, stream, keyframe=schedule[index], keep_tokens=True))
    if log:
        print(f"{num_frames} frames in {time.perf_counter() - started:.1f} s total; {stream.stats()}")

    def cat(name: str) -> np.ndarray:
        return torch.cat([getattr(o, name) for o in outputs]).numpy().astype(np.float32)

    grid_h, grid_w = images.shape[-2] // model.config.patch_size, images.shape[-1] // model.config.patch_size
    with torch.inference_mode():
        dino = model.aggregator.backbone_tokens(images[:1])[0]
        pos_embed = model.aggregator.patch_embed.interpolate_pos_encoding(grid_h, grid_w)[0]
    layers_first = torch.stack([layer[0] for layer in first.aggregated_tokens])
    layers_last = torch.stack([layer[-1] for layer in outputs[-1].aggregated_tokens])
    camera_tokens = torch.cat([o.aggregated_tokens[-1][:, 0] for o in outputs])
    pose_list = cat("pose_enc_list")
    arrays = {
        "pose_enc": cat("pose_enc"),
        "depth": cat("depth"),
        "depth_conf": cat("depth_conf"),
        "agg_tokens_frame0": layers_first[-1],
        "agg_tokens_last": layers_last[-1],
        "pose_enc_list_last": pose_list[-1],
        "dbg_pose_enc_list": pose_list,
        "dbg_pose_enc_raw_list": cat("pose_enc_raw_list"),
        "dbg_camera_tokens": camera_tokens,
        "dbg_agg_layers_frame0": layers_first,
        "dbg_agg_layers_last": layers_last,
        "dbg_dino_patch_tokens_frame0": dino,
        "dbg_pos_embed_interp": pos_embed,
    }
    return {k: np.asarray(v, dtype=np.float32) for k, v in arrays.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("case_dir", type=Path, help="fixture directory with case.json and inputs.npz")
    parser.add_argument("--out", type=Path, required=True, help="output .npz")
    parser.add_argument(
        "--shared", type=Path, default=DEFAULT_SHARED, help="shared dir (default <repo>/../shared)"
    )
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch default)")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    arrays = run_case(args.case_dir, args.shared)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    np.savez(args.out, **arrays)
    print(f"wrote {args.out} ({', '.join(arrays)})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
