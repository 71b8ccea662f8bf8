"""`rows --all` reads the table once per path (issue 37): the reference (buffered) read of each chunk is made by
the first path's sweep only, a later path's chunk is set against that first read, and the reference is read again
only for a chunk a later path delivered otherwise, which is then compared byte for byte and classified as before.

The table is 40000 Q8_0 rows of 170 bytes (6.8 MB), several chunks of the sweep.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from gguf import GGMLQuantizationType as T

from ggaudit.evidence.readers import BufferedReader, Reader, open_reader
from ggaudit.rows import replay as R
from rows_support import Table, Wrapped, make_table

N_ROWS, ROW_BYTES = 40000, 170
FLIPPED_ROW, FLIPPED_BYTE, MASK = 31000, 40, 0x10


@pytest.fixture
def table(ddir: Path) -> Table:
    made = make_table(ddir, T.Q8_0, 160, N_ROWS)
    assert made.tensor.row_bytes == ROW_BYTES
    return made


@pytest.fixture
def reference_reads(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    """Every (offset, length) the reference reads with read_exact_into, the call the sweep reads it with."""
    made: list[tuple[int, int]] = []
    inner = BufferedReader.read_exact_into

    def recorded(self: BufferedReader, view: memoryview, offset: int) -> None:
        made.append((offset, len(view)))
        inner(self, view, offset)

    monkeypatch.setattr(BufferedReader, "read_exact_into", recorded)
    return made


class FlipsOneByte(Wrapped):
    """Delivers every read right but for one bit of one byte of the file."""

    def __init__(self, inner: Reader, at: int) -> None:
        super().__init__(inner)
        self.at = at

    def read_into(self, view: memoryview, offset: int) -> int:
        got = self.inner.read_into(view, offset)
        if offset <= self.at < offset + got:
            view[self.at - offset] ^= MASK
        return got


def covered_once(reads: list[tuple[int, int]], start: int, end: int) -> bool:
    """Whether *reads*, in order of offset, cover [start, end) exactly once: no gap, no overlap."""
    at = start
    for offset, length in sorted(reads):
        if offset != at:
            return False
        at += length
    return at == end


def test_a_sweep_of_every_path_reads_the_reference_once(table: Table,
                                                        reference_reads: list[tuple[int, int]]) -> None:
    report = R.check_rows(table.path, select=R.RowSelection(all_rows=True), options=R.RowsOptions(workers=2))
    assert (report.ok, report.mismatch_count, report.unstable_count) == (True, 0, 0)
    assert [(s.mode, s.stage, s.rows, s.bytes >= N_ROWS * ROW_BYTES) for s in report.stats] == [
        (mode, "sweep", N_ROWS, True) for mode in ("buffered", "mmap", "direct")]
    assert len(reference_reads) > 1          # several chunks: the later paths had chunks to read again
    assert covered_once(reference_reads, table.offset(0), table.offset(N_ROWS))


def test_a_later_path_that_differs_is_compared_with_the_reference_read_again(
        table: Table, reference_reads: list[tuple[int, int]]) -> None:
    flip = table.offset(FLIPPED_ROW) + FLIPPED_BYTE

    def factory(path: str, mode: str) -> Reader:
        inner = open_reader(path, mode)
        return FlipsOneByte(inner, flip) if mode == "mmap" else inner

    report = R.check_rows(table.path, modes=("buffered", "mmap"), select=R.RowSelection(all_rows=True),
                          options=R.RowsOptions(workers=2, reader_factory=factory))
    [m] = report.mismatches
    good = table.row(FLIPPED_ROW)[FLIPPED_BYTE]
    assert (m.mode, m.stage, m.row, m.offset, m.byte) == ("mmap", "sweep", FLIPPED_ROW, flip, FLIPPED_BYTE)
    assert (m.expected.split()[0], m.actual.split()[0]) == (f"{good:02x}", f"{good ^ MASK:02x}")
    assert (report.mismatch_count, report.unstable_count) == (1, 0)
    # The table once (the buffered sweep), then the one chunk holding the flipped byte again (the mmap sweep's).
    first_pass = reference_reads[:-1]
    assert covered_once(first_pass, table.offset(0), table.offset(N_ROWS))
    again_at, again_length = reference_reads[-1]
    assert again_at <= flip < again_at + again_length
    assert (again_at, again_length) in first_pass
