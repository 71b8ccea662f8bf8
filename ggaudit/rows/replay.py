"""Replay embedding rows through every read path and byte-compare each row with the buffered reference.

The gather works like an engine's: a batch of row IDs becomes reads de-duplicated per page and sorted by
offset, run by a pool of worker threads into buffers taken from a reused pool; every buffer is poisoned
before each read so bytes a read did not deliver cannot pass as data. A row cache can sit in front (each
ID gathered on a miss, then a hit, then under eviction pressure). Every mismatch is located (file, offset;
tensor, row, block, column), shown (expected before actual, in hex) and classified (ggaudit.rows.classify).
A prefetch stage can follow the gather: batch k+1 lands while batch k's rows are still views into their
read buffers.
"""

from __future__ import annotations

import dataclasses
import errno as errnos
import functools
import logging
import os
import time
from array import array
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .._version import __version__
from ..diagnostic import Diagnostic
from ..lines import is_elements
from ..format.blocks import GGMLQuantizationType
from ..errors import NothingChecked, ReadError, UsageError, check_arg
from ..format.layout import Model, Tensor
from ..stores.locate import Target, open_model
from ..arrays import distinct
from . import MODES
from .readers import (PAGE, SECTOR, WINDOW_64K, BufferedReader, DirectIOUnavailable, FailedRead, Reader,
                      open_reader)
from .table import RowTable
from .gather import (BufferPool, CacheLedger, Chunk, Gatherer, Held, PoolFactory, RowCache, Sample, Shortfall,
                     Sweep, through_cache)
from .classify import KINDS, UNCLASSIFIED, Classifier, Delivery, Filled, RowMismatch, captured
from .finite import NonFiniteRows, NonFiniteValue, nonfinite_rows
from .settle import Kept, RowGroups, far_named, manifest_groups, settled
from ..verify.manifests.tensor import TensorDigest, read_tensor_manifest
from .lines import describe_read_failure, describe_row_mismatch, describe_short_read, nonfinite_text
from .select import (MAX_SELECTED, Capture, RowChoice, RowIds, RowSelection, Selection, capture_of, crosses,
                     crossing_mask, crossing_rows, crossing_rows_of, int_text, load_capture, select_rows)

__all__ = [
    "KINDS", "CaptureResult", "Classifier", "Delivery", "Filled", "Geometry", "NonFiniteValue", "PathStats",
    "ReadFailure", "RowCache", "RowChoice", "RowMismatch", "RowSelection", "RowsOptions", "RowsReport", "Selection",
    "ShortRead",
    "check_rows", "crosses", "crossing_rows", "crossing_rows_of", "geometry_of", "load_capture", "pick_tensor",
    "select_rows", "table_geometry",
]

log = logging.getLogger(__name__)

DEFAULT_TENSORS = ("per_layer_token_embd.weight", "token_embd.weight")
#: Boundaries a row may straddle: a 4 KiB page, a 512-byte sector, Windows' 64 KiB mmap granularity.
BOUNDARIES = (("page", PAGE), ("sector", SECTOR), ("64k", WINDOW_64K))
#: Rows larger than this are not replayed: every worker holds a few rows' worth of buffers.
MAX_ROW_BYTES = 64 << 20
#: Mismatches kept in full; beyond this they are only counted.
MAX_REPORTED = 1000

ReaderFactory = Callable[[str, str], Reader]
#: Called as (read path, rows done, rows in all) after each batch or sweep chunk: :data:`ggaudit.io.Progress`
#: with the read path first, since each path's pass over the rows is counted from 0.
ReadPathProgress = Callable[[str, int, int], None]


def pick_tensor(model: Model, name: str | None) -> Tensor:
    if name is not None:
        return model.tensor(name)
    for candidate in DEFAULT_TENSORS:
        for t in model.tensors:
            if t.name == candidate:
                return t
    raise UsageError(model.source, "no per_layer_token_embd.weight or token_embd.weight; name the table to "
                                   "replay", field="tensor")


# --- findings (RowMismatch: ggaudit.rows.classify) ------------------------------------------------

@dataclass(frozen=True, kw_only=True)
class ShortRead:
    """A read that returned fewer bytes than asked without reaching the end of the file."""

    mode: str            # the read path: buffered | mmap | direct
    stage: str
    file: str
    offset: int
    requested: int
    returned: int

    def to_json(self) -> dict[str, Any]:
        return {"mode": self.mode, "stage": self.stage, "file": self.file, "offset": self.offset,
                "requested": self.requested, "returned": self.returned}


@dataclass(frozen=True, kw_only=True)
class ReadFailure:
    """A read that failed with an error from below (EIO, EAGAIN, a mapping's copy that faulted): the rows it
    held were not compared on that path (stage ``reference``: on any path), the rest went on."""

    mode: str            # the read path: buffered | mmap | direct (the reference read is buffered)
    stage: str           # open (the direct path's probe), reference, gather, ..., capture
    file: str
    offset: int
    length: int
    errno: int | None    # None where the OS gives none (Windows' ReadFile)
    message: str

    @property
    def error(self) -> str | None:
        """The errno's name (EIO, EAGAIN, EFAULT), or None."""
        return None if self.errno is None else errnos.errorcode.get(self.errno, str(self.errno))

    @classmethod
    def of(cls, err: FailedRead, stage: str) -> ReadFailure:
        return cls(mode=err.mode, stage=stage, file=err.path or "", offset=err.offset or 0, length=err.length,
                   errno=err.errno, message=err.message)

    def to_json(self) -> dict[str, Any]:
        return {"mode": self.mode, "stage": self.stage, "file": self.file, "offset": self.offset,
                "length": self.length, "errno": self.errno, "error": self.error, "message": self.message}


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

    def to_json(self) -> dict[str, Any]:
        return {"rows": self.rows, "page": self.page, "sector": self.sector, "window_64k": self.window_64k}


@dataclass(frozen=True, kw_only=True)
class PathStats:
    """What one stage of one read path did, and how long it took."""

    mode: str            # the read path: buffered | mmap | direct
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

    def to_json(self) -> dict[str, Any]:
        return {"mode": self.mode, "stage": self.stage, "reads": self.reads, "bytes": self.bytes, "rows": self.rows,
                "seconds": round(self.seconds, 6), "alignment": self.alignment,
                "alignment_source": self.alignment_source, "buffers": self.buffers, "cache_hits": self.cache_hits,
                "cache_misses": self.cache_misses, "cache_evictions": self.cache_evictions}


@dataclass(frozen=True, kw_only=True)
class CaptureResult:
    file: str
    kind: str            # raw | decoded
    dtype: str
    rows: int
    mismatched_rows: int
    max_abs_diff: float | None

    def to_json(self) -> dict[str, Any]:
        return {"file": self.file, "kind": self.kind, "dtype": self.dtype, "rows": self.rows,
                "mismatched_rows": self.mismatched_rows, "max_abs_diff": self.max_abs_diff}


#: The ``schema`` of :meth:`RowsReport.to_json`.
SCHEMA = "ggaudit/rows-report/1"
#: Every kind of diagnostic a rows report yields (ggaudit.kinds ids).
DIAGNOSTIC_KINDS = (*(f"rows/{k}" for k in (*KINDS, UNCLASSIFIED)), "rows/incomplete-read", "rows/read-error",
                    "rows/nonfinite")


@dataclass(frozen=True, kw_only=True)
class RowsReport:
    """The result of :func:`check_rows`; ``ok`` when every read path (and capture) delivered the file's
    bytes and the selected rows hold only finite values."""

    file: str
    tensor: str
    ggml_type: str
    n_cols: int
    row_bytes: int
    n_rows: int
    table_offset: int
    #: How the rows were chosen (``selection`` says it in words).
    choice: RowChoice
    modes: tuple[str, ...]
    rows_checked: int
    geometry: Geometry
    mismatch_geometry: Geometry
    mismatch_count: int
    by_kind: tuple[tuple[str, int], ...]
    mismatches: tuple[RowMismatch, ...]
    short_reads: tuple[ShortRead, ...]
    short_read_count: int
    capture: CaptureResult | None
    stats: tuple[PathStats, ...]
    warnings: tuple[str, ...]
    #: Selected rows holding a NaN or Inf in the file itself (every path may deliver them faithfully).
    nonfinite_rows: int = 0
    first_nonfinite: NonFiniteValue | None = None
    #: Selected rows tested for NaN and Inf (0: none was: a table of integers, or a replay stopped by fail-fast).
    finite_tested: int = 0
    #: Reads that failed (kept in full up to MAX_REPORTED; read_error_count counts every one).
    read_errors: tuple[ReadFailure, ...] = ()
    read_error_count: int = 0

    @property
    def compared(self) -> tuple[str, ...]:
        """What was compared with the file: each read path that ran, then "capture"."""
        ran = tuple(dict.fromkeys(s.mode for s in self.stats))
        return ran + (("capture",) if self.capture is not None else ())

    @property
    def selection(self) -> str:
        """How the rows were chosen, in words: ``rows 4,100-102 + random 5 seed 1``, ``all 5000 rows``."""
        return self.choice.description

    @property
    def seed(self) -> int | None:
        """The seed that chose the random rows (None: no random rows)."""
        return self.choice.seed

    @property
    def checked_ranges(self) -> tuple[tuple[int, int], ...] | None:
        """The rows checked as (first, last) ranges, when the report knows which: every row, or the IDs
        listed (see RowChoice.ranges); None for a random sample, page-crossing rows or a capture's IDs."""
        if self.rows_checked == self.n_rows:
            return ((0, self.n_rows - 1),)
        return self.choice.ranges

    def crossing_rows(self, boundary: int) -> Iterator[np.ndarray]:
        """The rows of the whole table crossing a multiple of *boundary* (PAGE, SECTOR, WINDOW_64K), in
        absolute file offsets, ascending, in pieces: a table of 600M rows has 13M crossing a page."""
        return crossing_rows_of(self.table_offset, self.row_bytes, self.n_rows, boundary)

    @property
    def delivered(self) -> bool:
        """Every read path (and the capture) gave the file's bytes: no mismatch, no short read, no failed read."""
        return not self.mismatch_count and not self.short_read_count and not self.read_error_count

    @property
    def ok(self) -> bool:
        """The bytes were delivered and the selected rows hold only finite values."""
        return self.delivered and not self.nonfinite_rows

    def diagnostics(self) -> Iterator[Diagnostic]:
        """Each mismatch kept, each short read kept (``mismatch_count``, ``short_read_count``: all counted),
        then the selected rows holding NaN or Inf, at the first of them."""
        elements = is_elements(self.ggml_type)
        for m in self.mismatches:
            yield Diagnostic(kind=f"rows/{m.kind}", message="\n".join(describe_row_mismatch(m, elements=elements)),
                             file=m.file, offset=m.row_offset, length=m.length, tensor=m.tensor, row=m.row,
                             column=m.column, block=None if elements else m.block, extras=m.to_json())
        for s in self.short_reads:     # a read of the file (a span of rows, or more), not of one tensor's place
            yield Diagnostic(kind="rows/incomplete-read", message=describe_short_read(s), file=s.file,
                             offset=s.offset, length=s.requested, extras={"tensor": self.tensor, **s.to_json()})
        for f in self.read_errors:
            yield Diagnostic(kind="rows/read-error", message=describe_read_failure(f), file=f.file, offset=f.offset,
                             length=f.length, extras={"tensor": self.tensor, **f.to_json()})
        if self.nonfinite_rows:
            yield self._nonfinite_diagnostic()

    def _nonfinite_diagnostic(self) -> Diagnostic:
        """At the row of the first non-finite value (its value's place: row, column, block, field)."""
        extras = {"tensor": self.tensor, "file": self.file, "nonfinite_rows": self.nonfinite_rows,
                  "first": None if self.first_nonfinite is None else self.first_nonfinite.to_json()}
        found = Diagnostic(kind="rows/nonfinite", message=nonfinite_text(self), file=self.file,
                           length=self.row_bytes, tensor=self.tensor, extras=extras)
        first = self.first_nonfinite
        if first is None:
            return found
        return dataclasses.replace(found, offset=self.table_offset + first.row * self.row_bytes, row=first.row,
                                   column=first.column, block=None if first.field == "value" else first.block,
                                   field=first.field)

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA, "tool_version": __version__, "ok": self.ok, "file": self.file, "tensor": self.tensor,
            "ggml_type": self.ggml_type, "n_cols": self.n_cols, "row_bytes": self.row_bytes, "n_rows": self.n_rows,
            "table_offset": self.table_offset, "selection": self.selection, "choice": self.choice.to_json(),
            "seed": self.seed,
            "modes": list(self.modes), "rows_checked": self.rows_checked, "compared": list(self.compared),
            "delivered": self.delivered, "geometry": self.geometry.to_json(),
            "mismatch_geometry": self.mismatch_geometry.to_json(), "mismatch_count": self.mismatch_count,
            "by_kind": dict(self.by_kind), "mismatches": [m.to_json() for m in self.mismatches],
            "short_read_count": self.short_read_count, "short_reads": [s.to_json() for s in self.short_reads],
            "capture": None if self.capture is None else self.capture.to_json(),
            "stats": [s.to_json() for s in self.stats], "warnings": list(self.warnings),
            "nonfinite_rows": self.nonfinite_rows,
            "first_nonfinite": None if self.first_nonfinite is None else self.first_nonfinite.to_json(),
            "finite_tested": self.finite_tested,
            "read_error_count": self.read_error_count, "read_errors": [f.to_json() for f in self.read_errors]}


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


# --- the replay ----------------------------------------------------------------------------------

CacheFactory = Callable[[int, RowTable], RowCache]


def default_cache(capacity: int, table: RowTable) -> RowCache:
    return RowCache(capacity)


@dataclass(frozen=True, kw_only=True)
class RowsOptions:
    """How check_rows replays: *workers* threads per gather (reads in flight for a sweep of all rows),
    *batch* rows per gather, a row cache of *cache_rows* rows in front (0: no cache passes), a *prefetch*
    stage after each read path's gather, *fp8* for an I8 table holding FP8 E4M3 bytes, *fail_fast* to stop
    at the first finding. The factories put other readers (called as (file, read path)), caches and buffer
    pools under the replay, as tests do with faulty ones; *progress* is called as (read path, rows done,
    rows in all) after each batch or sweep chunk."""

    workers: int = 4
    batch: int = 256
    cache_rows: int = 0
    prefetch: bool = False
    fp8: bool = False
    fail_fast: bool = False
    reader_factory: ReaderFactory | None = None
    cache_factory: CacheFactory = default_cache
    pool_factory: PoolFactory = BufferPool
    progress: ReadPathProgress | None = None
    #: The capture's (IDs, rows) array or field names, when they are neither ``ids`` and one other nor
    #: told apart by shape.
    capture_arrays: tuple[str, str] | None = None

    def __post_init__(self) -> None:
        for name, least in (("workers", 1), ("batch", 1), ("cache_rows", 0)):
            value = getattr(self, name)
            check_arg(name, value, int, "an integer")
            if value < least:
                raise UsageError(None, f"must be at least {least}, not {int_text(value)}", field=name)
        for name in ("prefetch", "fp8", "fail_fast"):
            check_arg(name, getattr(self, name), bool, "True or False")
        names = self.capture_arrays
        if names is not None and not (isinstance(names, tuple) and len(names) == 2
                                      and all(isinstance(n, str) and n for n in names)):
            raise UsageError(None, "must be None or two names, (IDs, rows)", field="capture_arrays")
        for name, optional in (("reader_factory", True), ("cache_factory", False), ("pool_factory", False),
                               ("progress", True)):
            value = getattr(self, name)
            if not callable(value) and not (optional and value is None):
                raise UsageError(None, f"must be callable{' or None' if optional else ''}, not "
                                       f"{type(value).__name__}", field=name)


class _Findings:
    """Collects findings: the first MAX_REPORTED of each sort in full, every one counted.

    Classifying a mismatch may read the file around the row, so beyond the cap rows are only counted
    (as "unclassified"): a path that is wrong everywhere must not cost a search per row of a 54 GB table.
    """

    def __init__(self, fail_fast: bool) -> None:
        self.fail_fast = fail_fast
        self.kept: list[Kept] = []
        self.count = 0
        self.kinds: Counter[str] = Counter()
        # Every mismatched row as 8 bytes (a set of Python ints costs ten times that), the first
        # MAX_SELECTED times one is found; repeats (one row wrong on several paths) are removed at the end.
        self.rows = array("q")
        self.short_reads: list[ShortRead] = []
        self.short_count = 0
        self.failures: list[ReadFailure] = []
        self.failure_count = 0
        self.captured = 0    # captured rows compared with the file
        self._failed_at: set[tuple[str, str, int]] = set()

    def add(self, row: int, make: Callable[[], RowMismatch], expected: bytes | None = None,
            actual: bytes | None = None, remake: Callable[[bytes], RowMismatch] | None = None) -> RowMismatch | None:
        """Count a mismatch; the one made (None past the cap)."""
        self.count += 1
        if len(self.rows) < MAX_SELECTED:
            self.rows.append(row)
        if len(self.kept) < MAX_REPORTED:
            m = make()
            self.kept.append(Kept(m, expected, actual, remake))
            self.kinds[m.kind] += 1
            return m
        self.kinds[UNCLASSIFIED] += 1
        return None

    def replace(self, kept: list[Kept]) -> None:
        """The kept mismatches, settled: counted again (those past the cap stay unclassified)."""
        unclassified = self.kinds[UNCLASSIFIED]
        self.kept = kept
        self.count = len(kept) + unclassified
        self.kinds = Counter(k.mismatch.kind for k in kept)
        if unclassified:
            self.kinds[UNCLASSIFIED] = unclassified

    @property
    def mismatches(self) -> list[RowMismatch]:
        return [k.mismatch for k in self.kept]

    def short(self, mode: str, stage: str, file: str, shortfalls: Iterable[Shortfall]) -> None:
        for s in shortfalls:
            self.short_count += 1
            if len(self.short_reads) < MAX_REPORTED:
                self.short_reads.append(ShortRead(mode=mode, stage=stage, file=file, offset=s.offset,
                                                  requested=s.requested, returned=s.returned))

    def failed(self, stage: str, errors: Iterable[FailedRead]) -> None:
        """Failed reads, once each: the reference read of a row fails again for every path that needs it."""
        for err in errors:
            failure = ReadFailure.of(err, stage)
            key = (failure.mode, failure.stage, failure.offset)
            if key in self._failed_at:
                continue
            self._failed_at.add(key)
            self.failure_count += 1
            if len(self.failures) < MAX_REPORTED:
                self.failures.append(failure)

    @property
    def stop(self) -> bool:
        return self.fail_fast and bool(self.count or self.short_count or self.failure_count)


def _reference_rows(ref: BufferedReader, table: RowTable, rows: Sequence[int],
                    failed: Callable[[FailedRead, list[int]], None] | None = None) -> dict[int, bytes]:
    """Reference bytes of *rows*, one exact read per run of consecutive rows; given *failed*, a run whose
    read fails is left out (and handed to it with its rows), so its rows are not compared and the others are."""
    out: dict[int, bytes] = {}
    ordered = sorted(set(rows))
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        try:
            data = ref.read_exact(table.row_offset(ordered[i]), (j - i + 1) * table.row_bytes)
        except FailedRead as err:
            if failed is None:
                raise
            failed(err, ordered[i:j + 1])
            i = j + 1
            continue
        for n, row in enumerate(ordered[i:j + 1]):
            out[row] = data[n * table.row_bytes:(n + 1) * table.row_bytes]
        i = j + 1
    return out


@dataclass
class _Replay:
    table: RowTable
    reference: BufferedReader
    findings: _Findings
    options: RowsOptions
    stats: list[PathStats] = field(default_factory=list)
    #: The stages each read path ran, in order (every selected row went through each).
    ran: dict[str, dict[str, None]] = field(default_factory=dict)
    #: Per read path, the bytes its probe read at offset 0 when it opened (Reader.probed).
    probed: dict[str, int] = field(default_factory=dict)
    #: The verdict of the read that filled each row's cache entry with wrong bytes, for its hits to inherit.
    miss_verdicts: dict[int, RowMismatch] = field(default_factory=dict)
    #: Rows compared per read path: a path none of whose reads delivered a row compared nothing.
    compared: Counter[str] = field(default_factory=Counter)
    #: Rows whose reference read failed: not compared, and not tested for NaN (their bytes are unknown).
    unreadable: set[int] = field(default_factory=set)

    def _reference(self, rows: Sequence[int]) -> dict[int, bytes]:
        return _reference_rows(self.reference, self.table, rows, self._reference_failed)

    def _reference_failed(self, err: FailedRead, rows: list[int]) -> None:
        self.findings.failed("reference", [err])
        self.unreadable.update(rows)

    def _failed_reads(self, gatherer: Gatherer, stage: str) -> None:
        self.findings.failed(stage, gatherer.failures)
        gatherer.failures.clear()

    def _progress(self, mode: str, done: int, total: int) -> None:
        if self.options.progress is not None:
            self.options.progress(mode, done, total)

    def _stats(self, reader: Reader, stage: str, reads: int, nbytes: int, rows: int, started: float,
               buffers: int, cache: tuple[int, int, int] = (0, 0, 0)) -> None:
        a = reader.alignment
        self.stats.append(PathStats(mode=reader.mode, stage=stage, reads=reads, bytes=nbytes, rows=rows,
                                    seconds=time.perf_counter() - started, alignment=a.offset,
                                    alignment_source=a.source, buffers=buffers, cache_hits=cache[0],
                                    cache_misses=cache[1], cache_evictions=cache[2]))

    def check(self, samples: Iterable[Sample], ref: dict[int, bytes], mode: str, stage: str,
              suspects: dict[int, bytes] | None = None) -> None:
        """Compare with *ref*; a mismatch equal to a row of *suspects* (default: *ref*) is named as that row."""
        classifier = Classifier(self.table, self.reference, self.probed.get(mode, 0))
        batch = ref if suspects is None else suspects
        self.ran.setdefault(mode, {})[stage] = None
        for s in samples:
            want = ref.get(s.row)
            if want is None:        # its reference read failed: a read error, not compared
                continue
            self.compared[mode] += 1
            if s.data == want:
                if not s.as_stored:
                    self.miss_verdicts.pop(s.row, None)   # its cache entry (if any) got the right bytes
                continue
            got = s._replace(data=bytes(s.data))   # remade later, after a held buffer went back to the pool

            def remake(expected: bytes, got: Sample = got) -> RowMismatch:
                return classifier.mismatch(got, expected, mode, stage, batch=batch)

            made = self.findings.add(s.row, functools.partial(self._mismatch, classifier, got, ref[s.row], mode,
                                                              stage, batch), ref[s.row], bytes(got.data), remake)
            if made is not None and not (s.as_stored or s.via_cache):
                self.miss_verdicts[s.row] = made
            if self.findings.stop:
                return

    def _mismatch(self, classifier: Classifier, s: Sample, expected: bytes, mode: str, stage: str,
                  batch: dict[int, bytes]) -> RowMismatch:
        """A cache hit returning what its miss stored inherits the miss's verdict: the cache changed nothing."""
        miss = self.miss_verdicts.get(s.row) if s.as_stored else None
        if miss is not None:
            return dataclasses.replace(miss, stage=stage, detail=f"cached from a wrong read ({miss.stage}, "
                                                                 f"{miss.kind}): {miss.detail}")
        made = classifier.mismatch(s, expected, mode, stage, batch=batch)
        if s.as_stored:
            return dataclasses.replace(made, detail=f"cached from a wrong read: {made.detail}")
        return made

    def run_path(self, reader: Reader, rows: Sequence[int] | np.ndarray) -> None:
        batch = self.options.batch
        self.probed[reader.mode] = reader.probed
        self.miss_verdicts.clear()
        gatherer = Gatherer(reader, self.table.tensor.offset, self.table.row_bytes, self.options.workers,
                            pool_factory=self.options.pool_factory)
        caches: dict[str, tuple[RowCache, CacheLedger]] = {}
        started = time.perf_counter()
        try:
            for i in range(0, len(rows), batch):
                self._batch(gatherer, caches, _ints(rows[i:i + batch]))
                self._progress(reader.mode, min(len(rows), i + batch), len(rows))
                if self.findings.stop:
                    break
        finally:
            gatherer.close()
        self._stats(reader, "gather", gatherer.reads, gatherer.bytes, len(rows), started, gatherer.pool.created,
                    _cache_counts([c for c, _ in caches.values()]))

    def _cache(self, caches: dict[str, tuple[RowCache, CacheLedger]], name: str,
               capacity: int) -> tuple[RowCache, CacheLedger]:
        if name not in caches:
            cache = self.options.cache_factory(capacity, self.table)
            caches[name] = cache, CacheLedger(2 * cache.capacity + self.options.batch)
        return caches[name]

    def _batch(self, gatherer: Gatherer, caches: dict[str, tuple[RowCache, CacheLedger]],
               rows: Sequence[int]) -> None:
        ref = self._reference(rows)
        mode, cache_rows = gatherer.reader.mode, self.options.cache_rows

        def gather(stage: str) -> Callable[[Iterable[int]], list[Sample]]:
            def run(batch: Iterable[int]) -> list[Sample]:
                samples = gatherer.gather(batch)
                self.findings.short(mode, stage, gatherer.reader.path, gatherer.shortfalls)
                gatherer.shortfalls.clear()
                self._failed_reads(gatherer, stage)
                return samples
            return run

        self.check(gather("gather")(rows), ref, mode, "gather")
        if not cache_rows or self.findings.stop:
            return
        main, ledger = self._cache(caches, "main", cache_rows)
        for stage in ("cache-miss", "cache-hit"):
            self.check(through_cache(gather(stage), main, rows, ledger), ref, mode, stage)
        # Under pressure: a cache holding half the batch, gathered forwards then backwards.
        small, small_ledger = self._cache(caches, "pressure", max(1, min(cache_rows, len(rows) // 2)))
        for order in (rows, rows[::-1]):
            self.check(through_cache(gather("cache-pressure"), small, order, small_ledger), ref, mode,
                       "cache-pressure")

    def prefetch(self, reader: Reader, rows: Sequence[int] | np.ndarray) -> None:
        """Gather batch k+1 in the background while batch k's rows are still views into their read buffers,
        and compare batch k only once k+1 has landed, as an engine consumes a batch while prefetching the
        next. A buffer of batch k reused by k+1 too early then shows k+1's bytes: the row is reported
        misplaced, naming the row of k+1 it holds. Two batches of buffers are out of the pool at a time."""
        t, mode, size = self.table, reader.mode, self.options.batch
        gatherer = Gatherer(reader, t.tensor.offset, t.row_bytes, self.options.workers,
                            pool_factory=self.options.pool_factory)
        batches = [_ints(rows[i:i + size]) for i in range(0, len(rows), size)]
        started = time.perf_counter()
        held: Held | None = None
        try:
            with ThreadPoolExecutor(1) as ahead:
                held, ref = gatherer.hold(batches[0]), self._reference(batches[0])
                for k in range(len(batches)):
                    assert held is not None  # batch k landed before k+1 was asked for
                    following = ahead.submit(gatherer.hold, batches[k + 1]) if k + 1 < len(batches) else None
                    # Meanwhile, as an engine works on batch k, read the next batch's reference bytes.
                    ref_next = {} if following is None else self._reference(batches[k + 1])
                    landed = None if following is None else following.result()
                    self.findings.short(mode, "prefetch", reader.path, gatherer.shortfalls)
                    gatherer.shortfalls.clear()
                    self._failed_reads(gatherer, "prefetch")
                    self.check(held.samples, ref, mode, "prefetch", suspects={**ref_next, **ref})
                    gatherer.release(held)
                    held, ref = landed, ref_next
                    self._progress(mode, min(len(rows), (k + 1) * size), len(rows))
                    if self.findings.stop:
                        break
        finally:
            if held is not None:
                gatherer.release(held)
            gatherer.close()
        self._stats(reader, "prefetch", gatherer.reads, gatherer.bytes, len(rows), started, gatherer.pool.created)

    def sweep(self, reader: Reader) -> None:
        t = self.table
        self.probed[reader.mode] = reader.probed
        sweep = Sweep(reader, self.reference, t.tensor.offset, t.row_bytes, t.n_rows, self.options.workers)
        started = time.perf_counter()
        chunks = sweep.chunks()
        try:
            for chunk in chunks:
                self._sweep_chunk(chunk, reader.mode)
                self._progress(reader.mode, chunk.first + chunk.n_rows, t.n_rows)
                if self.findings.stop:
                    break
        finally:
            chunks.close()
        self._stats(reader, "sweep", sweep.reads, sweep.bytes, t.n_rows, started, sweep.pool.created)

    def _sweep_chunk(self, chunk: Chunk, mode: str) -> None:
        if chunk.shortfall is not None:
            self.findings.short(mode, "sweep", self.table.path, [chunk.shortfall])
        if chunk.failure is not None:
            stage, err = chunk.failure
            self.findings.failed(stage, [err])
            if stage == "reference":
                self.unreadable.update(range(chunk.first, chunk.first + chunk.n_rows))
            return
        self.compared[mode] += chunk.n_rows
        actual, expected = chunk.actual, chunk.expected
        if actual is None or expected is None:
            return
        rb = self.table.row_bytes
        a = np.frombuffer(actual, np.uint8).reshape(-1, rb)
        e = np.frombuffer(expected, np.uint8).reshape(-1, rb)
        classifier = Classifier(self.table, self.reference, self.probed.get(mode, 0))
        self.ran.setdefault(mode, {})["sweep"] = None
        for i in np.flatnonzero((a != e).any(axis=1)).tolist():
            sample = Sample(chunk.first + i, actual[i * rb:(i + 1) * rb], chunk.unlanded,
                            cut=chunk.shortfall is not None)
            want = expected[i * rb:(i + 1) * rb]
            self.findings.add(sample.row, functools.partial(classifier.mismatch, sample, want, mode, "sweep"),
                              want, bytes(sample.data), functools.partial(_remake, classifier, sample, mode, "sweep"))
            if self.findings.stop:
                return


def _remake(classifier: Classifier, sample: Sample, mode: str, stage: str, expected: bytes) -> RowMismatch:
    return classifier.mismatch(sample, expected, mode, stage)


def _ints(rows: Sequence[int] | np.ndarray) -> list[int]:
    """A batch of row IDs as Python ints: offsets worked out from them stay Python ints."""
    return rows.tolist() if isinstance(rows, np.ndarray) else list(rows)


def _cache_counts(caches: Sequence[RowCache]) -> tuple[int, int, int]:
    return sum(c.hits for c in caches), sum(c.misses for c in caches), sum(c.evictions for c in caches)


def compare_capture(capture: Capture, table: RowTable, reference: BufferedReader,
                    findings: _Findings) -> CaptureResult:
    """Each captured row against the file: raw bytes exactly, decoded values bit for bit (any NaN equals
    any NaN); the largest difference of decoded values is None (unbounded) once a NaN or Inf differs."""
    classifier = Classifier(table, reference)
    bad, worst, unbounded = 0, None, False
    previous: bytes | None = None  # the file's bytes of the row captured just before
    for i, row in _indexed_ids(capture.ids):
        try:
            expected = reference.read_exact(table.row_offset(row), table.row_bytes)
        except FailedRead as err:    # the file's bytes of this row are unknown: a read error, not compared
            findings.failed("capture", [err])
            previous = None
            continue
        findings.captured += 1
        form = captured(table, row, expected, np.asarray(capture.data[i]))
        worst = form.max_abs_diff if worst is None or (form.max_abs_diff or 0) > worst else worst
        if not form.same:
            bad += 1
            unbounded = unbounded or (form.unit == "values" and form.max_abs_diff is None)
            findings.add(row, functools.partial(classifier.classify, form, "capture", "capture", previous=previous))
        previous = expected
        if findings.stop:
            break
    return CaptureResult(file=capture.path, kind=capture.kind, dtype=str(capture.data.dtype), rows=len(capture.ids),
                         mismatched_rows=bad, max_abs_diff=None if unbounded else worst)


def _indexed_ids(ids: np.ndarray, chunk: int = 1 << 16) -> Iterator[tuple[int, int]]:
    """(index, row) of each captured ID as Python ints, a chunk at a time: a mapped capture of 100M
    rows is not turned into a list of 100M ints."""
    for start in range(0, len(ids), chunk):
        yield from enumerate(ids[start:start + chunk].tolist(), start)


# --- the library call ----------------------------------------------------------------------------

def check_rows(model: Target, rows: RowIds | None = None, *, tensor: str | None = None,
               modes: Sequence[str] = MODES, options: RowsOptions | None = None, select: RowSelection | None = None,
               against: str | os.PathLike[str] | tuple[Any, Any] | None = None,
               manifest: str | os.PathLike[str] | None = None) -> RowsReport:
    """Replay rows of *tensor* (default: per_layer_token_embd.weight, else token_embd.weight) through
    each read path in *modes*, and/or compare an engine's capture of gathered rows (*against*, a .npz or
    structured .npy, or an (ids, rows) pair of arrays already in memory) with the file.

    *rows* lists row IDs: a sequence of ints, a range or a 1-D integer array. *select* (a RowSelection)
    adds random or page-crossing rows, or sweeps every row; with neither, the capture's IDs are checked.
    *options* (RowsOptions) tunes the replay; with options.prefetch each path's gather is followed by a
    prefetch stage (see _Replay.prefetch).

    A mismatched row's right bytes are decided by *manifest* (a tensor manifest: the row group's digest)
    when given, else by agreement of independent read paths, else the reference (buffered) read stands;
    each mismatch says which decided (``reference``) and which paths delivered which bytes (``delivered``).
    """
    check_arg("tensor", tensor, (str, type(None)), "a string or None")
    check_arg("against", against, (str, os.PathLike, tuple, type(None)), "a path, an (ids, rows) pair or None")
    if isinstance(against, tuple) and len(against) != 2:
        raise UsageError(None, f"must be a path or an (ids, rows) pair, not a tuple of {len(against)}",
                         field="against")
    check_arg("manifest", manifest, (str, os.PathLike, type(None)), "a path or None")
    check_arg("options", options, (RowsOptions, type(None)), "a RowsOptions or None")
    check_arg("select", select, (RowSelection, type(None)), "a RowSelection or None")
    if isinstance(modes, (str, bytes)) or not isinstance(modes, Iterable):  # one name would become letters
        raise UsageError(None, f"must be a list of read paths, not {type(modes).__name__}", field="modes")
    opts, sel, modes = options or RowsOptions(), select or RowSelection(), tuple(modes)
    m = open_model(model)
    t = pick_tensor(m, tensor)
    _check_args(t, modes, opts, sel)
    if not modes and against is None:
        raise UsageError(None, "no read path, and no capture to compare (against): nothing to compare the file "
                               "with", field="modes")
    table = RowTable(t, os.path.getsize(t.path), opts.fp8)
    digest = None if manifest is None else manifest_groups(read_tensor_manifest(manifest), t, os.fspath(manifest))
    capture = None if against is None else capture_of(*against, table) if isinstance(against, tuple) else \
        load_capture(os.fspath(against), table, opts.capture_arrays)
    chooses = rows is not None or sel.all_rows or sel.random is not None or sel.page_crossing
    selection = select_rows(table, rows, sel, extra=capture.ids if capture is not None and not chooses else ())
    findings = _Findings(opts.fail_fast)
    warnings: list[str] = []
    factory = opts.reader_factory or open_reader
    with BufferedReader(t.path) as reference:
        replay = _Replay(table, reference, findings, opts)
        capture_result = compare_capture(capture, table, reference, findings) if capture is not None else None
        for mode in modes:
            if findings.stop:
                break
            _run_mode(replay, factory, mode, selection, warnings)
        _every_path_failed(replay, findings)
        decided = _settle(replay, digest)
        # Bytes delivered faithfully can still be NaN: the file's own values of the rows selected.
        nonfinite = NonFiniteRows(0, None) if findings.stop else nonfinite_rows(
            table, reference, _readable(table, selection.rows, replay.unreadable), decided)
    _check_unchanged(m, t)
    geometry = table_geometry(table) if selection.rows is None else rows_geometry(table, selection.rows)
    bad_geometry = rows_geometry(table, distinct(np.frombuffer(findings.rows, dtype=np.int64)))
    by_kind = tuple((k, findings.kinds[k]) for k in (*KINDS, UNCLASSIFIED) if findings.kinds[k])
    report = RowsReport(file=t.path, tensor=t.name, ggml_type=t.ggml_type.name, n_cols=t.n_cols, row_bytes=t.row_bytes,
                      n_rows=t.n_rows, table_offset=t.offset, choice=selection.choice,
                      modes=modes, rows_checked=table.n_rows if selection.rows is None else len(selection.rows),
                      geometry=geometry, mismatch_geometry=bad_geometry, mismatch_count=findings.count,
                      by_kind=by_kind, mismatches=tuple(findings.mismatches), short_reads=tuple(findings.short_reads),
                      short_read_count=findings.short_count, capture=capture_result, stats=tuple(replay.stats),
                      warnings=tuple(warnings), nonfinite_rows=nonfinite.rows, first_nonfinite=nonfinite.first,
                      finite_tested=nonfinite.tested,
                      read_errors=tuple(findings.failures), read_error_count=findings.failure_count)
    if not report.compared and report.ok:    # a check that compared nothing must not pass for a clean one
        raise NothingChecked(m.source, "nothing was compared: every read path was skipped ("
                             + "; ".join(report.warnings) + ")")
    return report


def _settle(replay: _Replay, digest: TensorDigest | None) -> dict[int, bytes]:
    """Each mismatched row's right bytes decided from every path's delivery, far sources named; the rows
    whose right bytes are not the reference read's. Past the cap (or a fail-fast stop) the deliveries of
    the rows not kept are unknown: those mismatches stay against the reference read."""
    f = replay.findings
    kept: list[Kept] = f.kept
    decided: dict[int, bytes] = {}
    if not f.stop and not f.kinds[UNCLASSIFIED]:
        groups = None if digest is None else RowGroups(digest, replay.reference)
        kept, decided = settled(kept, replay.ran, replay.table, replay.reference, replay.probed, groups)
    f.replace(far_named(kept, replay.table, replay.reference, replay.probed))
    return decided


def _every_path_failed(replay: _Replay, findings: _Findings) -> None:
    """Reads failed and not one row was compared on any path (nor a captured row): nothing was checked,
    so the result is the first failure (exit 2), not a report of findings."""
    if not findings.failure_count or findings.captured or any(replay.compared.values()):
        return
    first = findings.failures[0]
    paths = ", ".join(sorted({f.mode for f in findings.failures}))
    raise ReadError(first.file, f"every read failed ({paths}; first: {first.message}); no row was compared",
                    offset=first.offset)


def _readable(table: RowTable, rows: np.ndarray | None, unreadable: set[int]) -> np.ndarray | None:
    """The selected rows without those whose reference read failed (None: the whole table)."""
    if not unreadable:
        return rows
    left_out = np.fromiter(unreadable, np.int64)
    return np.setdiff1d(np.arange(table.n_rows, dtype=np.int64) if rows is None else rows, left_out)


def _run_mode(replay: _Replay, factory: ReaderFactory, mode: str, selection: Selection,
              warnings: list[str]) -> None:
    try:
        reader = factory(replay.table.path, mode)
    except DirectIOUnavailable as err:
        warnings.append(f"{mode}: skipped: {err}")
        log.info("%s", err)
        return
    except FailedRead as err:    # the direct path's probe read at open: this path fails, the others go on
        replay.findings.failed("open", [err])
        return
    with reader:
        if selection.rows is None:
            replay.sweep(reader)
        else:
            replay.run_path(reader, selection.rows)
            if replay.options.prefetch and not replay.findings.stop:
                replay.prefetch(reader, selection.rows)


def _check_args(t: Tensor, modes: Sequence[str], opts: RowsOptions, sel: RowSelection) -> None:
    unknown = [m for m in modes if m not in MODES]
    if unknown:
        raise UsageError(None, f"unknown read path {unknown[0]!r}; choose from {', '.join(MODES)}", field="modes")
    if opts.fp8 and t.ggml_type != GGMLQuantizationType.I8:
        raise UsageError(t.path, f"fp8 applies to I8 tables; this one is {t.ggml_type.name}", field=t.name)
    if len(t.shape) < 2 or t.row_bytes <= 0:
        raise UsageError(t.path, "not a table of rows (needs at least 2 dimensions)", field=t.name)
    if t.row_bytes > MAX_ROW_BYTES:
        raise UsageError(t.path, f"rows of {t.row_bytes} bytes are larger than the {MAX_ROW_BYTES} bytes a "
                                 "replay buffers per read", field=t.name)
    # A sweep of all rows streams the table in large chunks: no row cache, no prefetched batches.
    if sel.all_rows and opts.cache_rows:
        raise UsageError(None, "a sweep of all rows reads in large chunks, not through a row cache; use 0 or "
                               "choose rows", field="cache_rows")
    if sel.all_rows and opts.prefetch:
        raise UsageError(None, "a sweep of all rows reads in large chunks, not in prefetched batches; drop it or "
                               "choose rows", field="prefetch")


def _check_unchanged(m: Model, t: Tensor) -> None:
    """Read paths that disagree because the file was replaced or rewritten under them is not a read
    bug: say the file changed (exit 2) instead of reporting mismatches."""
    next(f for f in m.files if f.path == t.path).check_unchanged("while rows were read")
