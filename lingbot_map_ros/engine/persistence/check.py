"""Whether a validated session folder fits the stream and mapper that would continue it (`check_loadable`).

A load is a transaction: `persistence.restore` calls `check_loadable` before anything of the running session
or mapper is touched, so a refused load leaves the current map, trajectory, epoch and counters exactly as they
were (docs/session.md). `session_store.load_session` has checked the folder itself (format, hashes, array
shapes, finite values); this checks the snapshot against the loader's configuration: the anchors against the
network size and S0, the camera currently streaming, the TF mode, the frame chain, the scale estimate, the
occupancy grid (size and resolution), every trajectory pose, and the node's own saved fields.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..mapping.frames import RESOLVED_TF_MODES, TfMode, saved_rigid
from ..mapping.scale import ScaleConfig, ScaleEstimator
from ..npz_input import SessionError
from ..stream.preprocess import preprocess_geometry
from .store import SessionSnapshot

#: |q| of a saved trajectory quaternion must be within this of 1.
QUATERNION_NORM_TOLERANCE = 1e-3


@dataclass(frozen=True)
class LoadTarget:
    """What a session must fit to be continued.

    Attributes:
        scale_frames: S0 of the stream; image_width: its network input width.
        grid_resolution: metres per cell of the mapper's grid; grid_max_cells: most cells a side.
        scale: the mapper's scale configuration (a saved estimate is restored into it).
        tf_mode: the configured TF mode (``auto``: any concrete mode).
        network_hw: (h, w) network size of the camera streaming now (None before its first frame).
        node_state: fields of ``state["node"]`` that must be equal (e.g. the frame ids in use).
    """

    scale_frames: int
    image_width: int
    grid_resolution: float
    grid_max_cells: int
    scale: ScaleConfig = field(default_factory=ScaleConfig)
    tf_mode: str = TfMode.AUTO
    network_hw: tuple[int, int] | None = None
    node_state: dict[str, Any] = field(default_factory=dict)


def check_loadable(snapshot: SessionSnapshot, target: LoadTarget) -> None:
    """Raise `SessionError` naming the first field of ``snapshot`` that does not fit ``target``; touches
    nothing."""
    try:
        _check_anchors(snapshot, target)
        _check_state(snapshot.state, target)
        _check_grid(snapshot, target)
        _check_trajectory(snapshot.trajectory_poses)
    except SessionError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise SessionError(f"saved session state is malformed ({type(exc).__name__}: {exc})") from None


def _check_anchors(s: SessionSnapshot, target: LoadTarget) -> None:
    geometry = preprocess_geometry(tuple(s.source_hw), target.image_width)
    expected = (target.scale_frames, *geometry.out_hw, 3)
    if s.anchor_images.shape != expected:
        raise SessionError(
            f"anchors.npz: images are {list(s.anchor_images.shape)}, this node needs {list(expected)} "
            f"(scale_frames {target.scale_frames}, network size of {s.source_hw[0]}x{s.source_hw[1]})"
        )
    if target.network_hw is not None and tuple(target.network_hw) != geometry.out_hw:
        raise SessionError(
            f"the camera streams at network size {target.network_hw[0]}x{target.network_hw[1]}, the "
            "session's "
            f"anchors are {geometry.out_hw[0]}x{geometry.out_hw[1]}: its first frame would restart the map"
        )


def _check_state(state: dict[str, Any], target: LoadTarget) -> None:
    mode = state["tf_mode"]
    if mode not in RESOLVED_TF_MODES:
        raise SessionError(f"saved TF mode must be a concrete mode, got {str(mode)[:40]!r}")
    if target.tf_mode != TfMode.AUTO and mode != target.tf_mode:
        raise SessionError(f"saved TF mode {mode} differs from this node's tf.mode {target.tf_mode}")
    chain = state["chain"]
    saved_rigid(chain["world_cam0"], "world_cam0")
    saved_rigid(chain["map_cam0"], "map_cam0")
    scale = float(chain["scale"])
    if not (math.isfinite(scale) and scale > 0):
        raise SessionError(f"saved chain scale must be finite and > 0, got {scale}")
    ScaleEstimator(target.scale).restore(state["scale"])  # a scratch estimator: ValueError when malformed
    node = state.get("node", {})
    if not isinstance(node, dict):
        raise SessionError("saved node state must be an object")
    for key, value in target.node_state.items():
        if key in node and node[key] != value:
            raise SessionError(f"saved {key} {str(node[key])[:80]!r} differs from this node's {value!r}")
    if node.get("map_odom") is not None:
        saved_rigid(node["map_odom"], "map_odom")


def _check_grid(s: SessionSnapshot, target: LoadTarget) -> None:
    if max(s.grid_hits.shape, default=0) > target.grid_max_cells:
        raise SessionError(
            f"grid.npz: {s.grid_hits.shape[0]}x{s.grid_hits.shape[1]} cells, this node's grid.max_cells is "
            f"{target.grid_max_cells}"
        )
    if s.grid_hits.size == 0:
        return
    saved = s.state.get("grid_resolution")
    if saved is None:
        raise SessionError("grid.npz: the session records no grid resolution (saved before it was recorded)")
    if not math.isclose(float(saved), target.grid_resolution, rel_tol=1e-9):
        raise SessionError(
            f"grid resolution {float(saved)} m in the session, grid.resolution {target.grid_resolution} m "
            "here: the grid would be published at the wrong scale (set grid.resolution to the session's)"
        )


def _check_trajectory(poses: np.ndarray) -> None:
    if len(poses) == 0:
        return
    norms = np.linalg.norm(poses[:, 3:], axis=1)
    bad = np.flatnonzero(np.abs(norms - 1.0) > QUATERNION_NORM_TOLERANCE)
    if bad.size:
        raise SessionError(
            f"trajectory.npz: {bad.size} pose(s) without a unit quaternion (first: row {int(bad[0])}, "
            f"|q| = {norms[bad[0]]:.3g})"
        )
