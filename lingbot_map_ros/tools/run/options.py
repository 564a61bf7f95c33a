"""The options of one bag's run (`RunConfig`) and their flags, shared by `run`, `batch` and `evaluate`.

`RunConfig` holds the engine's own configs (`session`: a `SessionConfig`, `voxel`: a `VoxelMapConfig`)
instead of copies of their fields. The flags of engine settings (`SETTING_FLAGS`) are derived from the owning
dataclass field (`engine.settings`): default, help and accepted range come from there, so `run` and the
node's parameters (ros/params/table.py) cannot disagree.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import Any

from lingbot_map_ros.engine.face import (
    PRESET_NAMES,
    MapperConfig,
    Owned,
    ScaleConfig,
    SessionConfig,
    VoxelMapConfig,
    owned,
)
from lingbot_map_ros.engine.offline import DEFAULT_MAX_WINDOW, compat_fields

#: `run`'s flags of engine settings: flag -> (the `RunConfig` field holding the owner, the owner's setting).
SETTING_FLAGS: dict[str, tuple[str, Owned]] = {
    "--width": ("session", owned(SessionConfig, "image_width")),
    "--scale-frames": ("session", owned(SessionConfig, "scale_frames")),
    "--sliding-window": ("session", owned(SessionConfig, "sliding_window")),
    "--keyframe-interval": ("session", owned(SessionConfig, "keyframe_interval")),
    "--voxel-size": ("voxel", owned(VoxelMapConfig, "voxel_size")),
    "--conf-threshold": ("voxel", owned(VoxelMapConfig, "conf_threshold")),
    "--stride": ("voxel", owned(VoxelMapConfig, "pixel_stride")),
    "--max-points": ("voxel", owned(VoxelMapConfig, "max_points")),
}


def _flag_values(group: str) -> dict[str, Any]:
    """{field: default} of the settings that the flags of `group` (`session` or `voxel`) set."""
    return {item.name: item.default for held, item in SETTING_FLAGS.values() if held == group}


def run_session_config(**changes: Any) -> SessionConfig:
    """The streaming settings of a run: the flags' values (defaults: the settings'), the pool sized to fit
    the window, the rest at the engine's defaults."""
    values = {**_flag_values("session"), **changes}
    return SessionConfig(**values, max_window=max(DEFAULT_MAX_WINDOW, int(values["sliding_window"])))


def run_voxel_config(**changes: Any) -> VoxelMapConfig:
    """The map settings of a run: the flags' values (defaults: the node's), the rest at the engine's."""
    return VoxelMapConfig(**{**_flag_values("voxel"), **changes})


@dataclass(frozen=True)
class RunConfig:
    """Model, streaming and map settings of an offline run. `checkpoint` None: synthetic weights (seeded
    with `seed`). `session` and `voxel`: the engine's configs the run streams and maps with."""

    bag: Path
    output_dir: Path
    topic: str | None = None
    preset: str = "tiny"
    checkpoint: Path | None = None
    device: str = "cpu"
    session: SessionConfig = field(default_factory=run_session_config)
    voxel: VoxelMapConfig = field(default_factory=run_voxel_config)
    max_frames: int | None = None
    seed: int = 0
    threads: int | None = 1  # torch CPU threads, set by the entry point for the run (`torch_threads`)
    scale_factor: float | None = None  # metres per model unit; None: model units (scale.source none)
    progress: bool = True
    load_session: Path | None = None
    save_session: Path | None = None
    loop_closure: bool = True  # close loops (engine/camera_state.py), as the node's loop_closure.enabled
    tracking_health: bool = False  # judge each frame's tracking (engine/health.py), as tracking.health
    keep_frames: bool = False  # `run --keep-frames`: the posed frames for `export` (tools/run/frames.py)

    @property
    def image_width(self) -> int:
        """Network input width in pixels (`session.image_width`)."""
        return self.session.image_width

    def compat(self) -> dict[str, object]:
        """The fields a saved session must share with this run (`persistence.compat_fields`)."""
        return compat_fields(
            self.preset, self.checkpoint, self.session.image_width, self.session.scale_frames, self.seed
        )

    def mapper_config(self) -> MapperConfig:
        """The node's mapper settings for these options (defaults equal the node's parameters)."""
        scale = ScaleConfig("fixed", self.scale_factor) if self.scale_factor else ScaleConfig("none")
        return MapperConfig(voxel=self.voxel, scale=scale)

    def option_values(self) -> dict[str, object]:
        """Every option as a flat JSON-friendly dict: paths as strings, `session` and `voxel` as the fields
        their flags set (e.g. `image_width`, `pixel_stride`)."""
        out: dict[str, object] = {}
        for item in fields(self):
            value = getattr(self, item.name)
            if is_dataclass(value):
                out.update({name: getattr(value, name) for name in _flag_values(item.name)})
            else:
                out[item.name] = str(value) if isinstance(value, Path) else value
        return out


def add_run_options(p: argparse.ArgumentParser) -> None:
    """The options of one bag's run (topic, model, streaming, map) that `run`, `batch` and `evaluate`
    share; the flags of engine settings come from `SETTING_FLAGS`."""
    p.add_argument("--topic", default=None, help="camera topic (default: the bag's only camera topic)")
    p.add_argument("--preset", choices=PRESET_NAMES, default="tiny")
    p.add_argument("--checkpoint", type=Path, default=None, help="default: synthetic weights")
    p.add_argument("--device", default="cpu", help="torch device (cpu, cuda, cuda:N)")
    _add_setting_flags(p, "session")
    p.add_argument("--max-frames", type=int, default=None)
    p.add_argument("--seed", type=int, default=0, help="seed of the synthetic weights")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (fixed for determinism)")
    _add_setting_flags(p, "voxel")
    p.add_argument(
        "--scale-factor",
        type=float,
        default=None,
        help="metres per model unit (node: scale.source fixed, scale.factor); default: none",
    )
    p.add_argument(
        "--no-loop-closure",
        dest="loop_closure",
        action="store_false",
        help="no loop closure (node: loop_closure.enabled false); default: loops are closed as in the node",
    )
    p.add_argument(
        "--tracking-health",
        action="store_true",
        help="judge each frame's tracking as the node's tracking.health: a lost camera maps nothing and "
        "relocalises against the keyframe map (docs/robot.md 'Tracking state'); default: off as in the node",
    )


def _add_setting_flags(p: argparse.ArgumentParser, group: str) -> None:
    """The flags of `SETTING_FLAGS` whose setting `RunConfig.<group>` holds: default, help and range from
    the setting."""
    for flag, (held, item) in SETTING_FLAGS.items():
        if held != group:
            continue
        low, high = item.setting.bounds or (None, None)
        p.add_argument(
            flag,
            type=_bounded(type(item.default), low, high),
            default=item.default,
            help=item.setting.doc
            + (f" Range [{low}, {high}]." if item.setting.bounds else "")
            + " (default: %(default)s)",
        )


def _bounded(kind: type, low: float | None, high: float | None):
    """An argparse `type`: `kind(text)`, rejected outside [low, high] (the setting's range)."""

    def parse(text: str) -> object:
        try:
            value = kind(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(f"expected {kind.__name__}, got {text!r}") from exc
        if low is not None and high is not None and not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{value} is outside [{low}, {high}]")
        return value

    return parse


def run_config(args: argparse.Namespace, bag: Path, output: Path) -> RunConfig:
    """The `RunConfig` of `bag` -> `output` for the options of `add_run_options` (and `run`'s --load/--save
    where `args` has them). Raises ValueError for settings the engine rejects (e.g. a width that is not a
    multiple of the patch size)."""
    values: dict[str, dict[str, Any]] = {"session": {}, "voxel": {}}
    for flag, (group, item) in SETTING_FLAGS.items():
        values[group][item.name] = getattr(args, flag.lstrip("-").replace("-", "_"))
    return RunConfig(
        bag=bag,
        output_dir=output,
        topic=args.topic,
        preset=args.preset,
        checkpoint=args.checkpoint,
        device=args.device,
        session=run_session_config(**values["session"]),
        voxel=run_voxel_config(**values["voxel"]),
        max_frames=args.max_frames,
        seed=args.seed,
        threads=args.threads,
        scale_factor=args.scale_factor,
        load_session=getattr(args, "load", None),
        save_session=getattr(args, "save", None),
        loop_closure=args.loop_closure,
        tracking_health=getattr(args, "tracking_health", False),
        keep_frames=getattr(args, "keep_frames", False),
    )
