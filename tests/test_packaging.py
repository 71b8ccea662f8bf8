"""The packaging lane's inputs, checked statically. The lane itself (scripts/packaging_lane.sh: build the sdist and
the wheel, install the wheel in a fresh venv, run the quick start from it) is too slow for the suite and runs in CI;
these tests keep what it relies on true: every data file of the package is named by pyproject.toml's package-data,
so a file added later ships, and CI runs the lane."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from support import REPO

LANE = REPO / "scripts" / "packaging_lane.sh"


def _pyproject() -> dict[str, Any]:
    tomllib = pytest.importorskip("tomllib", reason="tomllib is in the standard library from Python 3.11")
    with open(REPO / "pyproject.toml", "rb") as f:
        return tomllib.load(f)


def _data_files(package: Path) -> set[Path]:
    """The files of a package folder that are not Python modules (nor their bytecode)."""
    return {p for p in package.rglob("*")
            if p.is_file() and p.suffix not in {".py", ".pyc"} and "__pycache__" not in p.parts}


def test_every_data_file_of_the_package_is_named_by_its_package_data() -> None:
    package_data: dict[str, list[str]] = _pyproject()["tool"]["setuptools"]["package-data"]
    shipped = {p for name, globs in package_data.items() for glob in globs
               for p in (REPO / name.replace(".", "/")).glob(glob)}
    data = _data_files(REPO / "ggaudit")
    names = {p.relative_to(REPO / "ggaudit").as_posix() for p in data}
    assert {"py.typed", "schema/cli-output.schema.json"} <= names          # what the walk must find today
    assert sorted(p.relative_to(REPO).as_posix() for p in data - shipped) == []
    stale = [(name, glob) for name, globs in package_data.items() for glob in globs
             if not any((REPO / name.replace(".", "/")).glob(glob))]
    assert stale == []                                                      # a glob that matches nothing


def test_ci_runs_the_packaging_lane_on_the_readmes_quick_start() -> None:
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    assert "scripts/packaging_lane.sh" in ci
    assert LANE.is_file() and os.access(LANE, os.X_OK)
    lane = LANE.read_text(encoding="utf-8")
    # The lane finds the quick start by its heading and runs its ```console block: both must still be there.
    assert r'split("\n## Quick start\n", 1)' in lane
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    quick_start = readme.split("\n## Quick start\n", 1)[1].split("\n## ", 1)[0]
    assert "```console\n$ ggaudit scan fixtures/all_types.gguf\n" in quick_start
