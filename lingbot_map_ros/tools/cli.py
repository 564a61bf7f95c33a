"""`lingbot-map-ros`: the package's command line (argparse front; one module per subcommand).

    lingbot-map-ros demo                      # synthetic scene -> node over DDS -> report, map, PNG
    lingbot-map-ros make-bag FRAMES/ -o BAG   # images or video -> rosbag2
    lingbot-map-ros replay BAG                # play camera topics into DDS with recorded timing
    lingbot-map-ros record -o BAG             # record the node's outputs
    lingbot-map-ros run BAG -o OUT            # engine on a bag without DDS -> TUM, PLY, JSON, PNG
    lingbot-map-ros batch BAGS... -o OUT      # many bags on a Ray pool of model replicas, resumable
    lingbot-map-ros synthetic-scene -o BAG    # render the demo's scene with ground truth
    lingbot-map-ros ate EST REF               # trajectory error between TUM files / recorded bags
    lingbot-map-ros loop-eval --laps 2        # loop closure on the drifting oracle: ATE with/without
    lingbot-map-ros reloc-eval --kidnaps 5    # tracking health + relocalisation on the kidnapped oracle
    lingbot-map-ros evaluate BAG GT -o OUT    # a sequence's ATE with/without loop closure (--checkpoint)
    lingbot-map-ros export RUN_OR_SESSION --format colmap|nerfstudio -o OUT  # poses, images, points
    lingbot-map-ros parity | convert ...      # the model's parity run and checkpoint converter

Bad input (ValueError) is printed as `error: ...` with exit status 2, a failed run (RuntimeError,
TimeoutError) with exit status 1, both without a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

_SUBCOMMAND_MODULES = (
    "demo.command",
    "bags.make_bag",
    "live.replay",
    "live.record",
    "run.command",
    "batch.command",
    "bags.synthetic_scene",
    "evaluation.ate",
    "loop.loop_eval",
    "loop.reloc_eval",
    "evaluation.sequence",
    "export.command",
)
_DISPATCHED = {
    "parity": "numerical parity run of the released architecture on a ../shared/parity fixture",
    "convert": "validate a .pt checkpoint against the model layout, write .safetensors",
}


def build_parser() -> argparse.ArgumentParser:
    """The full parser with every subcommand registered."""
    parser = argparse.ArgumentParser(
        prog="lingbot-map-ros", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in _SUBCOMMAND_MODULES:
        importlib.import_module(f"lingbot_map_ros.tools.{name}").add_parser(subparsers)
    for name, help_text in _DISPATCHED.items():
        p = subparsers.add_parser(name, help=help_text, add_help=False)
        p.add_argument("rest", nargs=argparse.REMAINDER)
        p.set_defaults(func=None)
    return parser


def _dispatch(name: str, argv: list[str]) -> int:
    try:
        module = importlib.import_module(f"lingbot_map_ros.tools.{name}")
    except ModuleNotFoundError as err:
        if err.name != f"lingbot_map_ros.tools.{name}":
            raise
        print(
            f"error: `{name}` is not available in this build (lingbot_map_ros.tools.{name} is missing)",
            file=sys.stderr,
        )
        return 2
    return int(module.main(argv) or 0)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in _DISPATCHED:
        return _dispatch(argv[0], argv[1:])
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except (RuntimeError, TimeoutError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
