"""gtsam, imported only when loop closure runs: the pose graph (`pose_graph.py`) and the Sim(3) conversions
(`similarity.py`) reach it through `gtsam`, a stand-in that imports the module at its first attribute access,
so a node with loop closure off (or an install without gtsam) never imports it.

`gtsam_missing()` says why loop closure cannot run (None when gtsam imports): the node checks it before it
builds a closer and maps on without loop closure (one WARN, `loop_closure_off` in /diagnostics).
"""

from __future__ import annotations

from types import ModuleType

#: What a user installs to get loop closure (README.md, docs/robot.md).
INSTALL_HINT = "pip install gtsam"


def require_gtsam() -> ModuleType:
    """The gtsam module; ImportError naming the install line when it is absent."""
    try:
        import gtsam  # noqa: PLC0415 - the one import of gtsam, at first use
    except ImportError as exc:
        raise ImportError(f"loop closure needs gtsam ({exc}); {INSTALL_HINT}") from exc
    return gtsam


def gtsam_missing() -> str | None:
    """Why gtsam cannot be imported (with the install line), or None when it can."""
    try:
        require_gtsam()
    except ImportError as exc:
        return str(exc)
    return None


class _LazyGtsam:
    """Stands for the gtsam module: `gtsam.X` imports it on first use (then Python's module cache answers)."""

    def __getattr__(self, name: str) -> object:
        return getattr(require_gtsam(), name)


gtsam = _LazyGtsam()
