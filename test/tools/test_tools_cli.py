"""The `lingbot-map-ros` front: subcommands registered, model tools dispatched, errors without tracebacks."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from lingbot_map_ros.tools import cli

SUBCOMMANDS = (
    "demo",
    "make-bag",
    "replay",
    "record",
    "run",
    "batch",
    "synthetic-scene",
    "ate",
    "parity",
    "convert",
)


def test_help_lists_every_subcommand(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert all(f"    {name}" in out for name in SUBCOMMANDS)


@pytest.mark.parametrize("name", ["parity", "convert"])
def test_model_tools_get_their_own_arguments(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli.main([name, "--help"])  # their own parser answers, not ours
    assert exit_info.value.code == 0
    assert f"lingbot_map_ros.tools.{name}" in sys.modules
    assert "COMMAND" not in capsys.readouterr().out


def test_a_missing_dispatch_target_is_reported(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli._dispatch("no_such_tool", []) == 2
    assert "lingbot_map_ros.tools.no_such_tool is missing" in capsys.readouterr().err


def test_installed_entry_point_reports_bad_input_without_a_traceback(tmp_path: Path) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "lingbot_map_ros.tools.cli",
            "run",
            str(tmp_path / "nope"),
            "-o",
            str(tmp_path / "out"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"error: bag {tmp_path / 'nope'} does not exist"


def test_the_parser_does_not_import_ray() -> None:
    """Ray (the `[fleet]` extra) is loaded by `batch` when it runs, not by every command's parser."""
    code = (
        "import sys; from lingbot_map_ros.tools import cli; cli.build_parser(); print('ray' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
