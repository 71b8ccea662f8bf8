"""Fault-injection self-test: readers and caches with deliberate engine bugs, each caught and classified.

The expected outcome of every fault is computed here from the file's bytes and the fault's definition
(not from ggaudit.rows.replay' own planning): exact rows, first bad file offset, block, column and raw bytes.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from gguf import GGMLQuantizationType as T
from gguf import quants

from ggaudit.rows import replay as R
from ggaudit.evidence.readers import POISON, Buffer, BufferedReader, Reader, align_down, align_up, open_reader
from ggaudit.rows.findings import MAX_REPORTED
from ggaudit.rows.gather import BufferPool
from ggaudit.rows.table import RowTable
from rows_support import Table, Wrapped, crossing, make_table


class ShortTreatedAsComplete(Wrapped):
    """The read returns its first half (whole alignment units) but the caller is told it all arrived."""

    def read_into(self, view: memoryview, offset: int) -> int:
        a = self.alignment.offset
        cut = len(view) // 2 // a * a
        if cut:
            self.inner.read_into(view[:cut], offset)
            return len(view)
        return self.inner.read_into(view, offset)


class HonestShort(ShortTreatedAsComplete):
    """The same short read, reported truthfully: the gather must call it a short read."""

    def read_into(self, view: memoryview, offset: int) -> int:
        a = self.alignment.offset
        cut = len(view) // 2 // a * a
        return self.inner.read_into(view[:cut] if cut else view, offset)


class SpanSectorShort(Wrapped):
    """For a range that crosses a 4096-byte page, the aligned span ends one sector early."""

    def span(self, offset: int, length: int) -> tuple[int, int]:
        start, n = self.inner.span(offset, length)
        if offset // 4096 != (offset + length - 1) // 4096:
            n -= self.alignment.offset
        return start, n


class ShiftedOffset(Wrapped):
    """Reads from the wrong place: *shift* bytes after where it was asked (a row, or one byte)."""

    def __init__(self, inner: Reader, shift: int) -> None:
        super().__init__(inner)
        self.shift = shift
        self.shifted = BufferedReader(inner.path)

    def read_into(self, view: memoryview, offset: int) -> int:
        self.shifted.read_into(view, offset + self.shift)
        return len(view)

    def close(self) -> None:
        self.shifted.close()
        super().close()


class HandedOutEarly(Wrapped):
    """Returns as soon as the read is issued: the caller copies the buffer before the data lands."""

    def __init__(self, inner: Reader) -> None:
        super().__init__(inner)
        self.issued: list[tuple[int, int]] = []

    def read_into(self, view: memoryview, offset: int) -> int:
        self.issued.append((offset, len(view)))
        return len(view)


class RingOfOneBatch(BufferPool):
    """A fixed ring of buffers handed out in turn, whether or not they came back, sized for one batch's
    reads: prefetching batch k+1 wraps onto the buffers batch k's rows are still being read from."""

    def __init__(self, reader: Reader, size: int, slots: int) -> None:
        super().__init__(reader, size)
        self.ring = [BufferPool.take(self) for _ in range(slots)]
        self.turn = 0

    def take(self) -> Buffer:
        buf = self.ring[self.turn % len(self.ring)]
        self.turn += 1
        return buf

    def give(self, buf: Buffer) -> None:
        pass  # the ring neither grows nor shrinks


def faulty(fault: type, modes: tuple[str, ...] = ("direct",), **kw: object) -> Callable[[str, str], Reader]:
    def factory(path: str, mode: str) -> Reader:
        inner = open_reader(path, mode)
        return fault(inner, **kw) if mode in modes else inner
    return factory


@pytest.fixture
def ple(ddir: Path) -> Table:
    return make_table(ddir, T.IQ4_NL, n_rows=5000, lead=4000)


def isolated_crossing_rows(table: Table, count: int = 8) -> list[int]:
    """Page-crossing rows at least two pages apart, so each gets a read of its own."""
    picked: list[int] = []
    for r in crossing(table):
        if not picked or table.offset(r) - table.offset(picked[-1]) > 3 * 4096:
            picked.append(r)
    return picked[:count]


def first_bad_column(good: bytes, bad: bytes, block_bytes: int = 18) -> int:
    a = quants.dequantize(np.frombuffer(good, np.uint8), T.IQ4_NL).view(np.uint32)
    b = quants.dequantize(np.frombuffer(bad, np.uint8), T.IQ4_NL).view(np.uint32)
    return int(np.flatnonzero(a != b)[0])


def poisoned_from(table: Table, row: int, file_offset: int) -> bytes:
    """The row as a buffer shows it when the bytes from *file_offset* on never arrived."""
    keep = file_offset - table.offset(row)
    return table.row(row)[:keep] + bytes([POISON]) * (table.tensor.row_bytes - keep)


@pytest.mark.parametrize("mode", ["direct", "buffered"])
def test_short_read_treated_as_complete(ple: Table, mode: str) -> None:
    rows = isolated_crossing_rows(ple)
    report = R.check_rows(ple.path, rows, modes=[mode],
                          options=R.RowsOptions(workers=1, reader_factory=faulty(ShortTreatedAsComplete, (mode,))))
    with open_reader(ple.path, mode) as probe:
        a = probe.alignment.offset
    assert not report.short_reads  # the fault hides the short count: only the bytes give it away
    assert {m.row for m in report.mismatches} == set(rows) and report.by_kind == (("short-read", len(rows)),)
    for m in report.mismatches:
        start = align_down(ple.offset(m.row), a)
        span = align_up(ple.offset(m.row) + 90, a) - start
        stop = start + span // 2 // a * a
        assert (m.kind, m.mode, m.stage, m.offset) == ("short-read", mode, "gather", stop)
        assert m.byte == stop - ple.offset(m.row) and m.block == m.byte // 18
        assert m.column == first_bad_column(ple.row(m.row), poisoned_from(ple, m.row, stop))
        assert m.expected == ple.row(m.row)[m.byte:m.byte + 16].hex(" ")
        assert m.actual == " ".join(["a5"] * len(ple.row(m.row)[m.byte:m.byte + 16]))
        assert m.differing == sum(x != POISON for x in ple.row(m.row)[m.byte:])
        assert m.expected_finite is True and m.file == ple.path and m.length == 90


def test_honest_short_read_is_a_finding(ple: Table) -> None:
    rows = isolated_crossing_rows(ple, 3)
    report = R.check_rows(ple.path, rows, modes=["direct"],
                          options=R.RowsOptions(workers=1, reader_factory=faulty(HonestShort)))
    assert [(s.mode, s.stage, s.returned * 2 == s.requested) for s in report.short_reads] == \
        [("direct", "gather", True)] * 3
    a = report.stats[0].alignment
    assert sorted(s.offset for s in report.short_reads) == sorted(align_down(ple.offset(r), a) for r in rows)
    assert not report.ok and report.by_kind == (("short-read", 3),)


def test_span_one_sector_short_for_page_crossing_rows(ple: Table) -> None:
    cross = isolated_crossing_rows(ple, 6)
    inside = [r for r in range(3000, 5000, 150) if r not in crossing(ple)][:6]
    report = R.check_rows(ple.path, cross + inside, modes=["direct", "mmap"],
                          options=R.RowsOptions(workers=1, reader_factory=faulty(SpanSectorShort)))
    a = report.stats[0].alignment
    assert {m.row for m in report.mismatches} == set(cross)
    assert {(m.kind, m.mode) for m in report.mismatches} == {("short-read", "direct")}
    for m in report.mismatches:
        end = ple.offset(m.row) + 90
        assert m.offset == align_up(end, a) - a
        assert m.column == first_bad_column(ple.row(m.row), poisoned_from(ple, m.row, m.offset))
    assert report.mismatch_geometry.page == len(cross) == report.mismatch_geometry.rows


def test_off_by_one_row_offset_is_misplaced_and_names_the_row(ple: Table) -> None:
    rows = [10, 500, 1000, 1001, 4998]
    report = R.check_rows(ple.path, rows, modes=["buffered"],
                          options=R.RowsOptions(reader_factory=faulty(ShiftedOffset, ("buffered",), shift=90)))
    got = {m.row: m for m in report.mismatches}
    assert set(got) == set(rows)
    for r in rows:
        m = got[r]
        assert (m.kind, m.other_row, m.other_offset) == ("misplaced", r + 1, ple.offset(r + 1))
        assert m.detail == f"the bytes of row {r + 1}"
        k = next(i for i in range(90) if ple.row(r)[i] != ple.row(r + 1)[i])
        assert m.byte == k and m.actual == ple.row(r + 1)[k:k + 16].hex(" ")


def test_off_by_one_byte_is_misplaced_at_the_offset(ple: Table) -> None:
    report = R.check_rows(ple.path, [2000], modes=["mmap"],
                          options=R.RowsOptions(reader_factory=faulty(ShiftedOffset, ("mmap",), shift=1)))
    (m,) = report.mismatches
    assert (m.kind, m.other_row, m.other_offset) == ("misplaced", None, ple.offset(2000) + 1)


def test_buffer_handed_out_before_the_read_lands(ple: Table) -> None:
    rows = [*range(100, 140), 3000]
    report = R.check_rows(ple.path, rows, modes=["direct"],
                          options=R.RowsOptions(workers=2, reader_factory=faulty(HandedOutEarly)))
    assert {m.row for m in report.mismatches} == set(rows) and report.by_kind == (("stale", len(rows)),)
    m = next(m for m in report.mismatches if m.row == 3000)
    assert m.byte == 0 and m.offset == ple.offset(3000) and m.actual == " ".join(["a5"] * 16)
    assert "handed out before its read landed" in m.detail


def test_cache_keyed_by_page_gives_cache_crosstalk(ple: Table) -> None:
    rows = list(range(200, 260))

    def by_page(capacity: int, table: RowTable) -> R.RowCache:
        return R.RowCache(capacity, key=lambda row: table.row_offset(row) // 4096)

    report = R.check_rows(ple.path, range(200, 260), modes=["buffered"],
                          options=R.RowsOptions(batch=len(rows), cache_rows=1000, cache_factory=by_page))
    hit = {m.row: m for m in report.mismatches if m.stage == "cache-hit"}
    # The cache holds, for each page, the last row put there: the page's highest row in the batch.
    last_on_page = {}
    for r in rows:
        last_on_page[ple.offset(r) // 4096] = r
    want = {r: last_on_page[ple.offset(r) // 4096] for r in rows if last_on_page[ple.offset(r) // 4096] != r}
    assert {r: m.other_row for r, m in hit.items()} == want
    assert {m.kind for m in report.mismatches} == {"cache-crosstalk"}
    assert all(m.stage != "gather" for m in report.mismatches)  # fresh reads were right; only hits lie


def test_a_correct_stack_has_no_findings_on_the_same_selections(ple: Table) -> None:
    rows = isolated_crossing_rows(ple) + list(range(100, 140)) + list(range(200, 260))
    report = R.check_rows(ple.path, rows, options=R.RowsOptions(workers=2, cache_rows=1000))
    assert report.ok and not report.short_reads


def test_fail_fast_stops_at_the_first_mismatch(ple: Table) -> None:
    report = R.check_rows(ple.path, range(10, 20), modes=["buffered", "direct"],
                          options=R.RowsOptions(batch=1, fail_fast=True,
                                                reader_factory=faulty(ShiftedOffset, ("buffered",), shift=90)))
    assert report.mismatch_count == 1 and [s.mode for s in report.stats] == ["buffered"]


def test_sweep_catches_a_short_read_too(ple: Table) -> None:
    report = R.check_rows(ple.path, modes=["direct"], select=R.RowSelection(all_rows=True),
                          options=R.RowsOptions(reader_factory=faulty(ShortTreatedAsComplete)))
    a = report.stats[0].alignment
    start = align_down(ple.offset(0), a)
    stop = start + (align_up(ple.offset(5000), a) - start) // 2 // a * a  # one read covers the whole table
    first_bad = (stop - ple.offset(0)) // 90
    assert report.mismatch_count == 5000 - first_bad
    # The first MAX_REPORTED are classified; the rest only counted.
    assert report.by_kind == (("short-read", MAX_REPORTED), ("unclassified", 5000 - first_bad - MAX_REPORTED))
    first = min(report.mismatches, key=lambda m: m.offset)
    assert (first.row, first.offset, first.stage) == (first_bad, stop, "sweep")
    assert report.mismatch_geometry.rows == 5000 - first_bad


def test_sweep_catches_a_buffer_handed_out_before_the_read_lands(ple: Table) -> None:
    report = R.check_rows(ple.path, modes=["direct"], select=R.RowSelection(all_rows=True),
                          options=R.RowsOptions(reader_factory=faulty(HandedOutEarly)))
    assert report.mismatch_count == 5000 and not report.short_reads
    assert report.by_kind == (("stale", MAX_REPORTED), ("unclassified", 5000 - MAX_REPORTED))
    first = min(report.mismatches, key=lambda m: m.offset)
    k = next(i for i, x in enumerate(ple.row(0)) if x != POISON)
    assert (first.row, first.byte, first.offset, first.stage) == (0, k, ple.offset(0) + k, "sweep")
    assert first.actual == " ".join(["a5"] * 16) and "handed out before its read landed" in first.detail


@pytest.mark.parametrize("mode", ["buffered", "mmap", "direct"])
def test_prefetch_into_buffers_still_held_is_misplaced_and_names_the_row(ple: Table, mode: str) -> None:
    # One read per row (rows far apart), three per batch, into a ring of three buffers: batch 1's i-th read
    # lands in the buffer batch 0's i-th row is still a view into. Rows 2048 apart lie 2048 * 90 =
    # 45 * 4096 bytes apart, at the same place within their aligned spans, so on every path row first[i]
    # then shows exactly row second[i]; 184 KB away, only the prefetched batch can name it.
    first, second = [100, 900, 1700], [2148, 2948, 3748]
    report = R.check_rows(ple.path, first + second, modes=[mode],
                          options=R.RowsOptions(workers=1, batch=3, prefetch=True,
                                                pool_factory=lambda reader, size: RingOfOneBatch(reader, size, 3)))
    assert [(s.stage, s.reads, s.rows) for s in report.stats] == [("gather", 6, 6), ("prefetch", 6, 6)]
    assert all((ple.offset(o) - ple.offset(r)) % report.stats[0].alignment == 0
               for r, o in zip(first, second, strict=True))
    # The copying gather is immune (each row leaves its buffer before the next take); the last batch is
    # consumed with nothing prefetched behind it, so it is clean too.
    assert report.by_kind == (("misplaced", 3),) and not report.short_reads
    got = {m.row: m for m in report.mismatches}
    assert {r: (m.stage, m.other_row, m.other_offset) for r, m in got.items()} == \
        {r: ("prefetch", o, ple.offset(o)) for r, o in zip(first, second, strict=True)}
    for r, o in zip(first, second, strict=True):
        m, want, held = got[r], ple.row(r), ple.row(o)
        k = next(i for i in range(90) if want[i] != held[i])
        assert (m.kind, m.mode, m.byte, m.offset, m.block) == ("misplaced", mode, k, ple.offset(r) + k, k // 18)
        assert m.column == first_bad_column(want, held) and m.detail == f"the bytes of row {o}"
        assert (m.expected, m.actual) == (want[k:k + 16].hex(" "), held[k:k + 16].hex(" "))
        assert m.differing == sum(a != b for a, b in zip(want, held, strict=True))
        assert m.expected_finite is True and m.actual_finite is True and m.length == 90
