"""What one `lingbot-map-ros demo` run is given (`DemoConfig`) and what it replays (`DemoInput`): apart from
tools/demo/command.py, which runs it, so that tools/demo/analysis.py (the report) names them without importing
the runner that imports it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from lingbot_map_ros.tools.bags.synthetic_scene import SceneConfig


@dataclass(frozen=True)
class DemoConfig:
    """Input (default: the synthetic scene), node settings and limits of one demo run."""

    output_dir: Path = Path("lingbot_map_demo")
    bag: Path | None = None
    images: Path | None = None
    topic: str | None = None
    ground_truth: Path | None = None
    checkpoint: Path | None = None
    preset: str = "tiny"
    device: str = "cpu"
    image_width: int = 224
    scene: SceneConfig = SceneConfig()
    rate_hz: float = 5.0  # frame rate given to the scene and to --images (CPU-friendly)
    replay_rate: float = 1.0
    queue_size: int = 2
    timeout_s: float = 300.0

    def __post_init__(self) -> None:
        # The node refuses a relative output_dir (its working directory is not the caller's): folders given
        # relative are the caller's, so they are resolved here, against this process's working directory.
        object.__setattr__(self, "output_dir", absolute_path(self.output_dir))
        if self.bag is not None and self.images is not None:
            raise ValueError("give at most one of --bag and --images")
        if self.replay_rate <= 0 or self.rate_hz <= 0:
            raise ValueError(f"rates must be > 0, got rate {self.rate_hz} and replay rate {self.replay_rate}")


@dataclass(frozen=True)
class DemoInput:
    """The bag the demo replays, its camera topic and type, CameraInfo topics, and ground truth if any."""

    bag: Path
    topic: str
    msgtype: str
    info_topics: tuple[str, ...]
    ground_truth: Path | None
    description: str


def absolute_path(path: Path) -> Path:
    """`path` with '~' expanded and, when relative, joined to the current working directory (the caller's:
    the folders given on the command line are meant relative to where the command was typed)."""
    return path.expanduser().absolute()
