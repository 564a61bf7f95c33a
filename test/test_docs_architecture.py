"""docs/architecture.md's "Where to change what" table stays true: every file or folder it names exists."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ARCHITECTURE = REPO / "docs" / "architecture.md"
#: A path as the docs write one: folders then a file with a known suffix (`ros/node.py`, `docs/node.md`).
PATH = re.compile(r"(?<![\w./-])((?:[\w-]+/)+[\w-]+\.(?:py|md|yaml|sh|xml|toml))\b")


def _table(title: str) -> list[str]:
    """The rows of the first Markdown table under the heading `title`."""
    text = ARCHITECTURE.read_text()
    section = text.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]
    return [line for line in section.splitlines() if line.startswith("|")]


def _exists(path: str) -> bool:
    """A path of the docs: relative to the repository, or to the package (`ros/node.py`)."""
    return (REPO / path).exists() or (REPO / "lingbot_map_ros" / path).exists()


def test_where_to_change_what_names_only_paths_that_exist() -> None:
    rows = _table("Where to change what")
    paths = {path for row in rows for path in PATH.findall(row)}
    assert len(rows) > 5 and len(paths) > 15, (rows, paths)  # the table and the pattern both still match
    missing = sorted(path for path in paths if not _exists(path))
    assert missing == [], f"docs/architecture.md names paths that do not exist: {missing}"


def test_the_path_pattern_finds_package_and_repository_paths() -> None:
    row = "| x | `ros/node.py` (`LingBotMapNode`), docs/node.md, test/fault_injection.py, engine/nope.py |"
    expected = ["ros/node.py", "docs/node.md", "test/fault_injection.py", "engine/nope.py"]
    assert PATH.findall(row) == expected
    assert not _exists("engine/nope.py") and _exists("ros/node.py") and _exists("docs/node.md")
