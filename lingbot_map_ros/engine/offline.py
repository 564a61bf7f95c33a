"""The engine's second face, for the offline tools only: what `run`, `batch`, `evaluate`, `loop-eval`,
`reloc-eval`, `export` and the oracles need beyond engine/face.py.

Evaluation aligns trajectories by Sim(3) (`Sim3`, `from_pose`), the oracles build rigid poses (`rigid`), the
reports read result files back (`read_tum`, `read_ply`) and write JSON atomically (`atomic_write`), `run`
keeps the whole voxel map (`VoxelMap`) and checks a loaded session's compatibility (`compat_fields`, its
`--load` flags), relocalisation is evaluated with its own settings (`RelocaliseConfig`). The node needs
none of it: ros/ may not import this module (test/tools/test_tools_layering_face.py), so Sim(3) arithmetic
stays out of ros/. docs/architecture.md "The engine's face".
"""

from __future__ import annotations

from .config import DEFAULT_MAX_WINDOW
from .geometry import Sim3, rigid
from .loop.descriptor import Describe
from .loop.relocalise import RelocaliseConfig
from .loop.similarity import from_pose
from .mapping.voxel_map import VoxelMap
from .mapping.writers import atomic_write, read_ply, read_tum
from .persistence.save_load import compat_fields

__all__ = [
    # evaluation and oracles: Sim(3) alignment, rigid poses, relocalisation settings
    "RelocaliseConfig",
    "Sim3",
    "from_pose",
    "rigid",
    # offline runs: the whole map, a loaded session's compatibility, the window flag's bound, describe seam
    "DEFAULT_MAX_WINDOW",
    "Describe",
    "VoxelMap",
    "compat_fields",
    # result files read back and reports written
    "atomic_write",
    "read_ply",
    "read_tum",
]
