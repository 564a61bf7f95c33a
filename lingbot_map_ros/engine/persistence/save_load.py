"""Save a running mapping session and continue from a saved one: `StreamingSession` + `Mapper` <-> folder.

The one place that knows which engine state goes into a session folder (docs/session.md); the node's
`~/save_session` / `~/load_session` and `lingbot-map-ros run --save/--load` both call it. No ROS imports: the
caller passes the stamps of the anchor frames' metas (`stamp_ns`) and its compatibility fields.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..mapping.frames import TfMode
from ..mapping.mapper import Mapper
from ..result import FrameResult
from ..stream.session import AnchorState, StreamingSession
from .check import LoadTarget, check_loadable
from .store import (
    SessionError,
    SessionLimits,
    SessionSnapshot,
    checkpoint_fingerprint,
    load_session,
)

if TYPE_CHECKING:  # the loop closer pulls in gtsam: imported only by a caller that runs one
    from ..loop import LoopCloser

#: Points inserted per `VoxelMap.insert` call while a saved map is restored (bounds the temporaries).
_RESTORE_CHUNK = 1 << 20


def compat_fields(
    preset: str, checkpoint: str | Path | None, image_width: int, scale_frames: int, seed: int = 0
) -> dict[str, Any]:
    """What a saved session must share with the model that loads it (docs/session.md "compat")."""
    return {
        "preset": preset,
        "weights": checkpoint_fingerprint(checkpoint, preset, seed),
        "image_width": int(image_width),
        "scale_frames": int(scale_frames),
    }


def capture(
    session: StreamingSession,
    mapper: Mapper,
    compat: dict[str, Any],
    stamp_ns: Callable[[object], int],
    extra_state: dict[str, Any] | None = None,
    loop: LoopCloser | None = None,
) -> SessionSnapshot:
    """The session's current anchors and the mapper's map, grid, trajectory and frame chain (and the loop
    closer's keyframe map and graph); `store.save_session(target, snapshot)` writes it.

    Args:
        stamp_ns: a frame's ``push`` meta -> its stamp in integer nanoseconds.
        extra_state: JSON-able additions of the caller (frame ids, T_map_odom, ...) under ``state["node"]``.
        loop: the loop closer whose keyframes (with descriptors) and graph are saved (the caller holds its
            worker's lock); None: none.
    Raises:
        SessionError: nothing to save yet (the anchor phase has not completed, or no frame was mapped).
    """
    anchors = session.anchor_state()
    if anchors is None:
        raise SessionError("nothing to save yet: the anchor phase has not completed")
    try:
        state = mapper.state()
    except ValueError as exc:
        raise SessionError(f"nothing to save yet: {exc}") from None
    state["node"] = extra_state or {}
    xyz, rgb = mapper.voxels.points()
    stamps_s, rows = mapper.trajectory.full_history()
    hits, passes, origin = mapper.grid.counts()
    loop_arrays = {}
    if loop is not None:
        from ..loop.persist import STATE_KEY, export_loop

        loop_arrays, state[STATE_KEY] = export_loop(loop)
    snapshot = SessionSnapshot(
        compat=dict(compat),
        anchor_images=anchors.images,
        anchor_stamps_ns=np.array([stamp_ns(m) for m in anchors.metas], np.int64),
        source_hw=anchors.source_hw,
        alignment=anchors.alignment,
        map_xyz=xyz,
        map_rgb=rgb,
        trajectory_stamps_ns=np.rint(stamps_s * 1e9).astype(np.int64),
        trajectory_poses=rows,
        grid_hits=hits,
        grid_passes=passes,
        grid_origin=origin,
        state=state,
    )
    if loop_arrays:
        snapshot.loop = loop_arrays
    return snapshot


def session_limits(session: StreamingSession, mapper: Mapper) -> SessionLimits:
    """What a session may hold to be continued here: S0 anchors at most ``image_width`` a side, the mapper's
    point, pose and grid budgets. A 1.6 MB file whose anchors inflate to 32 x 4096² x 3 is refused from its
    manifest, before anything is inflated (issue 20)."""
    return SessionLimits(
        max_anchor_frames=session.config.scale_frames,
        max_image_side=session.config.image_width,
        max_points=mapper.config.voxel.max_points,
        max_poses=mapper.config.trajectory_max_poses,
        max_grid_cells=mapper.config.grid.max_cells**2,
    )


def load_target(
    session: StreamingSession,
    mapper: Mapper,
    tf_mode: str = TfMode.AUTO,
    node_state: dict[str, Any] | None = None,
) -> LoadTarget:
    """What a snapshot must fit to continue in ``session`` and ``mapper`` (their configuration, and the
    network size of the camera streaming now)."""
    return LoadTarget(
        scale_frames=session.config.scale_frames,
        image_width=session.config.image_width,
        grid_resolution=mapper.config.grid.resolution,
        grid_max_cells=mapper.config.grid.max_cells,
        scale=mapper.config.scale,
        tf_mode=tf_mode,
        network_hw=session.stats().network_hw,
        node_state=node_state or {},
    )


def restore(
    session: StreamingSession,
    mapper: Mapper,
    snapshot: SessionSnapshot,
    target: LoadTarget | None = None,
    loop: LoopCloser | None = None,
) -> list[FrameResult]:
    """Continue ``snapshot``: re-run its anchors in ``session`` (a new epoch in the saved map frame) and put
    its map, grid, trajectory, chain and scale into ``mapper``. Later frames' results go to
    ``mapper.process`` as usual. Returns the replayed anchors' results (already in the trajectory: not to
    be mapped again).

    A transaction: ``snapshot`` is checked against ``target`` (default `load_target` of the two) before either
    is touched (`session_check.check_loadable`, and `loop.persist.check_loop` for ``loop``, the closer that
    takes the saved keyframe map and graph; a session without one clears it).
    Raises:
        SessionError: the snapshot does not fit; ``session`` and ``mapper`` are then unchanged. Only a model
            error while re-running the anchors (e.g. out of memory) leaves a reset session (as in ``push``).
    """
    check_loadable(snapshot, target or load_target(session, mapper))
    saved_loop = None
    if loop is not None:
        from ..loop.persist import STATE_KEY, check_loop

        saved_loop = check_loop(
            snapshot.loop, snapshot.state.get(STATE_KEY), loop.config.depth_stride, loop.descriptor_dim()
        )
    stamps = tuple(int(v) for v in snapshot.anchor_stamps_ns)
    anchors = AnchorState(snapshot.anchor_images, stamps, snapshot.source_hw, snapshot.alignment)
    try:
        results = session.restore_anchors(anchors, reason="session loaded")
    except ValueError as exc:
        raise SessionError(str(exc)) from None
    first = results[0]
    mapper.restore(snapshot.state, first.epoch, first.segment)
    mapper.grid.restore(snapshot.grid_hits, snapshot.grid_passes, snapshot.grid_origin)
    mapper.trajectory.load(snapshot.trajectory_stamps_ns.astype(np.float64) * 1e-9, snapshot.trajectory_poses)
    for lo in range(0, len(snapshot.map_xyz), _RESTORE_CHUNK):
        mapper.voxels.insert(
            snapshot.map_xyz[lo : lo + _RESTORE_CHUNK], snapshot.map_rgb[lo : lo + _RESTORE_CHUNK]
        )
    if saved_loop is not None:
        loop.restore(saved_loop)
    elif loop is not None:
        loop.clear()
    return results


def load(
    folder: str | Path,
    session: StreamingSession,
    mapper: Mapper,
    compat: dict[str, Any],
    limits: SessionLimits | None = None,
    loop: LoopCloser | None = None,
) -> tuple[SessionSnapshot, list[FrameResult]]:
    """`load_session` (validated against ``compat``, within ``limits``, default `session_limits`) then
    `restore` (into ``loop`` too)."""
    snapshot = load_session(folder, compat, limits or session_limits(session, mapper))
    return snapshot, restore(session, mapper, snapshot, loop=loop)
