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
import functools
import logging
import os
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..format.blocks import GGMLQuantizationType
from ..errors import NothingChecked, ReadError, UsageError, check_arg
from ..format.layout import Model, Tensor
from ..stores.locate import Target, open_model, target_text
from ..stores.published_digest import PublishedDigest, given_sha256, published_digest
from ..arrays import distinct
from . import MODES
from ..evidence.paths import Mode
from ..evidence.readers import BufferedReader, DirectIOUnavailable, FailedRead, Reader, open_reader
from .table import RowTable
from .gather import BufferPool, CacheLedger, Chunk, Gatherer, Held, RowCache, Sample, Sweep, through_cache
from .classify import KINDS, UNCLASSIFIED, Classifier, Delivery, Filled, RowMismatch, captured
from .finite import NonFiniteRows, NonFiniteValue, nonfinite_rows
from .findings import Findings
from .reference_reads import FirstReads
from .options import ReaderFactory, ReadPathProgress, RowsOptions, default_cache
from .report import (CACHE_STAGES, CaptureResult, Exercised, Geometry, PathStats, ReadFailure, RowsReport,
                     ShortRead, geometry_of, rows_geometry, table_geometry)
from .digest_proof import Proof, prove_rows
from .recompare import RowGroups, Settled, name_far_sources, manifest_groups, settled
from ..verify.manifests.tensor import TensorDigest, read_tensor_manifest
from .select import (Capture, GivenIds, RowChoice, RowIds, RowSelection, Selection, capture_of, crosses,
                     crossing_rows, crossing_rows_of, load_capture, select_rows)

__all__ = [
    "KINDS",
    "CaptureResult",
    "Classifier",
    "Delivery",
    "Exercised",
    "Filled",
    "Geometry",
    "GivenIds",
    "NonFiniteValue",
    "PathStats",
    "ReadFailure",
    "ReadPathProgress",
    "ReaderFactory",
    "RowCache",
    "RowChoice",
    "RowMismatch",
    "RowSelection",
    "RowsOptions",
    "RowsReport",
    "Selection",
    "ShortRead",
    "check_rows",
    "crosses",
    "crossing_rows",
    "crossing_rows_of",
    "geometry_of",
    "load_capture",
    "pick_tensor",
    "rows_geometry",
    "select_rows",
    "table_geometry",
]

log = logging.getLogger(__name__)

DEFAULT_TENSORS = ("per_layer_token_embd.weight", "token_embd.weight")
#: Rows larger than this are not replayed: every worker holds a few rows' worth of buffers.
MAX_ROW_BYTES = 64 << 20


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


# --- the replay ----------------------------------------------------------------------------------

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
    findings: Findings
    options: RowsOptions
    #: Each selected row's first reference read, which every path is compared with (ggaudit.rows.reference_reads).
    first: FirstReads
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
    #: The mapping reference reads fall back to where a buffered read fails (opened when first needed).
    mapped: Reader | None = None
    #: The threads every path's sweep reads in (started by the first sweep).
    sweeping: ThreadPoolExecutor | None = None

    def _reference(self, rows: Sequence[int]) -> dict[int, bytes]:
        """The reference bytes of *rows*: each row's first reference read (read now for those not kept). Rows
        whose buffered read fails are read through a mapping instead (the page cache's other way in), so a
        buffered path failing does not leave the other paths with nothing to be compared with."""
        listed, lost = list(rows), list[int]()
        read = _reference_rows(self.reference, self.table, self.first.wanted(listed),
                               functools.partial(self._reference_failed, lost=lost))
        read.update(self._mapped_rows(lost))
        return self.first.of(listed, self.first.taken(read))

    def _reference_failed(self, err: FailedRead, rows: list[int], lost: list[int]) -> None:
        self.findings.failed("reference", [err])
        lost.extend(rows)

    def _mapped_rows(self, rows: list[int]) -> dict[int, bytes]:
        """*rows* read through a read-only mapping; those it cannot read either are unreadable (the buffered
        reference read's failure is the finding: the mapping's own is not said again)."""
        got: dict[int, bytes] = {}
        rb = self.table.row_bytes
        for row in rows:
            try:
                if self.mapped is None:
                    self.mapped = open_reader(self.table.path, "mmap")
                buf = bytearray(rb)
                with memoryview(buf) as view:
                    if self.mapped.read_into(view, self.table.row_offset(row)) == rb:
                        got[row] = bytes(buf)
            except ReadError:
                pass
            if row not in got:
                self.unreadable.add(row)
        return got

    def close(self) -> None:
        if self.sweeping is not None:
            self.sweeping.shutdown()
            self.sweeping = None
        if self.mapped is not None:
            self.mapped.close()
            self.mapped = None

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
        classifier = Classifier(self.table, self.reference, self.probed.get(mode, 0),
                                self.findings.failing("classify"))
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
        if self.sweeping is None:
            self.sweeping = ThreadPoolExecutor(self.options.workers)
        sweep = Sweep(reader, self.reference, t.tensor.offset, t.row_bytes, t.n_rows, self.options.workers,
                      first=self.first.chunks, threads=self.sweeping)
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
        if chunk.reference is not None:
            self.first.chunk(chunk.first, chunk.n_rows, chunk.reference)
        actual, expected = chunk.actual, chunk.expected
        if actual is None or expected is None:
            return
        rb = self.table.row_bytes
        a = np.frombuffer(actual, np.uint8).reshape(-1, rb)
        e = np.frombuffer(expected, np.uint8).reshape(-1, rb)
        classifier = Classifier(self.table, self.reference, self.probed.get(mode, 0),
                                self.findings.failing("classify"))
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


def compare_capture(capture: Capture, table: RowTable, reference: BufferedReader, findings: Findings,
                    decided: Mapping[int, bytes]) -> CaptureResult:
    """Each captured row against the file: raw bytes exactly, decoded values bit for bit (any NaN equals
    any NaN); the largest difference of decoded values is None (unbounded) once a NaN or Inf differs. The
    file's bytes of a row are *decided*'s when the replay found the reference read of it wrong."""
    classifier = Classifier(table, reference, failed=findings.failing("classify"))
    bad, worst, unbounded = 0, None, False
    previous: bytes | None = None  # the file's bytes of the row captured just before
    for i, row in _indexed_ids(capture.ids):
        try:
            expected = decided[row] if row in decided else reference.read_exact(table.row_offset(row),
                                                                                 table.row_bytes)
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
               modes: Sequence[Mode] = MODES, options: RowsOptions | None = None, select: RowSelection | None = None,
               against: str | os.PathLike[str] | tuple[Any, Any] | None = None,
               manifest: str | os.PathLike[str] | None = None,
               published: str | PublishedDigest | None = None) -> RowsReport:
    """Replay rows of *tensor* (default: per_layer_token_embd.weight, else token_embd.weight) through
    each read path in *modes*, and/or compare an engine's capture of gathered rows (*against*, a .npz or
    structured .npy, or an (ids, rows) pair of arrays already in memory) with the file.

    *rows* lists row IDs: a sequence of ints, a range or a 1-D integer array. *select* (a RowSelection)
    adds random or page-crossing rows, or sweeps every row; with neither, the capture's IDs are checked.
    *options* (RowsOptions) tunes the replay; with options.prefetch each path's gather is followed by a
    prefetch stage (see _Replay.prefetch).

    A mismatched row's right bytes are decided by *manifest* (a tensor manifest: the row group's digest)
    when given, else by agreement of independent read paths, else by the file's published digest (whole-file
    reads through each path until one gives it: ggaudit.rows.digest_proof), else the reference (buffered) read
    stands; each mismatch says which decided (``reference``) and which paths delivered which bytes
    (``delivered``). The published digest is *published* (a sha256 as 64 hex digits, or a PublishedDigest),
    else what the store *model* names publishes of the table's file, else the sha256 its blob name gives.
    A capture's rows are compared with the rows' decided bytes.

    Raises:
        UsageError: an argument of the wrong type or value (row IDs outside the table, an unknown read path in
            *modes*, no read path and no capture), a *tensor* the model lacks or that is no table of rows, a
            capture that cannot be read. Its subclass NothingChecked: a selection of no row, or every read path
            skipped.
        FormatError: a file that is no well-formed GGUF or split set (naming the offset and the field).
        ReadError: the model cannot be opened or read, or changed while it was read, or every read of the rows
            failed. One the OS refused is also the standard exception of that error (``FileNotFoundError``,
            ``PermissionError``, else ``OSError``, with ``errno``, ``strerror`` and ``filename``).
        ManifestError: *manifest* cannot be read, is malformed, or does not describe this table; one the OS
            refused is also the standard exception, as above.
    """
    check_arg("tensor", tensor, (str, type(None)), "a string or None")
    check_arg("against", against, (str, os.PathLike, tuple, type(None)), "a path, an (ids, rows) pair or None")
    if isinstance(against, tuple) and len(against) != 2:
        raise UsageError(None, f"must be a path or an (ids, rows) pair, not a tuple of {len(against)}",
                         field="against")
    check_arg("manifest", manifest, (str, os.PathLike, type(None)), "a path or None")
    check_arg("published", published, (str, PublishedDigest, type(None)), "a sha256, a PublishedDigest or None")
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
    known = _published(model, t.path, published)
    capture = None if against is None else capture_of(*against, table) if isinstance(against, tuple) else \
        load_capture(os.fspath(against), table, opts.capture_arrays)
    chooses = rows is not None or sel.all_rows or sel.random is not None or sel.page_crossing
    selection = select_rows(table, rows, sel, extra=capture.ids if capture is not None and not chooses else ())
    findings = Findings(opts.fail_fast)
    warnings: list[str] = []
    factory = opts.reader_factory or open_reader
    with BufferedReader(t.path) as reference:
        replay = _Replay(table, reference, findings, opts, FirstReads(selection.rows))
        try:
            for mode in modes:
                if findings.stop:
                    break
                _run_mode(replay, factory, mode, selection, warnings)
        finally:
            replay.close()
        settled_rows = _settle(replay, digest, None if known is None else functools.partial(
            prove_rows, table, known, modes=(*replay.ran, "buffered"), open_path=factory, progress=opts.progress))
        decided = settled_rows.decided
        capture_result = None if capture is None or findings.stop else \
            compare_capture(capture, table, reference, findings, {**replay.first.kept, **decided})
        _every_path_failed(replay, findings)
        # Bytes delivered faithfully can still be NaN: the file's own values of the rows selected.
        nonfinite = NonFiniteRows(0, None) if findings.stop else nonfinite_rows(
            table, reference, _readable(table, selection.rows, replay.unreadable), decided,
            findings.failing("nonfinite"), len(replay.unreadable))
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
                      finite_tested=nonfinite.tested, finite_untested=nonfinite.untested,
                      read_errors=tuple(findings.failures), read_error_count=findings.failure_count,
                      published=settled_rows.proof,
                      uncompared=tuple(m for m in dict.fromkeys(s.mode for s in replay.stats)
                                       if not replay.compared[m]),
                      unstable=tuple(replay.first.unstable), unstable_count=replay.first.unstable_count,
                      exercised=_exercised(replay), manifest=None if manifest is None else os.fspath(manifest),
                      given_ids=selection.given)
    if not report.compared and report.ok:    # a check that compared nothing must not pass for a clean one
        raise NothingChecked(m.source, "nothing was compared: every read path was skipped ("
                             + "; ".join(report.warnings) + ")")
    return report


def _settle(replay: _Replay, digest: TensorDigest | None, prove: Callable[[Sequence[int]], Proof] | None) -> Settled:
    """Each mismatched row's right bytes decided from every path's delivery (and the manifest's *digest*, the
    published digest's *prove*), far sources named. Past the cap (or a fail-fast stop) the deliveries of
    the rows not kept are unknown: those mismatches stay against the reference read."""
    f = replay.findings
    done = Settled(f.kept, {})
    if not f.stop and not f.kinds[UNCLASSIFIED]:
        groups = None if digest is None else RowGroups(digest, replay.reference, f.failing("manifest"))
        done = settled(f.kept, replay.ran, replay.table, replay.reference, replay.probed, groups, prove,
                       f.failing("classify"))
    f.replace(name_far_sources(done.kept, replay.table, replay.reference, replay.probed, f.failing("far-search")))
    return done


def _published(model: Target, path: str, given: str | PublishedDigest | None) -> PublishedDigest | None:
    """The table's file's published digest: *given* (a sha256's 64 hex digits), else what the store *model*
    names keeps of it, else its blob name's sha256."""
    if isinstance(given, PublishedDigest):
        return given
    if given is not None:
        return given_sha256(given, "published")
    return published_digest(None if isinstance(model, Model) else target_text(model, "model"), path)


def _every_path_failed(replay: _Replay, findings: Findings) -> None:
    """Reads failed and not one row was compared on any path (nor a captured row): nothing was checked,
    so the result is the first failure (exit 2), not a report of findings."""
    if not findings.failure_count or findings.captured or any(replay.compared.values()):
        return
    first = findings.failures[0]
    paths = ", ".join(sorted({f.mode for f in findings.failures}))
    raise ReadError(first.file, f"every read failed ({paths}; first: {first.message}); no row was compared",
                    offset=first.offset)


def _exercised(replay: _Replay) -> Exercised | None:
    """Whose cache and buffer ring the cache and prefetch stages that ran used (None: neither ran)."""
    ran = {stage for stages in replay.ran.values() for stage in stages}
    stages = tuple(s for s in (*CACHE_STAGES, "prefetch") if s in ran)
    if not stages:
        return None
    opts = replay.options
    owner = {True: "ggaudit", False: "caller"}
    cache = owner[opts.cache_factory is default_cache] if set(stages) & set(CACHE_STAGES) else None
    return Exercised(stages=stages, cache=cache, buffer_ring=owner[opts.pool_factory is BufferPool])


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
