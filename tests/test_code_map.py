"""docs/code-map.md against the tree as it is when the tests run: every folder of ggaudit/ has its row,
every module its name in its folder's row, and every folder and file the map names exists."""

from __future__ import annotations

import re
from pathlib import Path

from support import REPO

CODE_MAP = REPO / "docs" / "code-map.md"
PACKAGE = REPO / "ggaudit"
#: A row of the map's table: the folder, then what it owns.
ROW = re.compile(r"^\| `(ggaudit/[\w/]*)` \| (.+) \|$", re.MULTILINE)
#: A name in a row that is a file or a folder of the row's folder.
NAME = re.compile(r"`([\w.-]+\.(?:py|json)|[\w-]+/)`")
LISTED_SUFFIXES = (".py", ".json")      # what a module or shipped data file is; __init__.py is its folder


def _rows() -> dict[Path, set[str]]:
    rows: dict[Path, set[str]] = {}
    for folder, owns in ROW.findall(CODE_MAP.read_text(encoding="utf-8")):
        assert REPO / folder not in rows, f"two rows for {folder}"
        rows[REPO / folder] = set(NAME.findall(owns))
    return rows


def _folders() -> list[Path]:
    """The folders of the package that hold code or data, the package itself included."""
    found = [PACKAGE, *(p for p in PACKAGE.rglob("*") if p.is_dir() and p.name != "__pycache__")]
    return sorted(f for f in found if any(c.suffix in LISTED_SUFFIXES for c in f.iterdir()))


def _modules(folder: Path) -> set[str]:
    return {p.name for p in folder.iterdir()
            if p.suffix in LISTED_SUFFIXES and not (p.name == "__init__.py" and folder != PACKAGE)}


def test_every_folder_of_the_package_has_a_row() -> None:
    assert [f.relative_to(REPO).as_posix() for f in _folders() if f not in _rows()] == []


def test_every_module_is_named_in_its_folders_row() -> None:
    rows = _rows()
    unlisted = {f.relative_to(REPO).as_posix(): sorted(_modules(f) - rows[f]) for f in _folders() if f in rows}
    assert {folder: names for folder, names in unlisted.items() if names} == {}


def test_every_folder_and_name_the_map_gives_exists() -> None:
    missing = [(folder.relative_to(REPO).as_posix(), name) for folder, names in _rows().items()
               for name in sorted(names) if not (folder / name).exists()]
    assert [folder.relative_to(REPO).as_posix() for folder in _rows() if not folder.is_dir()] == []
    assert missing == []


def test_the_map_has_a_row_per_layer_and_reads_its_names() -> None:
    """The parse itself: the rows the house has, and names that are paths, not words in backquotes."""
    rows = _rows()
    assert {f.relative_to(PACKAGE).as_posix() for f in rows} >= {
        ".", "format", "stores", "evidence", "scan", "verify", "rows", "fleet", "cli", "cli/reporters", "schema"}
    assert {"readers.py", "read_pass.py"} <= rows[PACKAGE / "evidence"] and "replay.py" in rows[PACKAGE / "rows"]
    assert "`--format`" not in rows[PACKAGE / "cli"]
