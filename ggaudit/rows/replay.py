"""Replay embedding rows through every read path and byte-compare each row with the buffered reference.

The gather works like an engine's: a batch of row IDs becomes reads de-duplicated per page and sorted by
offset, run by a pool of worker threads into buffers taken from a reused pool; every buffer is poisoned
before each read so bytes a read did not deliver cannot pass as data. A row cache can sit in front (each
ID gathered on a miss, then a hit, then under eviction pressure). Every mismatch is located (file, offset;
tensor, row, block, column), shown (expected before actual, in hex) and classified. A prefetch stage can
follow the gather: batch k+1 lands while batch k's rows are still views into their read buffers.
"""

from __future__ import annotations

import functools
import logging
import os
import time
from array import array
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Iterable, Iterator, Sequence

import numpy as np
from gguf import GGMLQuantizationType
from gguf import quants as gguf_quants

from ..format.blocks import Encoding, decode_bits
from ..errors import UsageError, check_arg
from ..format.layout import Model, Tensor, open_model
from .readers import (MODES, PAGE, POISON, SECTOR, WINDOW_64K, BufferedReader, DirectIOUnavailable, Reader,
                      open_reader)
from .gather import BufferPool, Chunk, Gatherer, Held, PoolFactory, RowCache, Sample, Sweep, through_cache, uniform
from .finite import NonFiniteRows, NonFiniteValue, nonfinite_rows
from .select import (MAX_SELECTED, Capture, IdsFiles, Selection, crosses, crossing_mask, crossing_rows,
                     crossing_rows_of, distinct, load_capture, parse_ids, select_rows)

__all__ = [
    "CaptureResult", "Classifier", "Geometry", "KINDS", "Mismatch", "NonFiniteValue", "PathStats", "RowCache",
    "RowTable",
    "RowsReport", "Selection", "ShortRead", "check_rows", "crosses", "crossing_rows", "crossing_rows_of", "geometry_of",
    "load_capture", "parse_ids", "pick_tensor", "select_rows", "table_geometry",
]

log = logging.getLogger(__name__)

DEFAULT_TENSORS = ("per_layer_token_embd.weight", "token_embd.weight")
KINDS = ("short-read", "stale", "misplaced", "cache-crosstalk", "garbage")
#: Mismatches beyond MAX_REPORTED are counted under this name instead of being classified.
UNCLASSIFIED = "unclassified"
#: Boundaries a row may straddle: a 4 KiB page, a 512-byte sector, Windows' 64 KiB mmap granularity.
BOUNDARIES = (("page", PAGE), ("sector", SECTOR), ("64k", WINDOW_64K))
#: Rows larger than this are not replayed: every worker holds a few rows' worth of buffers.
MAX_ROW_BYTES = 64 << 20
#: Mismatches kept in full; beyond this they are only counted.
MAX_REPORTED = 1000
HEX_WINDOW = 16

ReaderFactory = Callable[[str, str], Reader]
#: Called as (read path, rows done, rows in all) after each batch or sweep chunk.
Progress = Callable[[str, int, int], None]


# --- the table -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class RowTable:
    """The row geometry of one 2-D (or higher) tensor, as the replay needs it."""

    tensor: Tensor
    file_size: int
    fp8: bool = False  # an I8 table holding FP8 E4M3 bytes

    @property
    def name(self) -> str:
        return self.tensor.name

    @property
    def path(self) -> str:
        return self.tensor.path

    @property
    def row_bytes(self) -> int:
        return self.tensor.row_bytes

    @property
    def n_rows(self) -> int:
        return self.tensor.n_rows

    def row_offset(self, row: int) -> int:
        return self.tensor.offset + row * self.tensor.row_bytes

    def row_at(self, offset: int) -> tuple[int, int]:
        """(row, byte within row) of an absolute file offset inside the table."""
        return divmod(offset - self.tensor.offset, self.tensor.row_bytes)

    def decode(self, data: bytes) -> np.ndarray | None:
        """The row's values as floats (gguf.quants, or FP8 E4M3 when asked), or None if undecodable."""
        raw = np.frombuffer(data, dtype=np.uint8)
        t = self.tensor.ggml_type
        if t == GGMLQuantizationType.I8:
            return decode_bits(Encoding.E4M3, raw) if self.fp8 else raw.view(np.int8).astype(np.float64)
        if t in (GGMLQuantizationType.I16, GGMLQuantizationType.I32, GGMLQuantizationType.I64):
            return raw.view({GGMLQuantizationType.I16: "<i2", GGMLQuantizationType.I32: "<i4"}
                            .get(t, "<i8")).astype(np.float64)
        try:
            return np.asarray(gguf_quants.dequantize(raw, t), dtype=np.float64).reshape(-1)
        except (NotImplementedError, ValueError, KeyError):
            return None

    def locate(self, byte: int, expected: bytes, actual: bytes) -> tuple[int, int]:
        """(block, column) of the first difference: the first decoded column that differs, when decodable."""
        block = byte // self.tensor.block_bytes
        first_col = block * self.tensor.block_size
        exp, act = self.decode(expected), self.decode(actual)
        if exp is not None and act is not None and exp.shape == act.shape:
            differs = np.flatnonzero(exp.view(np.uint64) != act.view(np.uint64))
            later = differs[differs >= first_col]
            if later.size:
                return block, int(later[0])
        return block, first_col


def pick_tensor(model: Model, name: str | None) -> Tensor:
    if name is not None:
        return model.tensor(name)
    for candidate in DEFAULT_TENSORS:
        for t in model.tensors:
            if t.name == candidate:
                return t
    raise UsageError(model.source, "no per_layer_token_embd.weight or token_embd.weight; name one with "
                                   "--tensor", field="tensor")


# --- findings ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Mismatch:
    """One row whose bytes from a read path (or capture) differ from the file."""

    kind: str            # one of KINDS
    path: str            # buffered | mmap | direct | capture
    stage: str           # gather | cache-miss | cache-hit | cache-pressure | prefetch | sweep | capture
    file: str
    tensor: str
    row: int
    row_offset: int      # absolute offset of the row
    length: int          # row bytes
    byte: int            # first differing byte within the row
    offset: int          # its absolute file offset
    block: int
    column: int
    expected: str        # hex, from the first differing byte (raw bits for decoded captures)
    actual: str
    differing: int       # bytes (or values) that differ
    expected_finite: bool | None
    actual_finite: bool | None
    other_row: int | None = None
    other_offset: int | None = None
    max_abs_diff: float | None = None
    detail: str = ""
    unit: str = "bytes"  # what `differing` counts: bytes, or decoded values for a float capture


@dataclass(frozen=True)
class ShortRead:
    """A read that returned fewer bytes than asked without reaching the end of the file."""

    path: str
    stage: str
    file: str
    offset: int
    requested: int
    returned: int


@dataclass(frozen=True)
class Geometry:
    """How many rows straddle each boundary class."""

    rows: int = 0
    page: int = 0
    sector: int = 0
    window_64k: int = 0

    def __add__(self, other: Geometry) -> Geometry:
        return Geometry(self.rows + other.rows, self.page + other.page, self.sector + other.sector,
                        self.window_64k + other.window_64k)


@dataclass(frozen=True)
class PathStats:
    path: str
    stage: str
    reads: int
    bytes: int
    rows: int
    seconds: float
    alignment: int
    alignment_source: str
    buffers: int = 0
    cache_hits: int = 0
    cache_misses: int = 0
    cache_evictions: int = 0


@dataclass(frozen=True)
class CaptureResult:
    file: str
    kind: str            # raw | decoded
    dtype: str
    rows: int
    mismatched_rows: int
    max_abs_diff: float | None


@dataclass(frozen=True)
class RowsReport:
    file: str
    tensor: str
    ggml_type: str
    n_cols: int
    row_bytes: int
    n_rows: int
    table_offset: int
    selection: str
    seed: int | None
    modes: tuple[str, ...]
    rows_checked: int
    geometry: Geometry
    mismatch_geometry: Geometry
    mismatch_count: int
    by_kind: tuple[tuple[str, int], ...]
    mismatches: tuple[Mismatch, ...]
    short_reads: tuple[ShortRead, ...]
    short_read_count: int
    capture: CaptureResult | None
    stats: tuple[PathStats, ...]
    warnings: tuple[str, ...]
    #: Selected rows holding a NaN or Inf in the file itself (every path may deliver them faithfully).
    nonfinite_rows: int = 0
    first_nonfinite: NonFiniteValue | None = None

    @property
    def compared(self) -> tuple[str, ...]:
        """What was compared with the file: each read path that ran, then "capture"."""
        ran = tuple(dict.fromkeys(s.path for s in self.stats))
        return ran + (("capture",) if self.capture is not None else ())

    @property
    def delivered(self) -> bool:
        """Every read path (and the capture) gave the file's bytes: no mismatch, no short read."""
        return not self.mismatch_count and not self.short_read_count

    @property
    def clean(self) -> bool:
        """The bytes were delivered and the selected rows hold only finite values."""
        return self.delivered and not self.nonfinite_rows

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["by_kind"] = dict(self.by_kind)
        out["compared"] = list(self.compared)
        out["delivered"] = self.delivered
        out["clean"] = self.clean
        return out


def geometry_of(offsets: Sequence[int] | np.ndarray, length: int) -> Geometry:
    offs = np.asarray(offsets, dtype=np.int64)
    return Geometry(int(offs.size), *(int(crossing_mask(offs, length, b).sum()) for _, b in BOUNDARIES))


def table_geometry(table: RowTable) -> Geometry:
    """Counted from the boundaries, not the rows: a 54 GB table of 90-byte rows has 600M rows."""
    return Geometry(table.n_rows, *(sum(hit.size for hit in crossing_rows_of(table.tensor.offset, table.row_bytes,
                                                                             table.n_rows, b))
                                    for _, b in BOUNDARIES))


def rows_geometry(table: RowTable, rows: np.ndarray, chunk: int = 1 << 20) -> Geometry:
    """geometry_of the given rows, a chunk at a time (no offsets array as long as the selection)."""
    total = Geometry()
    for i in range(0, rows.size, chunk):
        total = total + geometry_of(table.tensor.offset + rows[i:i + chunk] * table.row_bytes, table.row_bytes)
    return total


# --- classification ------------------------------------------------------------------------------

def _hex(data: bytes) -> str:
    return data.hex(" ")


class Classifier:
    """Turns (expected, actual) into a located, classified Mismatch; reads the file through the reference."""

    def __init__(self, table: RowTable, reference: BufferedReader) -> None:
        self.table = table
        self.reference = reference

    def mismatch(self, sample: Sample, expected: bytes, path: str, stage: str,
                 previous: bytes | None = None, batch: dict[int, bytes] | None = None) -> Mismatch:
        # A view into a live buffer is classified by what it shows now (bytes(bytes) is no copy).
        actual, t = bytes(sample.data), self.table
        k = next(i for i, (a, b) in enumerate(zip(expected, actual)) if a != b) if len(actual) == len(expected) \
            else 0
        kind, other_row, other_offset, detail = self._classify(sample, actual, expected, k, previous, batch or {})
        block, column = t.locate(k, expected, actual)
        row_offset = t.row_offset(sample.row)
        return Mismatch(kind, path, stage, t.path, t.name, sample.row, row_offset, t.row_bytes, k, row_offset + k,
                        block, column, _hex(expected[k:k + HEX_WINDOW]), _hex(actual[k:k + HEX_WINDOW]),
                        sum(a != b for a, b in zip(expected, actual)), self._finite(expected),
                        self._finite(actual), other_row, other_offset, detail=detail)

    def _finite(self, data: bytes) -> bool | None:
        values = self.table.decode(data)
        return None if values is None else bool(np.isfinite(values).all())

    def _classify(self, s: Sample, actual: bytes, expected: bytes, k: int, previous: bytes | None,
                  batch: dict[int, bytes]) -> tuple[str, int | None, int | None, str]:
        stop = self.table.row_offset(s.row) + k
        # Searching the file is the costly step: done once, first only for a cache hit (crosstalk wins).
        other = self._other_row(actual, s.row, batch) if s.via_cache else None
        if other is not None:
            return "cache-crosstalk", other[0], other[1], f"cache hit for row {s.row} held row {other[0]}"
        if s.unlanded:
            return "stale", None, None, "buffer handed out before its read landed: it held its previous contents"
        if previous is not None and actual == previous:
            return "stale", None, None, "the bytes of the previous row gathered into the same buffer"
        tail = actual[k:]
        if uniform(tail, POISON) or uniform(tail, 0):
            what = "poison" if tail[0] == POISON else "zeros"
            return "short-read", None, None, f"{what} from offset {stop} on: the read stopped there"
        if not s.via_cache:
            other = self._other_row(actual, s.row, batch)
        if other is not None:
            name = f"row {other[0]}" if other[0] is not None else f"offset {other[1]}"
            return "misplaced", other[0], other[1], f"the bytes of {name}"
        return "garbage", None, None, "bytes found nowhere near the row"

    def _other_row(self, actual: bytes, row: int, batch: dict[int, bytes]) -> tuple[int | None, int] | None:
        """Where else in the file *actual* lives: a row of this batch, or anywhere near the row."""
        if uniform(actual, actual[0]):
            return None  # one byte repeated (zeros, poison) would "match" padding anywhere
        for other, data in batch.items():
            if other != row and data == actual:
                return other, self.table.row_offset(other)
        t = self.table
        radius = max(WINDOW_64K, 8 * t.row_bytes)
        here = t.row_offset(row)
        lo = max(0, here - radius)
        hi = min(t.file_size, here + t.row_bytes + radius)
        window = self.reference.read_exact(lo, hi - lo)
        hits: list[int] = []
        pos = window.find(actual)
        while pos >= 0 and len(hits) < 64:
            if lo + pos != here:
                hits.append(lo + pos)
            pos = window.find(actual, pos + 1)
        if not hits:
            return None
        found = min(hits, key=lambda off: abs(off - here))
        other, within = t.row_at(found)
        in_table = within == 0 and 0 <= other < t.n_rows
        return (other if in_table else None), found


# --- the replay ----------------------------------------------------------------------------------

CacheFactory = Callable[[int, RowTable], RowCache]


def default_cache(capacity: int, table: RowTable) -> RowCache:
    return RowCache(capacity)


class _Findings:
    """Collects findings: the first MAX_REPORTED of each sort in full, every one counted.

    Classifying a mismatch may read the file around the row, so beyond the cap rows are only counted
    (as "unclassified"): a path that is wrong everywhere must not cost a search per row of a 54 GB table.
    """

    def __init__(self, fail_fast: bool) -> None:
        self.fail_fast = fail_fast
        self.kept: list[Mismatch] = []
        self.count = 0
        self.kinds: Counter[str] = Counter()
        # Every mismatched row as 8 bytes (a set of Python ints costs ten times that), the first
        # MAX_SELECTED times one is found; repeats (one row wrong on several paths) are removed at the end.
        self.rows = array("q")
        self.short_reads: list[ShortRead] = []
        self.short_count = 0

    def add(self, row: int, make: Callable[[], Mismatch]) -> None:
        self.count += 1
        if len(self.rows) < MAX_SELECTED:
            self.rows.append(row)
        if len(self.kept) < MAX_REPORTED:
            m = make()
            self.kept.append(m)
            self.kinds[m.kind] += 1
        else:
            self.kinds[UNCLASSIFIED] += 1

    def short(self, reads: Iterable[ShortRead]) -> None:
        for s in reads:
            self.short_count += 1
            if len(self.short_reads) < MAX_REPORTED:
                self.short_reads.append(s)

    @property
    def stop(self) -> bool:
        return self.fail_fast and bool(self.count or self.short_count)


def _reference_rows(ref: BufferedReader, table: RowTable, rows: Sequence[int]) -> dict[int, bytes]:
    """Reference bytes of *rows*, one exact read per run of consecutive rows."""
    out: dict[int, bytes] = {}
    ordered = sorted(set(rows))
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        data = ref.read_exact(table.row_offset(ordered[i]), (j - i + 1) * table.row_bytes)
        for n, row in enumerate(ordered[i:j + 1]):
            out[row] = data[n * table.row_bytes:(n + 1) * table.row_bytes]
        i = j + 1
    return out


@dataclass
class _Replay:
    table: RowTable
    reference: BufferedReader
    findings: _Findings
    workers: int
    batch: int
    cache_rows: int
    cache_factory: CacheFactory
    progress: Progress | None = None
    pool_factory: PoolFactory = BufferPool
    stats: list[PathStats] = field(default_factory=list)

    def check(self, samples: Iterable[Sample], ref: dict[int, bytes], path: str, stage: str,
              suspects: dict[int, bytes] | None = None) -> None:
        """Compare with *ref*; a mismatch equal to a row of *suspects* (default: *ref*) is named as that row."""
        classifier = Classifier(self.table, self.reference)
        batch = ref if suspects is None else suspects
        for s in samples:
            if s.data != ref[s.row]:
                self.findings.add(s.row, functools.partial(classifier.mismatch, s, ref[s.row], path, stage,
                                                           batch=batch))
                if self.findings.stop:
                    return

    def run_path(self, reader: Reader, rows: Sequence[int] | np.ndarray) -> None:
        gatherer = Gatherer(reader, self.table.tensor.offset, self.table.row_bytes, self.workers,
                            pool_factory=self.pool_factory)
        caches: dict[str, RowCache] = {}
        started = time.perf_counter()
        try:
            for i in range(0, len(rows), self.batch):
                self._batch(gatherer, caches, _ints(rows[i:i + self.batch]))
                if self.progress is not None:
                    self.progress(reader.mode, min(len(rows), i + self.batch), len(rows))
                if self.findings.stop:
                    break
        finally:
            gatherer.close()
        a = reader.alignment
        self.stats.append(PathStats(reader.mode, "gather", gatherer.reads, gatherer.bytes, len(rows),
                                    time.perf_counter() - started, a.offset, a.source, gatherer.pool.created,
                                    *_cache_counts(caches)))

    def _batch(self, gatherer: Gatherer, caches: dict[str, RowCache], rows: Sequence[int]) -> None:
        ref = _reference_rows(self.reference, self.table, rows)
        path = gatherer.reader.mode

        def gather(stage: str) -> Callable[[Iterable[int]], list[Sample]]:
            def run(batch: Iterable[int]) -> list[Sample]:
                samples = gatherer.gather(batch)
                self.findings.short(ShortRead(path, stage, gatherer.reader.path, *s) for s in gatherer.shortfalls)
                gatherer.shortfalls.clear()
                return samples
            return run

        self.check(gather("gather")(rows), ref, path, "gather")
        if not self.cache_rows or self.findings.stop:
            return
        main = caches.setdefault("main", self.cache_factory(self.cache_rows, self.table))
        for stage in ("cache-miss", "cache-hit"):
            self.check(through_cache(gather(stage), main, rows), ref, path, stage)
        # Under pressure: a cache holding half the batch, gathered forwards then backwards.
        small = caches.setdefault("pressure", self.cache_factory(max(1, min(self.cache_rows, len(rows) // 2)),
                                                                 self.table))
        for order in (rows, rows[::-1]):
            self.check(through_cache(gather("cache-pressure"), small, order), ref, path, "cache-pressure")

    def prefetch(self, reader: Reader, rows: Sequence[int] | np.ndarray) -> None:
        """Gather batch k+1 in the background while batch k's rows are still views into their read buffers,
        and compare batch k only once k+1 has landed, as an engine consumes a batch while prefetching the
        next. A buffer of batch k reused by k+1 too early then shows k+1's bytes: the row is reported
        misplaced, naming the row of k+1 it holds. Two batches of buffers are out of the pool at a time."""
        t, path = self.table, reader.mode
        gatherer = Gatherer(reader, t.tensor.offset, t.row_bytes, self.workers, pool_factory=self.pool_factory)
        batches = [_ints(rows[i:i + self.batch]) for i in range(0, len(rows), self.batch)]
        started = time.perf_counter()
        held: Held | None = None
        try:
            with ThreadPoolExecutor(1) as ahead:
                held, ref = gatherer.hold(batches[0]), _reference_rows(self.reference, t, batches[0])
                for k in range(len(batches)):
                    assert held is not None  # batch k landed before k+1 was asked for
                    following = ahead.submit(gatherer.hold, batches[k + 1]) if k + 1 < len(batches) else None
                    # Meanwhile, as an engine works on batch k, read the next batch's reference bytes.
                    ref_next = {} if following is None else _reference_rows(self.reference, t, batches[k + 1])
                    landed = None if following is None else following.result()
                    self.findings.short(ShortRead(path, "prefetch", reader.path, *s) for s in gatherer.shortfalls)
                    gatherer.shortfalls.clear()
                    self.check(held.samples, ref, path, "prefetch", suspects={**ref_next, **ref})
                    gatherer.release(held)
                    held, ref = landed, ref_next
                    if self.progress is not None:
                        self.progress(path, min(len(rows), (k + 1) * self.batch), len(rows))
                    if self.findings.stop:
                        break
        finally:
            if held is not None:
                gatherer.release(held)
            gatherer.close()
        a = reader.alignment
        self.stats.append(PathStats(path, "prefetch", gatherer.reads, gatherer.bytes, len(rows),
                                    time.perf_counter() - started, a.offset, a.source, gatherer.pool.created))

    def sweep(self, reader: Reader) -> None:
        t = self.table
        sweep = Sweep(reader, self.reference, t.tensor.offset, t.row_bytes, t.n_rows, self.workers)
        started = time.perf_counter()
        chunks = sweep.chunks()
        try:
            for chunk in chunks:
                self._sweep_chunk(chunk, reader.mode)
                if self.progress is not None:
                    self.progress(reader.mode, chunk.first + chunk.n_rows, t.n_rows)
                if self.findings.stop:
                    break
        finally:
            chunks.close()
        a = reader.alignment
        self.stats.append(PathStats(reader.mode, "sweep", sweep.reads, sweep.bytes, t.n_rows,
                                    time.perf_counter() - started, a.offset, a.source, sweep.pool.created))

    def _sweep_chunk(self, chunk: Chunk, path: str) -> None:
        if chunk.shortfall is not None:
            self.findings.short([ShortRead(path, "sweep", self.table.path, *chunk.shortfall)])
        actual, expected = chunk.actual, chunk.expected
        if actual is None or expected is None:
            return
        rb = self.table.row_bytes
        a = np.frombuffer(actual, np.uint8).reshape(-1, rb)
        e = np.frombuffer(expected, np.uint8).reshape(-1, rb)
        classifier = Classifier(self.table, self.reference)
        for i in np.flatnonzero((a != e).any(axis=1)).tolist():
            sample = Sample(chunk.first + i, actual[i * rb:(i + 1) * rb], chunk.unlanded)
            self.findings.add(sample.row, functools.partial(classifier.mismatch, sample,
                                                            expected[i * rb:(i + 1) * rb], path, "sweep"))
            if self.findings.stop:
                return


def _ints(rows: Sequence[int] | np.ndarray) -> list[int]:
    """A batch of row IDs as Python ints: offsets worked out from them stay Python ints."""
    return rows.tolist() if isinstance(rows, np.ndarray) else list(rows)


def _cache_counts(caches: dict[str, RowCache]) -> tuple[int, int, int]:
    return (sum(c.hits for c in caches.values()), sum(c.misses for c in caches.values()),
            sum(c.evictions for c in caches.values()))


def compare_capture(capture: Capture, table: RowTable, reference: BufferedReader,
                    findings: _Findings) -> CaptureResult:
    """Each captured row against the file: raw bytes exactly, decoded values bit for bit."""
    classifier = Classifier(table, reference)
    bad, worst = 0, None
    previous: bytes | None = None  # the file's bytes of the row captured just before
    for i, row in _indexed_ids(capture.ids):
        expected = reference.read_exact(table.row_offset(row), table.row_bytes)
        got = np.asarray(capture.data[i])
        if capture.kind == "raw":
            actual = got.tobytes()
            if actual != expected:
                bad += 1
                findings.add(row, lambda: classifier.mismatch(Sample(row, actual), expected, "capture", "capture",
                                                              previous=previous))
        else:
            cmp = _DecodedRow(table, reference, row, expected, got)
            worst = cmp.max_abs_diff if worst is None or (cmp.max_abs_diff or 0) > worst else worst
            if not cmp.same:
                bad += 1
                findings.add(row, lambda: cmp.mismatch(previous))
        previous = expected
        if findings.stop:
            break
    return CaptureResult(capture.path, capture.kind, str(capture.data.dtype), len(capture.ids), bad, worst)


def _indexed_ids(ids: np.ndarray, chunk: int = 1 << 16) -> Iterator[tuple[int, int]]:
    """(index, row) of each captured ID as Python ints, a chunk at a time: a mapped capture of 100M
    rows is not turned into a list of 100M ints."""
    for start in range(0, len(ids), chunk):
        yield from enumerate(ids[start:start + chunk].tolist(), start)


class _DecodedRow:
    """A captured row of decoded values against ggaudit's decode of the file's row, cast to its type."""

    #: Rows each side of the row whose decodes are tried when looking for where the values came from.
    NEAR = 64

    def __init__(self, table: RowTable, reference: BufferedReader, row: int, expected_raw: bytes,
                 got: np.ndarray) -> None:
        self.table, self.reference, self.row, self.raw, self.got = table, reference, row, expected_raw, got
        self.want = self._decode(expected_raw)
        self.bits = _uint_of(got.dtype)
        equal = self._equal(self.want, got)
        self.same = bool(equal.all())
        self.col = int(np.flatnonzero(~equal)[0]) if not self.same else -1
        self.differing = int((~equal).sum())
        both = np.isfinite(self.want) & np.isfinite(got)
        self.max_abs_diff = float(np.max(np.abs(self.want[both].astype(np.float64) - got[both]))) \
            if both.any() else None

    def _decode(self, raw: bytes) -> np.ndarray:
        decoded = self.table.decode(raw)
        if decoded is None:
            raise UsageError(self.table.path, f"cannot decode {self.table.tensor.ggml_type.name} rows to compare "
                                              "floats", field=self.table.name)
        return decoded.astype(self.got.dtype)

    def _equal(self, want: np.ndarray, got: np.ndarray) -> np.ndarray:
        return (want.view(self.bits) == got.view(self.bits)) | (np.isnan(want) & np.isnan(got))

    def _kind(self, previous: bytes | None) -> tuple[str, int | None, str]:
        if previous is not None and self._equal(self._decode(previous), self.got).all():
            return "stale", None, "the values of the previous row gathered"
        tail = self.got[self.col:]
        if not np.any(tail) and np.any(self.want[self.col:]):
            return "short-read", None, f"zeros from column {self.col} on: the gather stopped there"
        t = self.table
        lo, hi = max(0, self.row - self.NEAR), min(t.n_rows, self.row + self.NEAR + 1)
        near = self.reference.read_exact(t.row_offset(lo), (hi - lo) * t.row_bytes)
        for other in sorted(range(lo, hi), key=lambda r: abs(r - self.row)):
            if other != self.row:
                at = (other - lo) * t.row_bytes
                if self._equal(self._decode(near[at:at + t.row_bytes]), self.got).all():
                    return "misplaced", other, f"the values of row {other}"
        return "garbage", None, f"decoded values differ from column {self.col}"

    def mismatch(self, previous: bytes | None) -> Mismatch:
        t, col = self.table, self.col
        kind, other, detail = self._kind(previous)
        block = col // t.tensor.block_size
        first_byte = block * t.tensor.block_bytes
        at = t.row_offset(self.row)
        width = self.got.itemsize * 2
        stored = _hex(self.raw[first_byte:first_byte + t.tensor.block_bytes])
        return Mismatch(kind, "capture", "capture", t.path, t.name, self.row, at, t.row_bytes, first_byte,
                        at + first_byte, block, col, f"{int(self.want[col:col + 1].view(self.bits)[0]):0{width}x}",
                        f"{int(self.got[col:col + 1].view(self.bits)[0]):0{width}x}", self.differing,
                        bool(np.isfinite(self.want).all()), bool(np.isfinite(self.got).all()), other,
                        None if other is None else t.row_offset(other), self.max_abs_diff,
                        f"{detail}; stored block: {stored}", unit="values")


def _uint_of(dtype: np.dtype) -> type:
    return {2: np.uint16, 4: np.uint32, 8: np.uint64}[np.dtype(dtype).itemsize]


# --- the library call ----------------------------------------------------------------------------

def check_rows(model: str | os.PathLike[str] | Model, *, tensor: str | None = None, ids: str | None = None,
               ids_file: IdsFiles | None = None, all_rows: bool = False, random: int | None = None,
               seed: int | None = None, page_crossing: bool = False,
               modes: Sequence[str] | None = MODES, workers: int = 4, batch: int = 256,
               cache_rows: int = 0, prefetch: bool = False, against: str | None = None, fp8: bool = False,
               fail_fast: bool = False, reader_factory: ReaderFactory | None = None,
               cache_factory: CacheFactory = default_cache, pool_factory: PoolFactory = BufferPool,
               progress: Progress | None = None) -> RowsReport:
    """Replay rows of *tensor* through each read path in *modes* (and/or an engine capture).

    With *prefetch*, each path's gather is followed by a prefetch stage (see _Replay.prefetch).
    """
    for name, text in (("tensor", tensor), ("ids", ids), ("against", against)):
        check_arg(name, text, (str, type(None)), "a string or None")
    for name, number in (("random", random), ("seed", seed)):
        check_arg(name, number, (int, type(None)), "an integer or None")
    for name, count in (("workers", workers), ("batch", batch), ("cache_rows", cache_rows)):
        check_arg(name, count, int, "an integer")
    if isinstance(modes, (str, bytes)):     # one name would be taken apart into letters
        raise UsageError(None, f"must be a list of read paths, not {type(modes).__name__}", field="modes")
    if seed is not None and seed < 0:   # numpy's generator refuses it with a ValueError
        raise UsageError(None, f"must be a non-negative integer, not {seed}", field="--seed")
    modes = tuple(modes or ())
    m = model if isinstance(model, Model) else open_model(model)
    t = pick_tensor(m, tensor)
    _check_args(t, modes, workers, batch, cache_rows, fp8)
    if all_rows and cache_rows:
        raise UsageError(None, "--all sweeps in large chunks, not through a row cache; drop --cache-rows or "
                         "choose rows with --ids, --random or --page-crossing")
    if all_rows and prefetch:
        raise UsageError(None, "--all sweeps in large chunks, not in prefetched batches; drop --prefetch or "
                         "choose rows with --ids, --random or --page-crossing")
    if not modes and against is None:
        raise UsageError(None, "no read path and no --against capture: nothing to compare the file with")
    table = RowTable(t, os.path.getsize(t.path), fp8)
    capture = load_capture(against, table) if against is not None else None
    no_selector = ids is None and ids_file is None and random is None and not page_crossing and not all_rows
    extra = capture.ids if capture is not None and no_selector else ()
    selection = select_rows(table, ids=ids, ids_file=ids_file, all_rows=all_rows, random=random, seed=seed,
                            page_crossing=page_crossing, extra=extra)
    findings = _Findings(fail_fast)
    warnings: list[str] = []
    factory = reader_factory or (lambda path, mode: open_reader(path, mode))
    with BufferedReader(t.path) as reference:
        replay = _Replay(table, reference, findings, workers, batch, cache_rows, cache_factory, progress,
                         pool_factory)
        capture_result = compare_capture(capture, table, reference, findings) if capture is not None else None
        for mode in modes:
            if findings.stop:
                break
            _run_mode(replay, factory, mode, selection, warnings, prefetch)
        # Bytes delivered faithfully can still be NaN: the file's own values of the rows selected.
        nonfinite = NonFiniteRows(0, None) if findings.stop else nonfinite_rows(table, reference, selection.rows)
    _check_unchanged(m, t)
    geometry = table_geometry(table) if selection.rows is None else rows_geometry(table, selection.rows)
    bad_geometry = rows_geometry(table, distinct(np.frombuffer(findings.rows, dtype=np.int64)))
    by_kind = tuple((k, findings.kinds[k]) for k in (*KINDS, UNCLASSIFIED) if findings.kinds[k])
    return RowsReport(t.path, t.name, t.ggml_type.name, t.n_cols, t.row_bytes, t.n_rows, t.offset,
                      selection.description, selection.seed, modes,
                      table.n_rows if selection.rows is None else len(selection.rows), geometry, bad_geometry,
                      findings.count, by_kind, tuple(findings.kept), tuple(findings.short_reads),
                      findings.short_count, capture_result, tuple(replay.stats), tuple(warnings),
                      nonfinite.rows, nonfinite.first)


def _run_mode(replay: _Replay, factory: ReaderFactory, mode: str, selection: Selection,
              warnings: list[str], prefetch: bool = False) -> None:
    try:
        reader = factory(replay.table.path, mode)
    except DirectIOUnavailable as err:
        warnings.append(f"{mode}: skipped: {err}")
        log.info("%s", err)
        return
    with reader:
        if selection.rows is None:
            replay.sweep(reader)
        else:
            replay.run_path(reader, selection.rows)
            if prefetch and not replay.findings.stop:
                replay.prefetch(reader, selection.rows)


def _check_args(t: Tensor, modes: Sequence[str], workers: int, batch: int, cache_rows: int, fp8: bool) -> None:
    unknown = [m for m in modes if m not in MODES]
    if unknown:
        raise UsageError(None, f"unknown read path {unknown[0]!r}; choose from {', '.join(MODES)}")
    if workers < 1 or batch < 1 or cache_rows < 0:
        raise UsageError(None, "--workers and --batch must be at least 1, --cache-rows at least 0")
    if fp8 and t.ggml_type != GGMLQuantizationType.I8:
        raise UsageError(t.path, f"--fp8 applies to I8 tables; this one is {t.ggml_type.name}", field=t.name)
    if len(t.shape) < 2 or t.row_bytes <= 0:
        raise UsageError(t.path, "not a table of rows (needs at least 2 dimensions)", field=t.name)
    if t.row_bytes > MAX_ROW_BYTES:
        raise UsageError(t.path, f"rows of {t.row_bytes} bytes are larger than the {MAX_ROW_BYTES} bytes a "
                                 "replay buffers per read", field=t.name)


def _check_unchanged(m: Model, t: Tensor) -> None:
    """Read paths that disagree because the file was replaced or rewritten under them is not a read
    bug: say the file changed (exit 2) instead of reporting mismatches."""
    next(f for f in m.files if f.path == t.path).check_unchanged("while rows were read")
