"""`ggaudit rows` library: selection, geometry, gather, cache and sweep on real GGUF files and real reads."""

from __future__ import annotations

import itertools
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from gguf import GGMLQuantizationType as T

from fake_kernel32 import FakeKernel32
from ggaudit.rows import replay as R
from ggaudit.errors import ReadError, UsageError
from ggaudit.format.layout import open_model
from ggaudit.evidence.readers import (POISON, BufferedReader, DirectIOUnavailable, Reader, WindowsDirectReader,
                                      open_reader)
from ggaudit.rows.classify import locate
from ggaudit.rows.gather import WAVE_BYTES, Gatherer, Sample, plan_reads
from ggaudit.rows.select import crossing_mask, sample_rows
from rows_support import PLE, Table, crossing, make_table


@pytest.fixture(params=[(T.IQ4_NL, 90), (T.Q8_0, 170)], ids=["IQ4_NL", "Q8_0"])
def ple(request: pytest.FixtureRequest, ddir: Path) -> Table:
    ggml_type, row_bytes = request.param
    table = make_table(ddir, ggml_type, n_rows=5000, lead=4000)
    assert table.tensor.row_bytes == row_bytes
    return table


def test_all_paths_agree_for_all(ple) -> None:
    report = R.check_rows(ple.path, select=R.RowSelection(all_rows=True), options=R.RowsOptions(workers=2))
    assert report.ok and report.rows_checked == 5000 and report.mismatch_count == 0
    assert [s.mode for s in report.stats] == ["buffered", "mmap", "direct"]
    assert all(s.stage == "sweep" and s.rows == 5000 for s in report.stats)
    assert report.stats[2].alignment_source in ("statx", "fallback")
    assert report.geometry.page == len(crossing(ple))
    assert report.geometry.window_64k == len(crossing(ple, 65536))


def test_all_paths_agree_for_page_crossing_rows_with_the_cache_on(ple) -> None:
    report = R.check_rows(ple.path, select=R.RowSelection(page_crossing=True),
                          options=R.RowsOptions(workers=3, batch=40, cache_rows=16))
    want = crossing(ple)
    assert report.ok, report.mismatches[:1]
    assert report.rows_checked == len(want) > 50
    assert report.geometry == R.Geometry(len(want), len(want), len(want), len(crossing(ple, 65536)))
    for s in report.stats:
        # A buffer per read in flight or queued (2 per worker, and 2), reused batch after batch.
        assert s.cache_hits > 0 and s.cache_evictions > 0 and s.buffers <= 8


def test_tensor_defaults_to_the_ple_table_then_token_embd(ddir: Path) -> None:
    from ggaudit.format.build import TensorSpec, write_gguf
    from rows_support import table_bytes
    both = ddir / "both.gguf"
    write_gguf(both, [TensorSpec("token_embd.weight", T.Q8_0, (64, 10), table_bytes(T.Q8_0, 64, 10)),
                      TensorSpec(PLE, T.IQ4_NL, (160, 10), table_bytes(T.IQ4_NL, 160, 10))])
    assert R.check_rows(str(both), [1], modes=["buffered"]).tensor == PLE
    only = ddir / "only.gguf"
    write_gguf(only, [TensorSpec("token_embd.weight", T.Q8_0, (64, 10), table_bytes(T.Q8_0, 64, 10))])
    assert R.check_rows(str(only), [1], modes=["buffered"]).tensor == "token_embd.weight"
    none = ddir / "none.gguf"
    write_gguf(none, [TensorSpec("output.weight", T.Q8_0, (64, 10), table_bytes(T.Q8_0, 64, 10))])
    with pytest.raises(UsageError, match=r"; name the table to replay$"):
        R.check_rows(str(none), [1])
    assert R.check_rows(str(none), [1], tensor="output.weight", modes=["mmap"]).ok


def test_selection_rules(ple) -> None:
    table = R.RowTable(ple.tensor, Path(ple.path).stat().st_size)
    sel = R.select_rows(table, [4162, 7, 4170, 4171, 4172])
    assert sel.rows.tolist() == [4162, 7, 4170, 4171, 4172] and sel.description == "rows 4162,7,4170-4172"
    a = R.select_rows(table, select=R.RowSelection(random=50, seed=9))
    again = R.select_rows(table, select=R.RowSelection(random=50, seed=9))
    assert a.rows.tolist() == again.rows.tolist() and len(set(a.rows.tolist())) == 50 and a.seed == 9
    assert a.description == "random 50 seed 9"
    assert all(0 <= r < 5000 for r in a.rows)
    assert R.select_rows(table, select=R.RowSelection(random=5)).seed is not None
    both = R.select_rows(table, range(3), R.RowSelection(random=5, seed=1, page_crossing=True))
    assert both.description == "rows 0-2 + random 5 seed 1 + page-crossing"
    five = R.select_rows(table, select=R.RowSelection(random=5, seed=1)).rows.tolist()
    got = both.rows.tolist()
    assert got[:3] == [0, 1, 2] and len(got) == len(set(got))     # each once, in the order first chosen
    assert set(got) == {0, 1, 2} | set(five) | set(crossing(ple))
    swept = R.select_rows(table, select=R.RowSelection(all_rows=True))
    assert (swept.rows, swept.description) == (None, "all 5000 rows")
    for args, message in (
            (([1], R.RowSelection(all_rows=True)), "all_rows: sweeps the whole table; drop rows"),
            ((), "rows: none given and none selected: pass row IDs, or select=RowSelection(all_rows=True), "
                 "RowSelection(random=N) or RowSelection(page_crossing=True)"),
            ((None, R.RowSelection(random=5001)), "random: choose 1..5000 rows, not 5001"),
            (([],), "rows [] selected no rows; nothing was checked"),
            (([], "random"), "select: must be a RowSelection or None, not str")):
        with pytest.raises(UsageError) as err:
            R.select_rows(table, *args)
        assert str(err.value) == message


def test_selections_are_described_by_their_runs_cut_to_60_characters(ple) -> None:
    table = R.RowTable(ple.tensor, Path(ple.path).stat().st_size)
    assert R.select_rows(table, range(5000)).description == "rows 0-4999"
    assert R.select_rows(table, [9, 3, 4, 5, 1]).description == "rows 9,3-5,1"
    many = R.select_rows(table, range(0, 5000, 2)).description
    assert many == "rows " + ",".join(map(str, range(0, 5000, 2)))[:57] + "..."
    assert R.select_rows(table, [1000 + i for i in range(14)] + [3]).description == "rows 1000-1013,3"


def test_geometry_counts_match_brute_force(ple) -> None:
    ids = [0, 1, 44, 45, 46, 700, 728, 729, 4999]
    report = R.check_rows(ple.path, ids, modes=["buffered"])
    cross = {name: set(crossing(ple, b)) for name, b in (("page", 4096), ("sector", 512), ("64k", 65536))}
    assert report.geometry == R.Geometry(len(ids), *(len(cross[n] & set(ids)) for n in ("page", "sector", "64k")))


def test_reads_are_sorted_and_deduplicated_per_page(ple) -> None:
    table = R.RowTable(ple.tensor, Path(ple.path).stat().st_size)
    rb = table.row_bytes
    same_page = [r for r in range(200) if table.row_offset(r) // 4096 == table.row_offset(100) // 4096
                 and (table.row_offset(r) + rb - 1) // 4096 == table.row_offset(100) // 4096]
    with open_reader(ple.path, "direct") as reader:
        a = reader.alignment.offset
        plan = plan_reads(table.tensor.offset, rb, sorted({same_page[-1], 3000, same_page[0], 1500}), a, 1 << 20)
        spans = [reader.span(p.first, p.end - p.first) for p in plan]
    assert [(p.i, p.j) for p in plan] == [(0, 2), (2, 3), (3, 4)]
    assert [(p.first, p.end) for p in plan] == [(table.row_offset(same_page[0]), table.row_offset(same_page[-1]) + rb),
                                                (table.row_offset(1500), table.row_offset(1500) + rb),
                                                (table.row_offset(3000), table.row_offset(3000) + rb)]
    for start, length in spans:
        assert start % a == 0 and length % a == 0


def test_reads_stay_within_max_read() -> None:
    """A run of adjacent rows is split into reads whose aligned span never exceeds the limit."""
    a, rb, limit = 512, 90, 2048
    plan = plan_reads(1000, rb, list(range(100)), a, limit)
    assert [(p.i, p.j) for p in plan][:2] == [(0, 17), (17, 34)]  # spans [512, 2560) and [2048, 4096)
    assert plan[-1].j == 100 and all(p.i == q.j for q, p in itertools.pairwise(plan))
    for p in plan:
        assert -(-p.end // a) * a - p.first // a * a <= limit
        assert p.end - p.first == (p.j - p.i) * rb


def test_cache_miss_then_hit_counts(ple) -> None:
    n = 20
    report = R.check_rows(ple.path, range(100, 100 + n), modes=["buffered"],
                          options=R.RowsOptions(batch=n, cache_rows=1000))
    s = report.stats[0]
    # main cache: n misses then n hits; pressure cache (n/2 rows): n misses forwards, then the n/2 it still
    # holds hit backwards and the other n/2 miss.
    assert (s.cache_hits, s.cache_misses, s.cache_evictions) == (n + n // 2, n + n + n // 2, n // 2 + n // 2)
    assert report.ok


@pytest.mark.parametrize("mode", ["direct", "buffered"])
def test_gather_with_many_workers_reuses_a_bounded_pool(ple, mode: str) -> None:
    table = R.RowTable(ple.tensor, Path(ple.path).stat().st_size)
    with open_reader(ple.path, mode) as reader:
        g = Gatherer(reader, table.tensor.offset, table.row_bytes, workers=4, max_read=4096)
        try:
            rows = list(range(0, 5000, 97))  # no two share a page: 52 reads
            samples = g.gather(rows)
            assert [s.row for s in samples] == rows  # row order, whichever thread read each one
            samples += g.gather(rows[::-1])
        finally:
            g.close()
    assert sorted(s.row for s in samples) == sorted(rows * 2)
    assert all(s.data == ple.row(s.row) for s in samples)
    assert g.reads == 2 * len(rows)
    assert g.pool.created == len(rows)  # a buffer per read of a wave (the whole batch here), all reused


@pytest.mark.parametrize("workers", [1, 3])
def test_a_failed_read_is_raised_after_its_wave_lands_with_every_buffer_back(ple, workers: int) -> None:
    rb, rows = ple.tensor.row_bytes, list(range(0, 5000, 97))
    with open_reader(ple.path, "direct") as reader:
        bad = reader.span(ple.tensor.offset + 970 * rb, rb)[0]
        real = reader.read_into

        def read_into(view: memoryview, offset: int) -> int:
            if offset == bad:
                raise ReadError(reader.path, "injected failure", offset=offset)
            return real(view, offset)

        g = Gatherer(reader, ple.tensor.offset, rb, workers=workers)
        try:
            reader.read_into = read_into  # type: ignore[method-assign]
            with pytest.raises(ReadError, match="injected failure") as err:
                g.gather(rows)
            assert err.value.offset == bad
            assert len(g.pool.free) == g.pool.created == len(rows)  # none left out with a worker
            reader.read_into = real  # type: ignore[method-assign]
            assert [s.data for s in g.gather(rows)] == [ple.row(r) for r in rows]
        finally:
            g.close()


def test_gather_holds_at_most_a_wave_of_buffers(ple) -> None:
    """Large reads make small waves: the pool stays within WAVE_BYTES however long the batch."""
    with open_reader(ple.path, "buffered") as reader:
        g = Gatherer(reader, ple.tensor.offset, ple.tensor.row_bytes, workers=2, max_read=1 << 20)
        try:
            rows = list(range(0, 5000, 97))  # no two share a page: 52 reads
            assert all(s.data == ple.row(s.row) for s in g.gather(rows))
        finally:
            g.close()
    assert g.wave == WAVE_BYTES // g.max_read == 16
    assert g.pool.created == 16 and g.reads == len(rows)


def test_prefetch_stage_agrees_and_holds_two_batches_of_buffers(ple) -> None:
    rows = list(range(0, 5000, 97))[:48]  # no two share a page: one read (and buffer) per row
    report = R.check_rows(ple.path, rows, options=R.RowsOptions(workers=3, batch=8, prefetch=True))
    assert report.ok and not report.short_reads
    assert [(s.mode, s.stage) for s in report.stats] == \
        [(p, stage) for p in ("buffered", "mmap", "direct") for stage in ("gather", "prefetch")]
    for gather, prefetch in zip(report.stats[::2], report.stats[1::2], strict=True):
        assert gather.reads == prefetch.reads == prefetch.rows == len(rows) and gather.buffers <= 8
        # Batch k's 8 buffers stay out of the pool while batch k+1 takes 8 more; then k's are reused.
        assert prefetch.buffers == 2 * 8


def test_direct_unavailable_is_said_once_and_the_rest_goes_on(ple) -> None:
    def factory(path: str, mode: str) -> Reader:
        if mode == "direct":
            raise DirectIOUnavailable(path, "the filesystem refuses direct I/O")
        return open_reader(path, mode)

    report = R.check_rows(ple.path, range(1, 10), options=R.RowsOptions(reader_factory=factory))
    assert report.ok and [s.mode for s in report.stats] == ["buffered", "mmap"]
    assert report.warnings == (f"direct: skipped: {ple.path}: the filesystem refuses direct I/O",)


@pytest.mark.parametrize("sector", [512, 4096])
def test_windows_direct_path_through_the_stand_in(ple, sector: int) -> None:
    k = FakeKernel32(sector=sector)
    report = R.check_rows(ple.path, range(100), modes=["direct"], select=R.RowSelection(page_crossing=True),
                          options=R.RowsOptions(cache_rows=8,
                                                reader_factory=lambda path, mode: WindowsDirectReader(path, k)))
    assert report.ok and report.stats[0].alignment == sector
    assert all(o % sector == 0 and n % sector == 0 for o, n in k.reads)
    swept = R.check_rows(ple.path, modes=["direct"], select=R.RowSelection(all_rows=True),
                         options=R.RowsOptions(reader_factory=lambda path, mode: WindowsDirectReader(path, k)))
    assert swept.ok


def test_bad_arguments(ple) -> None:
    for kwargs, message in (
            ({"modes": ["disk"]}, "modes: unknown read path 'disk'; choose from buffered, mmap, direct"),
            ({"options": R.RowsOptions(fp8=True)},
             f"{ple.path}: {PLE}: fp8 applies to I8 tables; this one is {ple.tensor.ggml_type.name}"),
            ({"tensor": "nope"}, f"{ple.path}: tensor: no tensor named 'nope'"),
            ({"modes": ()}, "modes: no read path, and no capture to compare (against): nothing to compare the file "
                            "with"),
            ({"select": R.RowSelection(all_rows=True), "options": R.RowsOptions(cache_rows=8)},
             "cache_rows: a sweep of all rows reads in large chunks, not through a row cache; use 0 or choose rows"),
            ({"select": R.RowSelection(all_rows=True), "options": R.RowsOptions(prefetch=True)},
             "prefetch: a sweep of all rows reads in large chunks, not in prefetched batches; drop it or choose "
             "rows"),
            ({"options": {"workers": 2}}, "options: must be a RowsOptions or None, not dict")):
        with pytest.raises(UsageError) as err:
            R.check_rows(ple.path, None if "select" in kwargs else [1], **kwargs)
        assert str(err.value) == message


def test_decode_and_locate(ple) -> None:
    table = R.RowTable(ple.tensor, Path(ple.path).stat().st_size)
    row = ple.row(4162)
    values = table.decode(row)
    assert values.shape == (160,) and np.isfinite(values).all()
    bad = bytearray(row)
    bad[table.tensor.block_bytes * 3 + 5] ^= 0xFF  # a quant byte of block 3
    block, column = locate(table, table.tensor.block_bytes * 3 + 5, row, bytes(bad))
    assert block == 3 and 96 <= column < 128
    assert table.decode(bytes(bad))[column] != values[column]


def test_reference_reader_matches_the_written_table(ple) -> None:
    with BufferedReader(ple.path) as ref:
        got = R._reference_rows(ref, R.RowTable(ple.tensor, 0), [5, 6, 7, 100])
    assert got == {r: ple.row(r) for r in (5, 6, 7, 100)}
    assert open_model(ple.path).tensor(PLE).offset == ple.tensor.offset


def test_rows_too_large_to_buffer_are_refused(ddir: Path) -> None:
    import struct

    from ggaudit.format.build import encode_tensor_info
    ne0 = (R.MAX_ROW_BYTES // 4) + 8  # F32 rows just over the limit
    header = b"GGUF" + struct.pack("<IQQ", 3, 1, 0) + encode_tensor_info("token_embd.weight", T.F32, (ne0, 2), 0)
    header += bytes(-len(header) % 32)
    path = ddir / "wide.gguf"
    with open(path, "wb") as f:  # the data section is a hole: no 128 MB written
        f.write(header)
        f.truncate(len(header) + ne0 * 8)
    with pytest.raises(UsageError, match=f"rows of {ne0 * 4} bytes are larger than"):
        R.check_rows(str(path), [0])


def test_progress_is_reported_per_batch_and_per_chunk(ple) -> None:
    calls: list[tuple[str, int, int]] = []
    R.check_rows(ple.path, range(100), modes=["mmap", "direct"],
                 options=R.RowsOptions(batch=40, progress=lambda mode, done, total: calls.append((mode, done, total))))
    assert calls == [(m, d, 100) for m in ("mmap", "direct") for d in (40, 80, 100)]
    calls.clear()
    R.check_rows(ple.path, modes=["buffered"], select=R.RowSelection(all_rows=True),
                 options=R.RowsOptions(progress=lambda *c: calls.append(c)))
    assert calls == [("buffered", 5000, 5000)]


def test_classifier_kinds_for_cache_hits_and_zeroed_rows(ple: Table) -> None:
    table = R.RowTable(ple.tensor, Path(ple.path).stat().st_size)
    rb, row = table.row_bytes, 300
    expected = ple.row(row)
    k = next(i for i, x in enumerate(expected) if x)
    garbage = bytes((x ^ 0x5A) for x in expected)
    with BufferedReader(ple.path) as ref:
        c = R.Classifier(table, ref)
        zeros = c.mismatch(Sample(row, bytes(rb), cut=True), expected, "direct", "gather")
        hit_zeros = c.mismatch(Sample(row, bytes(rb), via_cache=True, cut=True), expected, "direct", "cache-hit")
        filled = c.mismatch(Sample(row, bytes(rb)), expected, "direct", "gather")
        crosstalk = c.mismatch(Sample(row, ple.row(row + 3), via_cache=True), expected, "direct", "cache-hit")
        hit_garbage = c.mismatch(Sample(row, garbage, via_cache=True), expected, "direct", "cache-hit")
    for m in (zeros, hit_zeros):     # zeros after a read that came back short
        assert (m.kind, m.byte, m.offset, m.other_row) == ("short-read", k, ple.offset(row) + k, None)
        assert m.detail == f"zeros from offset {ple.offset(row) + k} on: the read stopped there"
    # zeros over the whole row from a read that returned its full count came from below (issue 26, item 2)
    assert (filled.kind, filled.byte, filled.filled) == ("filled", k, R.Filled(0, ple.offset(row), rb))
    assert (crosstalk.kind, crosstalk.other_row, crosstalk.other_offset) == \
        ("cache-crosstalk", row + 3, ple.offset(row + 3))
    assert crosstalk.detail == f"cache hit for row {row} held row {row + 3}"
    assert (hit_garbage.kind, hit_garbage.other_row, hit_garbage.byte) == ("garbage", None, 0)


def test_classifier_names_every_source_the_same_way(ple: Table) -> None:
    """A row's content found at an offset that starts no row is named by its offset, for a cache hit
    (this said "held row None" before the classifiers were merged) as for a fresh read; a row that
    stops into poison is a short read from there; the previous row's bytes are stale."""
    table = R.RowTable(ple.tensor, Path(ple.path).stat().st_size)
    rb, row = table.row_bytes, 300
    expected, at = ple.row(row), ple.offset(row + 3) + 1
    shifted = (ple.row(row + 3) + ple.row(row + 4))[1:rb + 1]
    poisoned = expected[:40] + bytes([POISON]) * (rb - 40)
    with BufferedReader(ple.path) as ref:
        c = R.Classifier(table, ref)
        hit = c.mismatch(Sample(row, shifted, via_cache=True), expected, "mmap", "cache-hit")
        read = c.mismatch(Sample(row, shifted), expected, "mmap", "gather")
        short = c.mismatch(Sample(row, poisoned), expected, "direct", "gather")
        stale = c.mismatch(Sample(row, ple.row(row - 1)), expected, "direct", "gather", previous=ple.row(row - 1))
    assert (hit.kind, hit.other_row, hit.other_offset, hit.mode) == ("cache-crosstalk", None, at, "mmap")
    assert hit.detail == f"cache hit for row {row} held the bytes of offset {at}"
    assert (read.kind, read.other_row, read.other_offset, read.detail) == ("misplaced", None, at,
                                                                            f"the bytes of offset {at}")
    k = next(i for i in range(40, rb) if expected[i] != POISON)
    assert (short.kind, short.byte, short.offset) == ("short-read", k, ple.offset(row) + k)
    assert short.detail == f"poison from offset {ple.offset(row) + k} on: the read stopped there"
    assert (stale.kind, stale.detail) == ("stale", "the bytes of the previous row gathered into the same buffer")


@pytest.mark.parametrize("base", [0, 100, 4095, 4096, 5000])
@pytest.mark.parametrize("row_bytes", [1, 90, 170, 4096, 5000, 8192, 9520])
def test_crossing_rows_from_the_boundaries_match_the_rows_one_by_one(base: int, row_bytes: int) -> None:
    """Found from the boundaries (13M for a 54 GB table, not its 600M rows), in pieces of 3 boundaries;
    a row longer than a boundary's spacing crosses several and is given once."""
    n_rows = 300
    rows = np.arange(n_rows, dtype=np.int64)
    for boundary in (512, 4096, 65536):
        pieces = list(R.crossing_rows_of(base, row_bytes, n_rows, boundary, chunk=3))
        got = np.concatenate(pieces).tolist() if pieces else []
        want = rows[crossing_mask(base + rows * row_bytes, row_bytes, boundary)].tolist()
        assert got == want, (boundary, got[:8], want[:8])


def test_random_rows_of_a_huge_table_in_memory_of_the_sample() -> None:
    """1M of 50M rows: numpy's own sampler would shuffle all 50M (400 MB; 4.8 GB for 16M of 600M)."""
    n_rows, n = 50_000_000, 1_000_000
    tracemalloc.start()
    try:
        rows = sample_rows(np.random.default_rng(7), n_rows, n)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    ranked = np.sort(rows)
    assert rows.dtype == np.int64 and rows.size == n and (ranked[1:] > ranked[:-1]).all()  # n distinct rows
    assert ranked[0] >= 0 and ranked[-1] < n_rows
    assert not (rows[1:] > rows[:-1]).all()  # in random order, not sorted
    assert peak < 40 * n, peak / n
    assert np.array_equal(rows, sample_rows(np.random.default_rng(7), n_rows, n))  # the seed decides
    # Spread over the whole table: each tenth of it holds about a tenth of the sample.
    counts = np.bincount(rows // (n_rows // 10), minlength=10)
    assert (abs(counts - n // 10) < n // 100).all(), counts


def test_a_row_chosen_twice_is_replayed_once_where_first_chosen(ple) -> None:
    table = R.RowTable(ple.tensor, Path(ple.path).stat().st_size)
    sel = R.select_rows(table, [9, 3, 9, 1, 2, 3, 7])
    assert sel.rows.tolist() == [9, 3, 1, 2, 7]
