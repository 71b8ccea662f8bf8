"""llama.cpp's loader as the ground truth of ggaudit's metadata checks: every crafted file of tests/loader_cases.py
through the loader (scripts/loader_lane/load.c, built by scripts/loader_lane.sh, given as GGAUDIT_LOADER) and
through ``check_metadata``. A file the loader refuses (or whose first decode fails) has at least one metadata
error; a file it loads and decodes has none (warnings allowed). Skipped unless GGAUDIT_LOADER is set.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from ggaudit.format.consistency import check_metadata
from ggaudit.format.layout import open_model

from loader_cases import Case, cases

LOADER = os.environ.get("GGAUDIT_LOADER")
CASES = list(cases())
_AGREED: list[str] = []

pytestmark = pytest.mark.skipif(not LOADER, reason="GGAUDIT_LOADER not set: run scripts/loader_lane.sh")


def _loader(path: Path) -> tuple[bool, str]:
    """(whether llama.cpp loads the file and decodes a token, the loader's reason lines)."""
    assert LOADER is not None
    run = subprocess.run([LOADER, str(path), "--decode"], capture_output=True, text=True, timeout=60)
    reason = " | ".join(line for line in run.stdout.splitlines() if not line.startswith("stage:"))
    return run.returncode == 0, reason


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_ggaudit_agrees_with_the_loader(case: Case, tmp_path: Path) -> None:
    path = case.build(tmp_path)
    loads, reason = _loader(path)
    errors = [f for f in check_metadata(open_model(path)) if f.severity == "error"]
    said = "; ".join(f"{f.key} = {f.value!r}: {f.actual}" for f in errors) or "no metadata error"
    print(f"{case.id}: loader {'loads' if loads else 'refuses'} ({reason}); ggaudit: {said}")
    assert loads == (not errors), f"{case.id}: loader: {reason}; ggaudit: {said}"
    _AGREED.append(case.id)


def test_summary() -> None:
    print(f"\n{len(CASES)} crafted files, {len(_AGREED)} agree")
    assert len(_AGREED) == len(CASES)
