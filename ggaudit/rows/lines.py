"""The lines of rows' findings (mismatched rows, short reads, rows that hold NaN or Inf), as the text
report prints them and :meth:`RowsReport.diagnostics` says them."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..lines import plural
from ..scan.report import CAUSE_OVERFLOW
from ..text import escape, escape_path

if TYPE_CHECKING:
    from .classify import RowMismatch
    from .reference_reads import Unstable
    from .published_digest import Proof
    from .report import Exercised, ReadFailure, RowsReport, ShortRead

__all__ = ["ENGINE_DOCS", "describe_read_failure", "describe_row_mismatch", "describe_short_read", "describe_unstable",
           "exercised_text", "finite_text", "nonfinite_text", "published_text"]

#: Where the reader interface and the factories that run an engine's own reader, cache and pool are documented.
ENGINE_DOCS = "docs/rows.md#for-engine-developers"


def published_text(proof: Proof) -> str:
    """What the published digest decided of the rows the read paths disputed, in a line."""
    p, rows = proof.published, plural(len(proof.disputed), "disputed row")
    if proof.mode is not None:
        return f"{escape(p.what)} decides {rows}: the whole file read through {proof.mode} gives its {p.algorithm}"
    return f"{escape(p.what)} decides none of {rows}: no whole-file read gives it ({proof.reads_text})"


def _yes(value: bool | None) -> str:
    return "unknown" if value is None else ("yes" if value else "no")


def _differ(n: int, unit: str) -> str:
    return f"{n} {unit} differ" if n != 1 else f"1 {unit.rstrip('s')} differs"


def describe_row_mismatch(m: RowMismatch, *, elements: bool = False) -> list[str]:
    """A mismatch the way fio reports a verify failure: where, then expected before actual. ``elements``:
    the table's type holds one value a block (F32, F16, BF16), so the column alone says where."""
    other = f" (row {m.other_row})" if m.other_row is not None else ""
    block = "" if elements else f"block {m.block}, "
    lines = [
        f"mismatch: {m.mode} row {m.row} [{m.kind}{other}] ({m.stage})",
        f"  file {escape_path(m.file)}, offset {m.row_offset} (0x{m.row_offset:x}), length {m.length}",
        f"  tensor {escape(m.tensor)}, row {m.row}, {block}column {m.column} "
        f"(byte {m.byte} of the row, offset {m.offset} (0x{m.offset:x}))",
        f"  expected: {m.expected}",
        f"  actual:   {m.actual}",
        f"  {_differ(m.differing, m.unit)}; decoded row finite: expected "
        f"{_yes(m.expected_finite)}, actual {_yes(m.actual_finite)}{_first_bad(m, elements)}"
        + (f"; max abs diff {m.max_abs_diff:g}" if m.max_abs_diff is not None else ""),
    ]
    if m.detail:
        lines.append(f"  {m.detail}")
    return lines


def _first_bad(m: RowMismatch, elements: bool) -> str:
    """Where the delivered row's first NaN or Inf is, when it holds one."""
    p = m.actual_nonfinite
    if p is None:
        return ""
    return f" (first NaN/Inf at {'' if elements else f'block {p.block}, '}column {p.column})"


def describe_short_read(s: ShortRead) -> str:
    return (f"short read: {s.mode} ({s.stage}) file {escape_path(s.file)}, offset {s.offset} (0x{s.offset:x}), "
            f"asked {plural(s.requested, 'byte')}, got {s.returned}, not at end of file")


def describe_read_failure(f: ReadFailure) -> str:
    why = f.error or "no errno"
    return (f"read error: {f.mode} ({f.stage}) file {escape_path(f.file)}, offset {f.offset} (0x{f.offset:x}), "
            f"{plural(f.length, 'byte')}: {why}; that read's rows were not compared, the other reads went on")


def describe_unstable(u: Unstable, file: str, offset: int) -> str:
    rows, same = (f"row {u.row}", "row") if u.rows == 1 else (f"rows {u.row}-{u.row + u.rows - 1}", "rows")
    return (f"unstable read: buffered (reference) file {escape_path(file)}, offset {offset} (0x{offset:x}), {rows}: "
            f"a reference read delivered other bytes than the first read of the same {same} "
            f"(xxh3-64 {u.first:016x}, then {u.later:016x}): buffered reads of this file are not stable, and "
            "which read was right is not known (the first's bytes were not kept)")


def finite_text(r: RowsReport) -> str:
    """What the finiteness test found: the rows holding NaN or Inf, or that the rows tested hold none
    ("" when no row was tested: a table of integers, or a replay stopped early)."""
    if r.nonfinite_rows:
        return nonfinite_text(r) + _untested(r)
    if not r.finite_tested:
        return _untested(r).removeprefix("; ")
    n = r.finite_tested
    if r.finite_untested:
        return f"{plural(n, 'row')} tested {'is' if n == 1 else 'are'} finite in the file" + _untested(r)
    return "the selected row is finite in the file" if n == 1 else f"the {n} selected rows are finite in the file"


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
