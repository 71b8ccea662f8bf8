"""Where a delivered row's bytes came from when they are nowhere near the row (a wrong table base, an index
that overflowed: rows far away): one pass over the table hashing every row, built only when some row's bytes
were not found near it, then (for a few rows) a search of the whole file. A read of the search that fails
is handed to the caller's *failed* and the search goes on without that chunk: a row found nowhere else stays
unnamed.

The row hash is a sum of the row's 8-byte words times fixed odd constants, modulo 2**64: numpy computes it
for a megabyte of rows at a time at memory speed, and two rows with one hash are told apart by their bytes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import numpy as np

from ..evidence.readers import ReadFailed, BufferedReader
from .table import RowTable

__all__ = ["FILE_SEARCHES", "far_sources"]

#: Bytes of the table hashed (or of the file searched) per read.
CHUNK_BYTES = 8 << 20
#: Rows whose bytes are looked for in the whole file (each a pass over it) when the table does not hold them.
FILE_SEARCHES = 8

#: A read of the file for the search: its bytes, or None where it failed (a finding the caller was handed).
_Read = Callable[[int, int], "bytes | None"]


def far_sources(table: RowTable, reference: BufferedReader, wanted: Sequence[tuple[int, bytes]],
                failed: ReadFailed) -> list[tuple[int | None, int] | None]:
    """For each (row, delivered bytes) of *wanted*: (the table row nearest *row* holding the bytes, its
    offset), or (None, the file offset holding them), or None where they are nowhere in the file (or only in
    a chunk whose read failed, handed to *failed*)."""
    def reads(offset: int, length: int) -> bytes | None:
        return reference.read_or_report(offset, length, failed)

    found = _in_table(table, reads, wanted)
    left = [i for i, hit in enumerate(found) if hit is None][:FILE_SEARCHES]
    for i, offset in zip(left, _in_file(table, reads, [wanted[i] for i in left]), strict=True):
        found[i] = None if offset is None else (None, offset)
    return found


def _weights(row_bytes: int) -> np.ndarray:
    rng = np.random.default_rng(0x6767)   # fixed: the hash of a row is the same in every chunk
    halves = rng.integers(1, 1 << 63, size=-(-row_bytes // 8), dtype=np.uint64)
    weights: np.ndarray = halves * np.uint64(2) + np.uint64(1)     # odd: every word changes the hash
    return weights


def _hashes(rows: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """One uint64 per row of *rows* (uint8, shape (n, row_bytes))."""
    n, rb = rows.shape
    pad = -rb % 8
    if pad:
        rows = np.concatenate([rows, np.zeros((n, pad), np.uint8)], axis=1)
    words = np.ascontiguousarray(rows).view("<u8")
    with np.errstate(over="ignore"):
        hashes: np.ndarray = (words * weights).sum(axis=1, dtype=np.uint64)
    return hashes


def _in_table(table: RowTable, reference: _Read,
              wanted: Sequence[tuple[int, bytes]]) -> list[tuple[int | None, int] | None]:
    rb = table.row_bytes
    weights = _weights(rb)
    keys = _hashes(np.frombuffer(b"".join(data for _, data in wanted), np.uint8).reshape(-1, rb), weights)
    found: list[tuple[int | None, int] | None] = [None] * len(wanted)
    for first, rows in _table_chunks(table, reference):
        hashes = _hashes(rows, weights)
        for k in np.flatnonzero(np.isin(keys, hashes)).tolist():
            row, data = wanted[k]
            for hit in (first + int(i) for i in np.flatnonzero(hashes == keys[k])):
                if hit != row and rows[hit - first].tobytes() == data:
                    best = found[k]
                    if best is None or abs(hit - row) < abs((best[0] or 0) - row):
                        found[k] = (hit, table.row_offset(hit))
    return found


def _table_chunks(table: RowTable, reference: _Read) -> Iterator[tuple[int, np.ndarray]]:
    per = max(1, CHUNK_BYTES // table.row_bytes)
    for first in range(0, table.n_rows, per):
        n = min(per, table.n_rows - first)
        data = reference(table.row_offset(first), n * table.row_bytes)
        if data is None:
            continue
        yield first, np.frombuffer(data, np.uint8).reshape(n, table.row_bytes)


def _in_file(table: RowTable, reference: _Read, wanted: Sequence[tuple[int, bytes]]) -> list[int | None]:
    """The first file offset holding each of *wanted*'s bytes, other than its own row's (None: nowhere)."""
    found: list[int | None] = [None] * len(wanted)
    if not wanted:
        return found
    overlap = table.row_bytes - 1
    for lo in range(0, table.file_size, CHUNK_BYTES):
        window = reference(lo, min(CHUNK_BYTES + overlap, table.file_size - lo))
        if window is None:
            continue
        for k, (row, data) in enumerate(wanted):
            pos = window.find(data)
            while found[k] is None and pos >= 0:
                if lo + pos != table.row_offset(row):
                    found[k] = lo + pos
                pos = window.find(data, pos + 1)
        if all(f is not None for f in found):
            break
    return found
