"""Non-finite values in the rows `ggaudit rows` selected.

Every read path can deliver a row's bytes faithfully while the row itself holds a NaN scale: the replay's
byte comparison is then clean, yet an engine gathering that row gets NaN. So the selected rows are read
once more through the reference and tested with the scan's kernel (the float fields of ``blocks.py``,
and the blocks whose finite scales decode past FLT_MAX, as ``scan`` finds them), rows gathered into one
buffer so scattered rows cost one kernel call per megabyte, not one per row. A run of rows whose read fails
is handed to the caller's *failed* and left untested (counted as such); the other rows are tested.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from ..format.blocks import FP8_E4M3_ELEMENTS, layout_of
from ..json_shape import json_key, json_record, to_json
from ..evidence.readers import ReadFailed, BufferedReader
from .table import RowTable
from ..scan.report import Finding
from ..arrays import distinct
from ..scan.kernel import Acc, Options, Plan, scan_units

#: Bytes of rows tested per kernel call (whole rows, at least one): bounds the findings held at once.
CHUNK_BYTES = 1 << 20


@json_record(kw_only=False)
class NonFiniteValue:
    """The first non-finite value of the selected rows (lowest row, then lowest offset)."""

    JSON_DEF: ClassVar[str] = "nonfinite_value"

    kind: str = json_key(values=("nan", "+inf", "-inf"))
    row: int = json_key(minimum=0)
    block: int = json_key(minimum=0)
    column: int = json_key(minimum=0)
    field: str          # the block field (d, dmin, e, ...) or "value" for float elements
    offset: int = json_key(minimum=0)            # absolute file offset of the field or element
    bits: str = json_key(pattern="^0x[0-9a-f]+$")      # its stored bits, 0x-prefixed hex
    #: field (the stored value is non-finite) or overflow (a finite scale that overflows)
    cause: str = json_key(values=("field", "overflow"))

    def to_json(self) -> dict[str, Any]:
        return to_json(self)


@dataclass(frozen=True)
class NonFiniteRows:
    rows: int                       # selected rows holding at least one non-finite value
    first: NonFiniteValue | None
    tested: int = 0                 # rows tested (0: not tested, as for a table of integers)
    untested: int = 0               # rows of a float table not tested: their reads failed


def nonfinite_rows(table: RowTable, reference: BufferedReader, rows: np.ndarray | None,
                   decided: Mapping[int, bytes] | None = None, failed: ReadFailed | None = None,
                   unread: int = 0) -> NonFiniteRows:
    """How many of *rows* (None: the whole table) hold a non-finite value, and the first such value;
    *decided* gives the right bytes of rows whose reference read was found wrong. A read that fails goes to
    *failed* (None: it raises) and its rows are untested, as are *unread* rows the caller could not read."""
    layout = FP8_E4M3_ELEMENTS if table.fp8 else layout_of(table.tensor.ggml_type)
    if layout.is_integer:
        return NonFiniteRows(0, None)
    t = table.tensor
    opts = Options(max_abs=None, limit=1 << 62, fail_fast=False)
    count, first, tested = 0, None, 0
    reads = _RowRuns(reference, failed, unread)
    for chunk, data in _chunks(table, reads, rows):
        tested += int(chunk.size)
        if decided:
            data = _with_decided(table, chunk, data, decided)
        plan = Plan(0, t.name, t.path, 0, len(data), t.n_cols, layout, False)
        acc = Acc()
        scan_units(plan, opts, acc, np.frombuffer(data, dtype=np.uint8), 0)
        if not acc.findings:
            continue
        hit = distinct(np.fromiter((f.row for f in acc.findings), dtype=np.int64))
        count += int(hit.size)
        if first is None:
            first = _located(table, chunk, min(acc.findings, key=lambda f: f.offset))
    return NonFiniteRows(count, first, tested, reads.lost)


class _RowRuns:
    """The reference's reads of runs of rows: None for a run whose read failed (handed to *failed*; *lost*
    counts the rows left untested, from those the caller could not read)."""

    def __init__(self, reference: BufferedReader, failed: ReadFailed | None,
                 lost: int) -> None:
        self.reference, self.failed, self.lost = reference, failed, lost

    def rows(self, table: RowTable, first: int, n: int) -> bytes | None:
        data = self.reference.read_or_report(table.row_offset(first), n * table.row_bytes, self.failed)
        self.lost += n if data is None else 0
        return data


def _chunks(table: RowTable, reads: _RowRuns, rows: np.ndarray | None) -> Iterator[tuple[np.ndarray, bytes]]:
    """(rows, their bytes one after another), ascending, about CHUNK_BYTES at a time; rows whose read
    failed are left out."""
    per = max(1, CHUNK_BYTES // table.row_bytes)
    if rows is None:
        for lo in range(0, table.n_rows, per):
            hi = min(table.n_rows, lo + per)
            data = reads.rows(table, lo, hi - lo)
            if data is not None:
                yield np.arange(lo, hi, dtype=np.int64), data
        return
    ordered = distinct(rows)
    for i in range(0, ordered.size, per):
        runs = [(run, data) for run, data in _runs(table, reads, ordered[i:i + per]) if data is not None]
        if runs:
            yield np.concatenate([run for run, _ in runs]), b"".join(data for _, data in runs)


def _with_decided(table: RowTable, chunk: np.ndarray, data: bytes, decided: Mapping[int, bytes]) -> bytes:
    """*data* (the bytes of *chunk*'s rows, one after another) with the decided rows' right bytes."""
    rb, out = table.row_bytes, None
    for i in np.flatnonzero(np.isin(chunk, np.fromiter(decided, np.int64))).tolist():
        out = out if out is not None else bytearray(data)
        out[i * rb:(i + 1) * rb] = decided[int(chunk[i])]
    return data if out is None else bytes(out)


def _runs(table: RowTable, reads: _RowRuns, rows: np.ndarray) -> Iterator[tuple[np.ndarray, bytes | None]]:
    """Each run of consecutive rows of ascending *rows* and its bytes (None: its read failed), one read a run."""
    breaks = np.flatnonzero(np.diff(rows) != 1) + 1
    for run in np.split(rows, breaks):
        yield run, reads.rows(table, int(run[0]), int(run.size))


def _located(table: RowTable, chunk: np.ndarray, f: Finding) -> NonFiniteValue:
    """A finding in the gathered buffer, put back at its row and file offset."""
    row = int(chunk[f.row])
    offset = table.row_offset(row) + f.offset - f.row * table.row_bytes
    return NonFiniteValue(f.kind, row, f.block, f.column, f.field, offset, f.bits, f.cause)
