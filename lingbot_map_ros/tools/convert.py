"""Convert a `.pt` checkpoint to `.safetensors` after validating it against the model layout.

    python -m lingbot_map_ros.tools.convert IN.pt OUT.safetensors [--preset lingbot-map] [--allow-pickle]

The input is read memory-mapped (`torch.load(weights_only=True, mmap=True)`), every key and shape is checked
against the preset (no model is allocated: the layout comes from the meta device), and the output is written
to a temporary file that is renamed into place, so a failed run leaves no partial file. `.safetensors` files
load memory-mapped and without unpickling.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from safetensors.torch import save_file

from lingbot_map_ros.model import CheckpointError, ModelConfig, read_state_dict
from lingbot_map_ros.model.checkpoint import check_state_dict, expected_shapes, meta_model
from lingbot_map_ros.model.config import PRESETS


def convert(src: Path, dst: Path, preset: str = "lingbot-map", allow_pickle: bool = False) -> int:
    """Validate `src` against `preset` and write it to `dst`; returns the number of tensors."""
    if dst.suffix != ".safetensors":
        raise ValueError(f"output must end in .safetensors, got {dst}")
    state = read_state_dict(src, allow_pickle=allow_pickle)
    check_state_dict(expected_shapes(meta_model(ModelConfig.preset(preset))), state, f"checkpoint {src}")
    tmp = dst.with_name(f".{dst.name}.tmp")
    try:
        save_file({k: v.contiguous() for k, v in state.items()}, str(tmp), metadata={"preset": preset})
        os.replace(tmp, dst)
    finally:
        tmp.unlink(missing_ok=True)
    return len(state)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("src", type=Path, help="input .pt checkpoint (with or without a 'model' key)")
    parser.add_argument("dst", type=Path, help="output .safetensors")
    parser.add_argument("--preset", default="lingbot-map", choices=sorted(PRESETS))
    parser.add_argument(
        "--allow-pickle",
        action="store_true",
        help="accept a .pt holding Python objects besides tensors (unpickling runs code: trusted files only)",
    )
    args = parser.parse_args(argv)
    started = time.perf_counter()
    try:
        count = convert(args.src, args.dst, args.preset, args.allow_pickle)
    except CheckpointError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"wrote {args.dst}: {count} tensors in {time.perf_counter() - started:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
