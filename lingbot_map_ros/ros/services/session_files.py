"""The node's saved sessions: where they live (`session.dir`), what they must match, how they are named.

`~/save_session` captures the session and the mapper under the node's locks (`capture`, copies only) and
writes the folder outside them (`write`); `~/load_session` and `session.load_path` read and validate a folder
(`read`) before anything of the running map is touched. Formats and rules: docs/session.md.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Protocol

from ...engine.face import (
    LOOP_STATE_KEY,
    SessionError,
    SessionLimits,
    SessionSnapshot,
    StreamingSession,
    bounded_names,
    check_loadable,
    check_loop,
    clean_stale_temporaries,
    load_session,
    persistence,
    resolve_under,
    save_session,
)
from ..input.intake import InputFrame
from ..outputs.mapping import MappingOutputs
from ..params.declare import NodeParams, resolve_directory


def stamp_ns(meta: object) -> int:
    """A `push` meta -> its image stamp in integer ns: the node's `InputFrame`, or the stamp itself (the
    anchors of a loaded session carry their saved stamps)."""
    if isinstance(meta, InputFrame):
        stamp = meta.header.stamp
        return stamp.sec * 1_000_000_000 + stamp.nanosec
    if isinstance(meta, int):
        return meta
    raise SessionError(f"no stamp for an anchor frame of type {type(meta).__name__}")


class SessionCamera(Protocol):
    """The camera a session loads into (ros/cameras/stream.py `CameraStream`, which imports this module)."""

    outputs: MappingOutputs | None

    @property
    def session(self) -> StreamingSession | None:
        """The camera's stream, None while not configured."""

    def restore(self, snapshot: SessionSnapshot, clear_queue: Callable[[str], int]) -> None:
        """Continue `snapshot` (a new stream in its map frame)."""


class SessionFiles:
    """Compatibility fields (the checkpoint is hashed once per checkpoint path), naming and validation."""

    def __init__(self) -> None:
        self._compat: tuple[tuple[Any, ...], dict[str, Any]] | None = None
        self._saves = 0

    def compat(self, p: NodeParams) -> dict[str, Any]:
        """`persistence.compat_fields` of the configured model (hashing a 4.6 GB checkpoint takes seconds:
        done at the first save or load, then cached)."""
        key = (
            p.model_preset,
            p.model_checkpoint,
            p.model_image_width,
            p.kv_cache_scale_frames,
            p.model_synthetic_seed,
        )
        if self._compat is None or self._compat[0] != key:
            checkpoint = Path(p.model_checkpoint).expanduser() if p.model_checkpoint else None
            fields = persistence.compat_fields(
                p.model_preset,
                checkpoint,
                p.model_image_width,
                p.kv_cache_scale_frames,
                p.model_synthetic_seed,
            )
            self._compat = (key, fields)
        return dict(self._compat[1])

    def capture(self, p: NodeParams, session: StreamingSession, outputs: MappingOutputs) -> SessionSnapshot:
        """Copies of everything a session holds (call under the node's session and publish locks; the map
        thread's queued works are integrated first)."""
        compat, node_state = self.compat(p), _node_state(outputs)
        with outputs.both_sides(), outputs.held_closer() as closer:
            return persistence.capture(session, outputs.mapper, compat, stamp_ns, node_state, loop=closer)

    def write(self, p: NodeParams, snapshot: SessionSnapshot) -> str:
        """Write `snapshot` as `session_<time>_<n>` below `session.dir`; returns the report line."""
        base = resolve_directory(p.session_dir, "session.dir")
        self._saves += 1
        name = f"session_{time.strftime('%Y%m%d_%H%M%S')}_{self._saves:03d}"
        base.mkdir(parents=True, exist_ok=True)
        folder = save_session(resolve_under(base, name), snapshot)
        return (
            f"session: {folder} ({snapshot.anchor_images.shape[0]} anchors, {len(snapshot.map_xyz)} "
            f"points, {len(snapshot.trajectory_stamps_ns)} poses); session.load_path:={name} loads it"
        )

    def read(self, p: NodeParams, limits: SessionLimits) -> tuple[str, SessionSnapshot]:
        """The session named by `session.load_path`, validated against the configured model, within
        `limits` (`persistence.session_limits` of the camera that would continue it).

        Raises:
            SessionError: no name set, a path outside `session.dir`, or any check of `load_session`.
        """
        name = p.session_load_path.strip()
        if not name:
            raise SessionError("session.load_path is empty: set it to a session folder below session.dir")
        try:
            base = resolve_directory(p.session_dir, "session.dir")
        except ValueError as exc:
            raise SessionError(str(exc)) from None
        return name, load_session(resolve_under(base, name), self.compat(p), limits)

    def load(
        self,
        p: NodeParams,
        camera: SessionCamera,
        clear_queue: Callable[[str], int],
        stream_change: AbstractContextManager,
    ) -> str:
        """`~/load_session` for `camera`: read and validate the session within the camera's budgets, then
        under `stream_change` (the lock resets take) check it against the camera's session and mapper, the
        node's `tf.mode` and frame ids (`session_check.check_loadable`: a refused load touches nothing), and
        only then start a new stream in its map frame. Returns the report line."""
        session, outputs = camera.session, camera.outputs
        if session is None or outputs is None:
            raise SessionError("not active")
        name, snapshot = self.read(p, persistence.session_limits(session, outputs.mapper))
        frames = {"map_frame": p.map_frame, "odom_frame": p.odom_frame, "base_frame": p.base_frame}
        with stream_change:
            check_loadable(snapshot, persistence.load_target(session, outputs.mapper, p.tf_mode, frames))
            if (closer := outputs.state.closer) is not None:  # the keyframe map too, before any change
                dim = closer.descriptor_dim(probe=False)  # the node's thread: no model pass here
                check_loop(snapshot.loop, snapshot.state.get(LOOP_STATE_KEY), closer.config.depth_stride, dim)
            camera.restore(snapshot, clear_queue)
        poses, keyframes = len(snapshot.trajectory_stamps_ns), len(snapshot.loop.get("kf_keys", ()))
        return (
            f"loaded session {name}: {len(snapshot.map_xyz)} points, {poses} poses, {keyframes} loop "
            f"closure keyframes, TF mode {outputs.mapper.mode}; new frames continue its map frame"
        )

    @staticmethod
    def clean(p: NodeParams) -> str:
        """Remove the temporaries of saves interrupted in an earlier run below `session.dir` (configure);
        returns the log line ('' when there were none)."""
        try:
            stale = clean_stale_temporaries(resolve_directory(p.session_dir, "session.dir"))
        except (OSError, ValueError) as exc:
            return f"session.dir: stale temporaries not cleaned: {exc}"
        return f"removed {len(stale)} unfinished session save(s): {bounded_names(stale)}" if stale else ""


def _node_state(outputs: MappingOutputs) -> dict[str, object]:
    """What a saved session keeps of the node (docs/session.md `state.node`): frame ids and T_map_odom."""
    estimate = outputs.tracker.estimate()
    cfg = outputs.config
    return {
        "map_frame": cfg.map_frame,
        "odom_frame": cfg.odom_frame,
        "base_frame": cfg.base_frame,
        "map_odom": estimate.tolist() if estimate is not None else None,
    }
