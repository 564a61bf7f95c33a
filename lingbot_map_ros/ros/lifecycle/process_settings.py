"""`ProcessSettings`: the process-wide settings the node changes at configure, restored at cleanup.

Python and torch keep some settings per process, not per object: the GIL switch interval
(`sys.setswitchinterval`) and torch.compile's cache folder (the `TORCHINDUCTOR_CACHE_DIR` environment
variable, read at the first compile). The layers below ros/ never set them (docs/architecture.md,
"Process-wide settings"); the node sets them here when configure builds a CUDA pipeline (they depend on the
configured device and parameters, so not at `main`) and `restore()` puts the previous values back when
cleanup releases it.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

_UNSET = object()


class ProcessSettings:
    """Records each setting's previous value the first time it is changed; `restore()` puts them back."""

    def __init__(self) -> None:
        self._switch_interval: float | None = None
        self._compile_cache_env: object = _UNSET

    def set_switch_interval(self, seconds: float) -> None:
        """`sys.setswitchinterval(seconds)` (the GIL hand-over period of every thread of the process)."""
        if self._switch_interval is None:
            self._switch_interval = sys.getswitchinterval()
        sys.setswitchinterval(seconds)

    def set_compile_cache_dir(self, path: Path) -> None:
        """torch.compile's persistent caches in `path` (`TORCHINDUCTOR_CACHE_DIR`, read at the first
        compile)."""
        if self._compile_cache_env is _UNSET:
            self._compile_cache_env = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(path)

    def restore(self) -> None:
        """Put back every value changed since construction (or the last `restore`)."""
        if self._switch_interval is not None:
            sys.setswitchinterval(self._switch_interval)
            self._switch_interval = None
        if self._compile_cache_env is not _UNSET:
            if self._compile_cache_env is None:
                os.environ.pop("TORCHINDUCTOR_CACHE_DIR", None)
            else:
                os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(self._compile_cache_env)
            self._compile_cache_env = _UNSET
