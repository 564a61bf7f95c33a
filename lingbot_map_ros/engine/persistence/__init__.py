"""Sessions on disk: a running stream (session + mapper [+ loop closer]) to and from a versioned folder.

`save_load.py` moves a live stream to and from a folder (`capture`, `load_target`, `restore`, `load`,
`compat_fields`, `session_limits`, re-exported here); `store.py` owns the folder format (`save_session`, which
writes a captured snapshot, re-exported here); `check.py` decides whether a validated folder fits what would
continue it (the load is a transaction); the untrusted `.npz` reader is engine/npz_input.py (shared with the
loop closer's files).
"""

from .save_load import capture, compat_fields, load, load_target, restore, session_limits
from .store import save_session

__all__ = ["capture", "compat_fields", "load", "load_target", "restore", "save_session", "session_limits"]
