"""An environment without some Python modules, for child processes: `hide_modules(tmp, "gtsam", "evo")`
writes a `sitecustomize.py` whose import hook makes `import gtsam` (and its submodules) raise ImportError,
and returns the PYTHONPATH that puts it first. A child started with it behaves as in an install without
those packages (the node's optional dependencies, issue 29)."""

from __future__ import annotations

import os
from pathlib import Path

HOOK = '''import sys


class _Hidden:
    """Import hook: the listed top-level modules are absent."""

    NAMES = {names!r}

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in self.NAMES:
            raise ImportError(f"No module named {{name!r}} (hidden by the test)", name=name)
        return None


sys.meta_path.insert(0, _Hidden())
'''


def hide_modules(folder: Path, *names: str) -> str:
    """A PYTHONPATH (this one's entries after a hook folder) under which `names` cannot be imported."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sitecustomize.py").write_text(HOOK.format(names=set(names)))
    rest = os.environ.get("PYTHONPATH", "")
    return os.pathsep.join([str(folder), *([rest] if rest else [])])
