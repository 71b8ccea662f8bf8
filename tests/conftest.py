"""Fixtures shared by the readers/rows tests (pytest finds them here; no import needed)."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Iterator

import pytest

from test_rows_support import supports_direct


@pytest.fixture
def ddir(tmp_path: Path) -> Iterator[Path]:
    """tmp_path if O_DIRECT works there, else a temp dir on the disk holding the repo (never tmpfs)."""
    if supports_direct(tmp_path):
        yield tmp_path
        return
    other = Path(tempfile.mkdtemp(dir=Path(__file__).resolve().parents[2]))
    try:
        if not supports_direct(other):
            pytest.skip(f"neither {tmp_path} nor {other} supports O_DIRECT")
        yield other
    finally:
        shutil.rmtree(other)
