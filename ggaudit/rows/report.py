"""What a replay of rows found, as data: the rows report (:class:`RowsReport`), its findings other than
mismatched rows (short and failed reads), how each path's stages read, and the boundary geometry of the rows
checked. Made by :func:`ggaudit.rows.replay.check_rows`; told in words here and by :mod:`ggaudit.rows.wording`."""

from __future__ import annotations

import dataclasses
import errno as errnos
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._version import __version__
from ..diagnostic import Artifact, Case, Diagnostic, Failure, Summary
from ..page import Block, Cell, FactTable, Heading, Legend, RowLane, RowStrip, Span, Table
from ..scan.report import CAUSE_OVERFLOW
from ..escaping import escape, escape_path
from ..wording import is_elements, joined, plural, verb
from ..evidence.paths import MODES
from ..io.shell import shell_word
from .classify import KINDS, UNCLASSIFIED, RowMismatch
from .finite import NonFiniteValue
from .row_decision import BUFFERED, REFERENCE_READ
from .wording import describe_row_mismatch, describe_row_mismatches, describe_unstable, published_text
from .reference_reads import Unstable
from .digest_proof import Proof
from ..evidence.readers import PAGE, SECTOR, WINDOW_64K, FailedRead
from .select import GivenIds, RowChoice, crossing_mask, crossing_rows_of, id_runs
from .table import RowTable

__all__ = ["BOUNDARIES", "CACHE_STAGES", "DIAGNOSTIC_KINDS", "SCHEMA", "CaptureResult", "Exercised", "Geometry",
           "PathStats", "ReadFailure", "RowsReport", "ShortRead", "geometry_of", "rows_geometry", "table_geometry"]

#: Boundaries a row may straddle: a 4 KiB page, a 512-byte sector, Windows' 64 KiB mmap granularity.
BOUNDARIES = (("page", PAGE), ("sector", SECTOR), ("64k", WINDOW_64K))


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


#: The stages that gather through a row cache; with ``prefetch``, the stages :class:`Exercised` speaks of.
CACHE_STAGES = ("cache-miss", "cache-hit", "cache-pressure")


@dataclass(frozen=True, kw_only=True)
class Exercised:
    """Whose row cache and buffer ring the cache and prefetch stages ran: ``ggaudit``'s own (RowsOptions'
    default factories: what a correct one delivers over these read paths on this machine, so a mismatch
    there is the read path's or ggaudit's, not the engine's cache's) or the ``caller``'s (its factories)."""

    stages: tuple[str, ...]   # those of CACHE_STAGES and prefetch that ran, in that order
    cache: str | None         # ggaudit | caller; None: no cache stage ran
    buffer_ring: str          # ggaudit | caller: the buffer pool every one of those stages reads into

    @property
    def text(self) -> str:
        return exercised_text(self)

    def to_json(self) -> dict[str, Any]:
        return {"stages": list(self.stages), "cache": self.cache, "buffer_ring": self.buffer_ring,
                "text": self.text}


#: The ``schema`` of :meth:`RowsReport.to_json`.
SCHEMA = "ggaudit/rows-report/1"
#: Every kind of diagnostic a rows report yields (ggaudit.kinds ids).
DIAGNOSTIC_KINDS = (*(f"rows/{k}" for k in (*KINDS, UNCLASSIFIED)), "rows/incomplete-read", "rows/read-error",
                    "rows/unstable-read", "rows/nonfinite")


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
    #: Selected rows of a float table not tested for NaN and Inf: their reads failed (see read_errors).
    finite_untested: int = 0
    #: Reads that failed (kept in full up to MAX_REPORTED; read_error_count counts every one).
    read_errors: tuple[ReadFailure, ...] = ()
    read_error_count: int = 0
    #: Whose cache and buffer ring the cache and prefetch stages ran (None: neither stage ran).
    exercised: Exercised | None = None
    #: What the file's published digest proved of the rows the read paths disputed (None: no row was disputed
    #: with nothing else to decide it, or nothing is published of the file).
    published: Proof | None = None
    #: Read paths that ran and compared no row: every read of theirs failed (their read errors say why).
    uncompared: tuple[str, ...] = ()
    #: Reference reads that delivered other bytes than the first read of the same rows (kept up to 1000;
    #: unstable_count counts every one): buffered reads of the file are not stable.
    unstable: tuple[Unstable, ...] = ()
    unstable_count: int = 0
    #: The tensor manifest given to decide rows (None: none was); its outcome is in each mismatch's detail.
    manifest: str | None = None
    #: The row IDs given (listed, or the capture's when they are the selection), repeats included, and those given
    #: more than once (None: no ID was given, the rows were only chosen); each distinct row is checked once.
    given_ids: GivenIds | None = None

    @property
    def undecided_rows(self) -> tuple[int, ...]:
        """The rows (of the mismatches kept) the reads delivered differently with nothing to decide which
        bytes are the file's: no manifest, no agreement of independent paths, no published digest."""
        return tuple(sorted({m.row for m in self.mismatches if undecided(m)}))

    @property
    def compared(self) -> tuple[str, ...]:
        """What was compared with the file: each read path that ran and delivered a row (not one whose every
        read failed: ``uncompared``), then "capture"."""
        ran = tuple(m for m in dict.fromkeys(s.mode for s in self.stats) if m not in self.uncompared)
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
        """Every read path (and the capture) gave the file's bytes: no mismatch, no short read, no failed read,
        no reference read that gave other bytes the second time."""
        return not (self.mismatch_count or self.short_read_count or self.read_error_count or self.unstable_count)

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
        for u in self.unstable:
            at = self.table_offset + u.row * self.row_bytes
            yield Diagnostic(kind="rows/unstable-read", message=describe_unstable(u, self.file, at), file=self.file,
                             offset=at, length=u.rows * self.row_bytes, tensor=self.tensor, row=u.row,
                             extras={"tensor": self.tensor, **u.to_json()})
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

    # What every reporter reads (ggaudit.diagnostic.Report): the wording is below.
    def summary(self, limit: int | None = None) -> Summary:
        return _summary(self)

    def cases(self) -> Iterator[Case]:
        return _cases(self)

    def page(self, limit: int | None = None) -> list[Block]:
        return _page(self)

    @property
    def repeated(self) -> bool:
        """An ID was given more than once (its row checked once)."""
        return self.given_ids is not None and self.given_ids.repeated_count > 0

    def _repeats_json(self) -> dict[str, Any]:
        """The IDs given, when one repeated (only then: every other report's JSON is as it was)."""
        return self.given_ids.to_json() if self.given_ids is not None and self.repeated else {}

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA, "tool_version": __version__, "ok": self.ok, "file": self.file, "tensor": self.tensor,
            "ggml_type": self.ggml_type, "n_cols": self.n_cols, "row_bytes": self.row_bytes, "n_rows": self.n_rows,
            "table_offset": self.table_offset, "selection": self.selection, "choice": self.choice.to_json(),
            "seed": self.seed,
            "modes": list(self.modes), "rows_checked": self.rows_checked, **self._repeats_json(),
            "compared": list(self.compared),
            "delivered": self.delivered, "geometry": self.geometry.to_json(),
            "mismatch_geometry": self.mismatch_geometry.to_json(), "mismatch_count": self.mismatch_count,
            "by_kind": dict(self.by_kind), "mismatches": [m.to_json() for m in self.mismatches],
            "short_read_count": self.short_read_count, "short_reads": [s.to_json() for s in self.short_reads],
            "capture": None if self.capture is None else self.capture.to_json(),
            "stats": [s.to_json() for s in self.stats], "warnings": list(self.warnings),
            "nonfinite_rows": self.nonfinite_rows,
            "first_nonfinite": None if self.first_nonfinite is None else self.first_nonfinite.to_json(),
            "finite_tested": self.finite_tested, "finite_untested": self.finite_untested,
            "read_error_count": self.read_error_count, "read_errors": [f.to_json() for f in self.read_errors],
            "exercised": None if self.exercised is None else self.exercised.to_json(),
            "published": None if self.published is None else self.published.to_json(),
            "uncompared": list(self.uncompared), "unstable_count": self.unstable_count,
            "unstable": [u.to_json() for u in self.unstable]}


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

# --- rows in words (RowsReport.summary, the diagnostics' messages) and as test cases ----------------------

#: Undecided rows named in the result line; runs of row IDs a next step's command lists.
ROWS_NAMED, RUNS_IN_A_STEP = 5, 20
#: Where the reader interface and the factories that run an engine's own reader, cache and pool are documented.
ENGINE_DOCS = "docs/rows.md#for-engine-developers"


def describe_short_read(s: ShortRead) -> str:
    return (f"short read: {s.mode} ({s.stage}) file {escape_path(s.file)}, offset {s.offset} (0x{s.offset:x}), "
            f"asked {plural(s.requested, 'byte')}, got {s.returned}, not at end of file")


def describe_read_failure(f: ReadFailure) -> str:
    why = f.error or "no errno"
    return (f"read error: {f.mode} ({f.stage}) file {escape_path(f.file)}, offset {f.offset} (0x{f.offset:x}), "
            f"{plural(f.length, 'byte')}: {why}; that read's rows were not compared, the other reads went on")


#: The diagnostics the text report says apart from the others: the mismatches (grouped by row), the rows
#: holding NaN or Inf (in the result line).
_SAID_APART = frozenset({*(f"rows/{k}" for k in KINDS), "rows/nonfinite"})


def undecided(m: RowMismatch) -> bool:
    """The reads of *m*'s row delivered different bytes and nothing decided which are the file's."""
    return m.reference == BUFFERED and len(m.delivered) > 1


def finite_text(r: RowsReport) -> str:
    """What the finiteness test found: the rows holding NaN or Inf, or that the rows tested hold none
    ("" when no row was tested: a table of integers, or a replay stopped early). The rows tested are the
    reference read's bytes where nothing decided another's: "in the file" only when every row is decided."""
    as_read = _as_read(r)
    if r.nonfinite_rows:
        return nonfinite_text(r) + as_read + _untested(r) + _undecided_text(r)
    if not r.finite_tested:
        return _untested(r).removeprefix("; ")
    n = r.finite_tested
    where = as_read or " in the file"
    if r.finite_untested:
        return f"{plural(n, 'row')} tested {'is' if n == 1 else 'are'} finite{where}" + _untested(r) + \
            _undecided_text(r)
    rows = "the selected row is" if n == 1 else f"the {n} selected rows are"
    return f"{rows} finite{where}" + _undecided_text(r)


def _as_read(r: RowsReport) -> str:
    """`` as the reference read, buffered and mmap delivered them``: the deliveries whose bytes of every
    undecided row were tested ("" when every row is decided: then they are the file's)."""
    tested = _tested_paths(r)
    if not tested:
        return ""
    them = "it" if r.finite_tested + r.finite_untested == 1 else "them"
    return f" as {joined([_delivery_name(p) for p in tested])} delivered {them}"


def _tested_paths(r: RowsReport) -> tuple[str, ...]:
    """The deliveries (the reference read, read paths) that held the tested bytes of every undecided row."""
    held: list[str] | None = None
    for m in r.mismatches:
        if undecided(m):
            paths = next((d.paths for d in m.delivered if REFERENCE_READ in d.paths), (REFERENCE_READ,))
            held = list(paths) if held is None else [p for p in held if p in paths]
    return tuple(held or ())


def _other_paths(r: RowsReport) -> tuple[str, ...]:
    """The read paths that delivered other bytes of an undecided row than those tested, in order met."""
    others: dict[str, None] = {}
    for m in r.mismatches:
        if undecided(m):
            others.update((p, None) for d in m.delivered if REFERENCE_READ not in d.paths for p in d.paths)
    return tuple(others)


def _delivery_name(name: str) -> str:
    return "the reference read" if name == REFERENCE_READ else name


def _undecided_text(r: RowsReport) -> str:
    """``; direct delivered other bytes of row 100, holding NaN/Inf (first at block 1, column 32), and nothing
    decides which are the file's`` ("" when every row is decided)."""
    rows = r.undecided_rows
    if not rows:
        return ""
    others = _other_paths(r)
    which = f"row {rows[0]}" if len(rows) == 1 else \
        f"{len(rows)} rows ({', '.join(map(str, rows[:ROWS_NAMED]))}{', ...' if len(rows) > ROWS_NAMED else ''})"
    bad = _nonfinite_deliveries([m for m in r.mismatches if undecided(m) and m.mode in others])
    held = ""
    if bad:
        first, n = bad[0], len({m.row for m in bad})
        place = _place(first, is_elements(r.ggml_type))
        held = f", holding NaN/Inf (first at {place})" if len(rows) == 1 else \
            f", holding NaN/Inf in {n} of them (first: row {first.row}, {place})"
    return f"; {joined(list(others))} delivered other bytes of {which}{held}, and nothing decides which are the file's"


def _nonfinite_deliveries(found: Sequence[RowMismatch]) -> list[RowMismatch]:
    """The mismatches whose delivered row holds NaN or Inf, by row."""
    return sorted((m for m in found if m.actual_nonfinite is not None), key=lambda m: m.row)


def _place(m: RowMismatch, elements: bool) -> str:
    p = m.actual_nonfinite
    assert p is not None
    return f"column {p.column}" if elements else f"block {p.block}, column {p.column}"


def next_step(r: RowsReport) -> str:
    """What decides the undecided rows, as commands that replay them ("" when every row is decided, or
    when both a manifest and the published digest were tried)."""
    rows = r.undecided_rows
    if not rows:
        return ""
    runs, every = id_runs(np.asarray(rows, dtype=np.int64), RUNS_IN_A_STEP)
    ids = ",".join(str(lo) if lo == hi else f"{lo}-{hi}" for lo, hi in runs)
    modes = "" if r.modes == MODES else f" --modes {','.join(r.modes)}"
    # Names are escaped for the terminal first, then quoted as one word each of the shell command.
    replay = f"ggaudit rows {shell_word(escape_path(r.file))} --tensor {shell_word(escape(r.tensor))} " \
             f"--ids {ids}{modes}"
    ways = []
    if r.published is None:
        ways.append(f"give the file's published sha256 (`{replay} --sha256 HEX`)")
    if r.manifest is None:
        ways.append("make a tensor manifest where the model works (`ggaudit manifest MODEL -o model.manifest.json` "
                    f"there) and replay the rows against it here (`{replay} --manifest model.manifest.json`)")
    if not ways:
        return ""
    listed = "" if every else f" (the commands list the first {RUNS_IN_A_STEP} runs of them)"
    return f"to decide which bytes of {plural(len(rows), 'row')} are the file's{listed}, {' or '.join(ways)}"


def _untested(r: RowsReport) -> str:
    n = r.finite_untested
    return f"; {plural(n, 'selected row')} not tested for NaN/Inf (their reads failed)" if n else ""


def nonfinite_text(r: RowsReport) -> str:
    f = r.first_nonfinite
    rows = f"{r.nonfinite_rows} selected row{'s hold' if r.nonfinite_rows != 1 else ' holds'} non-finite values"
    if f is None:
        return rows
    where = f"column {f.column}" if f.field == "value" else \
        f"block {f.block}, column {f.column}, field {escape(f.field)}"
    how = f"{f.bits} {f.kind}" + (", which overflows when decoded" if f.cause == CAUSE_OVERFLOW else "")
    return f"{rows} (first: row {f.row}, {where} = {how}, offset {f.offset})"


def exercised_text(e: Exercised) -> str:
    """Whose row cache and buffer ring the cache and prefetch stages ran, in one sentence: ggaudit's own
    show what correct ones deliver over these read paths, not what the engine's cache does; the caller's
    (RowsOptions' cache_factory, pool_factory) are said to be the caller's."""
    stages = ("the cache and prefetch stages" if "prefetch" in e.stages else "the cache stages") if e.cache \
        else "the prefetch stage"
    parts = ([("row cache", e.cache)] if e.cache else []) + [("buffer ring", e.buffer_ring)]
    theirs = [name for name, owner in parts if owner == "caller"]
    ours = [name for name, owner in parts if owner == "ggaudit"]
    whose = " and ".join(([f"the caller's {' and '.join(theirs)}"] if theirs else [])
                         + ([f"ggaudit's own {' and '.join(ours)}"] if ours else []))
    if not ours:
        return f"{stages} ran {whose}"
    if theirs:
        return f"{stages} ran {whose} (ggaudit's: what a correct one delivers, not the engine's)"
    correct = "what correct ones deliver" if len(ours) > 1 else "what a correct one delivers"
    return f"{stages} ran {whose}: {correct} over these read paths on this machine, not the engine's (to run " \
           f"its own: {ENGINE_DOCS})"


def _summary(r: RowsReport) -> Summary:
    extra = {} if r.exercised is None else {"exercised": r.exercised.to_json()}   # only when those stages ran
    if r.published is not None:     # only when the published digest was asked to decide disputed rows
        extra["published"] = r.published.to_json()
    counted = {"tensor": r.tensor, "mismatches": r.mismatch_count, "listed": len(r.mismatches),
               "not_listed": r.mismatch_count - len(r.mismatches), "short_reads": r.short_read_count,
               "short_reads_listed": len(r.short_reads), "nonfinite_rows": r.nonfinite_rows, **extra}
    verdict = _result(r).removeprefix("result: ")
    return Summary(headline=f"rows {escape_path(r.file)}, tensor {escape(r.tensor)}: {verdict}",
                   lines=tuple(_lines(r)), files=(Artifact(path=r.file),), counted=counted,
                   seconds=sum(s.seconds for s in r.stats), warnings=r.warnings)


def _geometry(g: Geometry) -> str:
    return f"4096-byte page {g.page}, 512-byte sector {g.sector}, 64 KiB {g.window_64k}"


def _lines(r: RowsReport) -> list[str]:
    lines = [f"file {escape_path(r.file)}",
             f"tensor {escape(r.tensor)}: {r.ggml_type}, {plural(r.n_cols, 'column')}, {r.row_bytes}-byte rows, "
             f"{plural(r.n_rows, 'row')} at offset {r.table_offset}",
             f"rows: {r.rows_checked} ({escape(r.selection)}); crossing: {_geometry(r.geometry)}",
             *_repeats_line(r)]
    for s in r.stats:
        cache = (f", cache {plural(s.cache_hits, 'hit')} / {plural(s.cache_misses, 'miss', 'misses')} / "
                 f"{plural(s.cache_evictions, 'eviction')}" if s.cache_hits or s.cache_misses else "")
        lines.append(f"{s.mode} ({s.stage}): {plural(s.rows, 'row')}, {plural(s.reads, 'read')}, "
                     f"{plural(s.bytes, 'byte')}, alignment {s.alignment} ({s.alignment_source}), "
                     f"{plural(s.buffers, 'buffer')}{cache}, {s.seconds:.3f} s")
    if r.exercised is not None:
        lines.append(f"note: {r.exercised.text}")
    if r.published is not None:
        lines.append(f"published: {published_text(r.published)}")
    lines.extend(f"warning: {w}" for w in r.warnings)
    if r.capture is not None:
        lines.append(_capture_line(r.capture))
    # The mismatches kept, a row's stages together; then the short, failed and unstable reads kept. The rows
    # holding NaN or Inf are said in the result line.
    lines.extend(describe_row_mismatches(r.mismatches, elements=is_elements(r.ggml_type)))
    lines.extend(line for d in r.diagnostics() if d.kind not in _SAID_APART for line in d.lines)
    lines.extend(_not_shown(r))
    step = next_step(r)
    if step:
        lines.append(f"next: {step}")
    lines.append(_result(r))
    return lines


def _repeats_line(r: RowsReport) -> list[str]:
    """``ids: 11 given, 10 distinct; given more than once: 3 (each row is checked once)``, when an ID repeated."""
    said = repeats_text(r)
    return [f"ids: {said} (each row is checked once)"] if said else []


def repeats_text(r: RowsReport) -> str:
    """``11 given, 10 distinct; given more than once: 3`` (the first MAX_REPEATED named); "" when no ID repeated."""
    g = r.given_ids
    if g is None or not r.repeated:
        return ""
    more = g.repeated_count - len(g.repeated)
    named = ", ".join(map(str, g.repeated)) + (f" and {more} more" if more else "")
    return f"{g.count} given, {g.distinct} distinct; given more than once: {named}"


def _capture_line(c: CaptureResult) -> str:
    diff = f", max abs diff {c.max_abs_diff:g}" if c.max_abs_diff is not None else ""
    if c.kind == "decoded" and c.max_abs_diff is None and c.mismatched_rows:
        diff = ", max abs diff unbounded (a NaN or Inf differs)"
    return (f"capture {escape_path(c.file)}: {c.rows} {c.kind} {'row' if c.rows == 1 else 'rows'} "
            f"({c.dtype}), {c.mismatched_rows} {verb(c.mismatched_rows)}{diff}")


def _not_shown(r: RowsReport) -> Iterator[str]:
    """How many of each sort of finding were counted beyond those kept."""
    if r.mismatch_count > len(r.mismatches):
        more = r.mismatch_count - len(r.mismatches)
        yield f"... {plural(more, 'more mismatch', 'more mismatches')} not shown"
    if r.short_read_count > len(r.short_reads):
        yield f"... {plural(r.short_read_count - len(r.short_reads), 'more short read')} not shown"
    if r.read_error_count > len(r.read_errors):
        yield f"... {plural(r.read_error_count - len(r.read_errors), 'more read error')} not shown"
    if r.unstable_count > len(r.unstable):
        yield f"... {plural(r.unstable_count - len(r.unstable), 'more unstable read')} not shown"


def _result(r: RowsReport) -> str:
    """The verdict: what delivered the file's bytes (or how many did not), then whether the rows
    themselves hold non-finite values."""
    if not r.compared:
        verdict = "nothing compared: every read path was skipped"
    elif r.delivered:
        verdict = _delivered(r)
    else:
        kinds = ", ".join(f"{k} {n}" for k, n in r.by_kind) or "none"
        failed = f", {plural(r.read_error_count, 'failed read')}" if r.read_error_count else ""
        failed += f", {plural(r.unstable_count, 'unstable read')}" if r.unstable_count else ""
        verdict = (f"{plural(r.mismatch_count, 'mismatch', 'mismatches')} ({kinds}), "
                   f"{plural(r.short_read_count, 'short read')}{failed}; mismatched rows crossing: "
                   f"{_geometry(r.mismatch_geometry)}")
    finite = finite_text(r) if r.compared else ""
    verdict += f"; {finite}" if finite else ""
    return f"result: {'clean: ' if r.ok and r.compared else ''}{verdict}"


def _delivered(r: RowsReport) -> str:
    if r.capture is None:
        return "every path delivered the file's bytes"
    if not r.stats:
        rows = "its 1 row" if r.capture.rows == 1 else f"all {r.capture.rows} rows"
        return f"the capture matched the file in {rows} (no read path run)"
    return "every path and the capture delivered the file's bytes"


def _cases(r: RowsReport) -> Iterator[Case]:
    """A case per read path and stage that ran (and the capture), then the table's values."""
    seconds: dict[tuple[str, str], float] = {}
    for s in r.stats:
        seconds[(s.mode, s.stage)] = seconds.get((s.mode, s.stage), 0.0) + s.seconds
    if r.capture is not None:
        seconds.setdefault(("capture", "capture"), 0.0)
    by_path: dict[tuple[str, str], list[Diagnostic]] = {}
    nonfinite: list[Diagnostic] = []
    for d in r.diagnostics():      # mismatches and short reads name their read path and stage
        if d.kind == "rows/nonfinite":
            nonfinite.append(d)
        else:
            by_path.setdefault((d.extras["mode"], d.extras["stage"]), []).append(d)
    group = f"{escape_path(r.file)}: {escape(r.tensor)}"
    for key in dict.fromkeys([*seconds, *by_path]):
        mode, stage = key
        yield Case(group=group, name=mode if mode == stage else f"{mode} ({stage})", seconds=seconds.get(key, 0.0),
                   failure=Failure.of(by_path[key]) if key in by_path else None)
    yield Case(group=group, name="finite values", failure=Failure.of(nonfinite) if nonfinite else None)


# --- rows on a page (RowsReport.page) ---------------------------------------------------------------------

def _page(r: RowsReport) -> list[Block]:
    facts = [("file", escape_path(r.file)), ("tensor", f"{escape(r.tensor)} ({r.ggml_type})"),
             ("table", f"{r.n_rows} rows of {r.row_bytes} bytes ({r.n_cols} columns) at offset {r.table_offset}"),
             ("rows checked", f"{r.rows_checked} ({escape(r.selection)})"
                              + (f"; IDs {repeats_text(r)}" if r.repeated else "")),
             ("compared", ", ".join(r.compared) or "nothing"),
             ("mismatches", f"{r.mismatch_count} in rows; short reads {r.short_read_count}"),
             ("rows holding NaN/Inf", _nonfinite_count(r) + _as_read(r))]
    delivered = _delivered_nonfinite(r)
    if delivered:
        facts.append(("NaN/Inf delivered", delivered))
    if r.exercised is not None:
        facts.append(("cache and buffer ring", r.exercised.text))
    if r.published is not None:
        facts.append(("published digest", published_text(r.published)))
    out: list[Block] = [Heading(text="Summary"), FactTable(rows=tuple(facts)), Heading(text="Rows"), _strip(r)]
    if r.stats:
        out += [Heading(text="Read paths"), Table(
            head=("path", "stage", "rows", "reads", "bytes", "alignment", "seconds"),
            rows=((Cell(text=s.mode), Cell(text=s.stage), Cell.number(s.rows), Cell.number(s.reads),
                   Cell.number(s.bytes), Cell(text=f"{s.alignment} ({s.alignment_source})"),
                   Cell(text=f"{s.seconds:.3f}", css="num")) for s in r.stats), total=len(r.stats), what="read paths")]
    if r.mismatches:
        out += [Heading(text="Mismatches"), Table(
            head=("path", "stage", "row", "kind", "offset", "block", "column", "expected", "actual"),
            rows=((Cell(text=m.mode), Cell(text=m.stage), Cell.number(m.row), Cell(text=m.kind), Cell.number(m.offset),
                   Cell.number(m.block), Cell.number(m.column), Cell(text=escape(m.expected[:64]), css="mono"),
                   Cell(text=escape(m.actual[:64]), css="mono")) for m in r.mismatches),
            total=r.mismatch_count, what="mismatches")]
    return out


def _nonfinite_count(r: RowsReport) -> str:
    """Of the rows tested for NaN and Inf: a 0 alone would read as tested and finite."""
    untested = f"; {r.finite_untested} not tested (their reads failed)" if r.finite_untested else ""
    if not r.finite_tested:
        return "not tested" + untested
    return f"{r.nonfinite_rows} of {r.finite_tested} tested{untested}"


def _delivered_nonfinite(r: RowsReport) -> str:
    """The rows each read path (or the capture) delivered holding NaN or Inf where they differ from the
    tested bytes, and whether those deliveries are the file's bytes ("" when none did)."""
    by_mode: dict[str, list[RowMismatch]] = {}
    for m in _nonfinite_deliveries(r.mismatches):
        by_mode.setdefault(m.mode, []).append(m)
    said = []
    elements = is_elements(r.ggml_type)
    for mode, found in sorted(by_mode.items(), key=lambda item: MODES_ORDER.get(item[0], len(MODES_ORDER))):
        first, n = found[0], len({m.row for m in found})
        said.append(f"{mode} delivered {plural(n, 'row')} holding NaN/Inf (first: row {first.row}, "
                    f"{_place(first, elements)}): {_whose(found, n)}")
    kept = f" (of the {len(r.mismatches)} mismatches kept)" if r.mismatch_count > len(r.mismatches) else ""
    return "; ".join(said) + (kept if said else "")


#: The order read paths are said in, then the capture.
MODES_ORDER = {name: i for i, name in enumerate((*MODES, "capture"))}


def _whose(found: Sequence[RowMismatch], n_rows: int) -> str:
    """Whether the deliveries *found* (one path's, of *n_rows* rows) are the file's bytes, by what decided
    their rows."""
    they = "it is" if n_rows == 1 else "they are"
    return "; ".join(dict.fromkeys(_whose_one(m, they) for m in found))


def _whose_one(m: RowMismatch, they: str) -> str:
    if undecided(m):
        return f"nothing decides whether {they} the file's bytes"
    if m.reference != BUFFERED:
        return f"not the file's bytes (decided by {m.reference})"
    # The paths' own reads of the row agreed and a later stage (a cache) delivered others; or a capture.
    return "other bytes than expected"


def _strip(r: RowsReport) -> RowStrip:
    """The table's rows: those checked, those crossing a page or a sector, and each mismatching row."""
    checked = r.checked_ranges
    lanes = [RowLane(name="checked" if checked is not None else "checked (not located)", css="checked",
                     what="checked", ranges=checked or ())]
    for name, css, boundary in (("4096-byte page", "page", PAGE), ("512-byte sector", "sector", SECTOR)):
        lanes.append(RowLane(name=f"crosses a {name}", css=css, what=f"some cross a {name}",
                             pieces=r.crossing_rows(boundary)))
    lanes.append(RowLane(name="mismatch", css="mismatch", what="mismatch"))
    by_row: dict[int, list[RowMismatch]] = {}
    for m in r.mismatches:
        by_row.setdefault(m.row, []).append(m)
    marks = tuple(Span(row, 1, "mismatch", "\n".join(describe_row_mismatches(found)))
                  for row, found in sorted(by_row.items()))
    legend = Legend(items=(("checked", "checked"), ("page", "crosses a 4096-byte page"),
                           ("sector", "crosses a 512-byte sector"), ("mismatch", "mismatch")))
    return RowStrip(n_rows=r.n_rows, lanes=tuple(lanes), marks=marks, label=f"rows of {escape(r.tensor)}",
                    legend=legend)
