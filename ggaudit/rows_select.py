"""What `ggaudit rows` checks: the selected row IDs (--ids, --ids-file, --random, --page-crossing, --all)
and an engine's capture of gathered rows (--against), validated before any read path runs."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterable, Iterator

import numpy as np

from .errors import UsageError
from .readers import PAGE

if TYPE_CHECKING:
    from .rows import RowTable

#: Selections larger than this must use --all (which streams) rather than a list of IDs.
MAX_SELECTED = 1 << 24


# --- row selection -------------------------------------------------------------------------------

def parse_ids(text: str, n_rows: int, source: str = "--ids") -> list[int]:
    """Row IDs from "4162,4170-4200" (commas or whitespace; '#' starts a comment in files)."""
    ids: list[int] = []
    lines = text.splitlines() or [""]
    for lineno, line in enumerate(lines, 1):
        for token in line.split("#", 1)[0].replace(",", " ").split():
            ids.extend(_expand(token, n_rows, f"{source} line {lineno}" if len(lines) > 1 else source))
            if len(ids) > MAX_SELECTED:
                raise UsageError(source, f"more than {MAX_SELECTED} row IDs; use --all to sweep the table")
    return ids


def _expand(token: str, n_rows: int, where: str) -> range:
    lo_text, dash, hi_text = token.partition("-")
    try:
        lo = int(lo_text)
        hi = int(hi_text) if dash else lo
    except ValueError:
        raise UsageError(where, f"{token!r} is not a row ID or a range like 4170-4200") from None
    if lo < 0 or hi < lo:
        raise UsageError(where, f"{token!r} is not a valid range of row IDs")
    if hi >= n_rows:
        raise UsageError(where, f"row {hi} is outside the table (rows 0..{n_rows - 1})")
    if hi - lo >= MAX_SELECTED:
        raise UsageError(where, f"{token!r} selects more than {MAX_SELECTED} rows; use --all")
    return range(lo, hi + 1)


def crosses(offset: int, length: int, boundary: int) -> bool:
    return offset // boundary != (offset + length - 1) // boundary


def crossing_mask(offsets: np.ndarray, length: int, boundary: int) -> np.ndarray:
    return offsets // boundary != (offsets + (length - 1)) // boundary


def row_chunks(n_rows: int, size: int = 1 << 20) -> Iterator[np.ndarray]:
    for start in range(0, n_rows, size):
        yield np.arange(start, min(n_rows, start + size), dtype=np.int64)


def crossing_rows(table: RowTable, boundary: int = PAGE) -> np.ndarray:
    """Every row of the table that straddles a multiple of *boundary* (in absolute file offsets)."""
    found: list[np.ndarray] = []
    total = 0
    for rows in row_chunks(table.n_rows):
        hit = rows[crossing_mask(table.tensor.offset + rows * table.row_bytes, table.row_bytes, boundary)]
        total += hit.size
        if total > MAX_SELECTED:
            raise UsageError(table.path, f"more than {MAX_SELECTED} rows cross a page; use --all",
                             field=table.name)
        found.append(hit)
    return np.concatenate(found) if found else np.zeros(0, dtype=np.int64)


@dataclass(frozen=True)
class Selection:
    """The rows to replay (None for --all: the whole table, streamed) and how they were chosen."""

    rows: tuple[int, ...] | None
    description: str
    seed: int | None = None


def select_rows(table: RowTable, *, ids: str | None = None, ids_file: str | None = None, all_rows: bool = False,
                random: int | None = None, seed: int | None = None, page_crossing: bool = False,
                extra: Iterable[int] = ()) -> Selection:
    """Combine the selectors (union, first appearance order); --all excludes the others."""
    chosen = [s for s, on in (("--ids", ids is not None), ("--ids-file", ids_file is not None),
                              ("--random", random is not None), ("--page-crossing", page_crossing)) if on]
    if all_rows:
        if chosen:
            raise UsageError(None, f"--all sweeps the whole table; drop {', '.join(chosen)}")
        return Selection(None, f"all {table.n_rows} rows")
    picked: list[int] = list(extra)
    parts = []
    if ids is not None:
        picked += parse_ids(ids, table.n_rows)
        parts.append(f"--ids {ids if len(ids) <= 60 else ids[:57] + '...'}")
    if ids_file is not None:
        picked += parse_ids(_read_ids_file(ids_file), table.n_rows, ids_file)
        parts.append(f"--ids-file {ids_file}")
    if random is not None:
        seed, sample = _random_rows(table, random, seed)
        picked += sample
        parts.append(f"--random {random} --seed {seed}")
    if page_crossing:
        picked += crossing_rows(table).tolist()
        parts.append("--page-crossing")
    if not picked and not parts:
        raise UsageError(None, "choose rows: --ids, --ids-file, --random N, --page-crossing or --all")
    rows = tuple(dict.fromkeys(picked))
    if len(rows) > MAX_SELECTED:
        raise UsageError(None, f"{len(rows)} rows selected, more than {MAX_SELECTED}; use --all to sweep the table")
    return Selection(rows, " + ".join(parts) or "capture IDs", seed)


def _read_ids_file(path: str) -> str:
    try:
        if os.path.getsize(path) > 64 << 20:
            raise UsageError(path, "ID file is larger than 64 MiB; use --all or ranges")
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError as err:
        raise UsageError(path, f"cannot read ID file: {err.strerror}") from None
    except UnicodeDecodeError as err:
        raise UsageError(path, "ID file is not text", offset=err.start) from None


def _random_rows(table: RowTable, n: int, seed: int | None) -> tuple[int, list[int]]:
    if n < 1 or n > min(table.n_rows, MAX_SELECTED):
        raise UsageError(None, f"--random {n}: choose 1..{min(table.n_rows, MAX_SELECTED)} rows")
    if seed is None:
        seed = int.from_bytes(os.urandom(4), "little")
    rng = np.random.default_rng(seed)
    return seed, rng.choice(table.n_rows, size=n, replace=False).tolist()


# --- engine captures -----------------------------------------------------------------------------

@dataclass(frozen=True)
class Capture:
    path: str
    ids: np.ndarray
    data: np.ndarray
    kind: str  # raw | decoded


def load_capture(path: str, table: RowTable) -> Capture:
    """An engine's gathered rows: .npz with `ids` and one data array, or a structured .npy (ids, rows)."""
    try:
        loaded = np.load(path, allow_pickle=False, mmap_mode="r" if path.endswith(".npy") else None)
    except (OSError, ValueError, EOFError) as err:
        raise UsageError(path, f"cannot load the capture: {err}") from None
    ids, data = _capture_arrays(path, loaded)
    return _check_capture(path, table, ids, data)


def _capture_arrays(path: str, loaded: Any) -> tuple[np.ndarray, np.ndarray]:
    if isinstance(loaded, np.ndarray):
        names = loaded.dtype.names or ()
        if "ids" not in names or len(names) != 2:
            raise UsageError(path, "a .npy capture must be a structured array with fields `ids` and the rows",
                             field="dtype")
        return loaded["ids"], loaded[[n for n in names if n != "ids"][0]]
    with loaded:
        keys = list(loaded.keys())
        others = [k for k in keys if k != "ids"]
        if "ids" not in keys or len(others) != 1:
            raise UsageError(path, f"a .npz capture needs `ids` and exactly one rows array (found {keys})",
                             field="arrays")
        return loaded["ids"], loaded[others[0]]


def _check_capture(path: str, table: RowTable, ids: np.ndarray, data: np.ndarray) -> Capture:
    if ids.ndim != 1 or ids.dtype.kind not in "iu":
        raise UsageError(path, f"ids must be a 1-D integer array, not {ids.dtype}{list(ids.shape)}", field="ids")
    if len(ids) and (int(ids.min()) < 0 or int(ids.max()) >= table.n_rows):
        raise UsageError(path, f"ids must lie in 0..{table.n_rows - 1}", field="ids")
    n = len(ids)
    if data.dtype == np.uint8 and data.shape == (n, table.row_bytes):
        return Capture(path, ids.astype(np.int64), data, "raw")
    if data.dtype in (np.float16, np.float32) and data.shape == (n, table.tensor.n_cols):
        return Capture(path, ids.astype(np.int64), data, "decoded")
    raise UsageError(path, f"rows are {data.dtype}{list(data.shape)}; expected uint8[{n}, {table.row_bytes}] "
                           f"(raw) or float16/float32[{n}, {table.tensor.n_cols}] (decoded)", field="rows")
