"""Numerical parity with the reference implementation on every fixture of ../shared/parity.

Runs `python -m lingbot_map_ros.tools.parity CASE --out OUT.npz` (released preset, synthetic weights, fp32
CPU) in a subprocess per case, then compares with the fixture's expected.npz through the fixture's own
`check_parity.check()` (relative L2 1e-4 per array, 3e-4 worst frame). Each case needs ~6.5 GB of RAM for
about 30-120 s on 2 idle cores (6 min measured under heavy contention), hence `slow`; cases
run one after the other.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

SHARED = Path(__file__).resolve().parents[2].parent / "shared"
REPO = Path(__file__).resolve().parents[2]
CASES = sorted(p for p in (SHARED / "parity").glob("case_*") if (p / "case.json").is_file())


def _check_parity_module():
    spec = importlib.util.spec_from_file_location("check_parity", SHARED / "parity" / "check_parity.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_fixtures_present() -> None:
    assert len(CASES) >= 2, f"expected fixtures case_a, case_b under {SHARED / 'parity'}, found {CASES}"


@pytest.mark.slow
@pytest.mark.parametrize("case_dir", CASES, ids=[c.name for c in CASES])
def test_parity_case(case_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / f"{case_dir.name}.npz"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "lingbot_map_ros.tools.parity",
            str(case_dir),
            "--out",
            str(out),
            "--shared",
            str(SHARED),
            "--threads",
            "2",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=840,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    candidate = dict(np.load(out))
    expected = np.load(case_dir / "expected.npz")
    assert set(expected.files) <= set(candidate), f"missing arrays: {set(expected.files) - set(candidate)}"
    for name in expected.files:
        assert candidate[name].shape == expected[name].shape, name
        assert candidate[name].dtype == expected[name].dtype, name
    ok, rows = _check_parity_module().check(str(case_dir), candidate)
    report = "\n".join(f"{k:32s} {s:6s} {e}" for k, s, e, _ in rows)
    assert ok, f"{case_dir.name} parity failed:\n{report}"
    assert all(status == "ok" for _, status, _, _ in rows), report
