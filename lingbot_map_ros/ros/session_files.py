"""The node's saved sessions: where they live (`session.dir`), what they must match, how they are named.

`~/save_session` captures the session and the mapper under the node's locks (`capture`, copies only) and
writes the folder outside them (`write`); `~/load_session` and `session.load_path` read and validate a folder
(`read`) before anything of the running map is touched. Formats and rules: docs/session.md.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from ..engine import persistence
from ..engine.session import StreamingSession
from ..engine.session_store import SessionError, SessionSnapshot, load_session, resolve_under, save_session
from .intake import InputFrame
from .outputs import MappingOutputs
from .params import NodeParams, resolve_directory


def stamp_ns(meta: object) -> int:
    """A `push` meta -> its image stamp in integer ns: the node's `InputFrame`, or the stamp itself (the
    anchors of a loaded session carry their saved stamps)."""
    if isinstance(meta, InputFrame):
        stamp = meta.header.stamp
        return stamp.sec * 1_000_000_000 + stamp.nanosec
    if isinstance(meta, int):
        return meta
    raise SessionError(f"no stamp for an anchor frame of type {type(meta).__name__}")


class SessionFiles:
    """Compatibility fields (the checkpoint is hashed once per checkpoint path), naming and validation."""

    def __init__(self) -> None:
        self._compat: tuple[tuple[Any, ...], dict[str, Any]] | None = None
        self._saves = 0

    def compat(self, p: NodeParams) -> dict[str, Any]:
        """`persistence.compat_fields` of the configured model (hashing a 4.6 GB checkpoint takes seconds:
        done at the first save or load, then cached)."""
        key = (p.model_preset, p.model_checkpoint, p.model_image_width, p.kv_cache_scale_frames,
               p.model_synthetic_seed)
        if self._compat is None or self._compat[0] != key:
            checkpoint = Path(p.model_checkpoint).expanduser() if p.model_checkpoint else None
            fields = persistence.compat_fields(p.model_preset, checkpoint, p.model_image_width,
                                               p.kv_cache_scale_frames, p.model_synthetic_seed)
            self._compat = (key, fields)
        return dict(self._compat[1])

    def capture(self, p: NodeParams, session: StreamingSession, outputs: MappingOutputs) -> SessionSnapshot:
        """Copies of everything a session holds (call under the node's session and publish locks; the map
        thread's queued works are integrated first)."""
        compat, node_state = self.compat(p), outputs.session_state()
        with outputs.both_sides():
            return persistence.capture(session, outputs.mapper, compat, stamp_ns, node_state)

    def write(self, p: NodeParams, snapshot: SessionSnapshot) -> str:
        """Write `snapshot` as `session_<time>_<n>` below `session.dir`; returns the report line."""
        base = resolve_directory(p.session_dir, "session.dir")
        self._saves += 1
        name = f"session_{time.strftime('%Y%m%d_%H%M%S')}_{self._saves:03d}"
        base.mkdir(parents=True, exist_ok=True)
        folder = save_session(resolve_under(base, name), snapshot)
        return (f"session: {folder} ({snapshot.anchor_images.shape[0]} anchors, {len(snapshot.map_xyz)} "
                f"points, {len(snapshot.trajectory_stamps_ns)} poses); session.load_path:={name} loads it")

    def read(self, p: NodeParams) -> tuple[str, SessionSnapshot]:
        """The session named by `session.load_path`, validated against the configured model.

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
        return name, load_session(resolve_under(base, name), self.compat(p))
