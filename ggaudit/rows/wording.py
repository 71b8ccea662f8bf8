"""The words of rows' findings made below the report (mismatched rows, unstable reads, what the published
digest decided), as the text report prints them and :meth:`RowsReport.diagnostics` says them; the report's
own records (short and failed reads, rows holding NaN or Inf) are worded beside them in
:mod:`ggaudit.rows.report`."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import TYPE_CHECKING

from ..wording import plural
from ..escaping import escape, escape_path

if TYPE_CHECKING:
    from .classify import RowMismatch
    from .reference_reads import Unstable
    from .digest_proof import Proof

__all__ = ["describe_row_mismatch", "describe_row_mismatches", "describe_unstable", "published_text"]


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


#: How a cache stage's detail begins when the hit returned what a wrong read stored (classify's words).
CACHED_FROM = "cached from a wrong read"


def describe_row_mismatches(found: Iterable[RowMismatch], *, elements: bool = False) -> list[str]:
    """Each mismatched row once per read path, with the stages that delivered it as shown listed together
    (``(gather, cache-miss, cache-hit, cache-pressure twice, prefetch)``): a stage's lines are the first
    stage's when every line but the stage is the same, a hit's ``cached from a wrong read`` aside."""
    groups: dict[tuple[str, ...], tuple[RowMismatch, list[str]]] = {}
    for m in found:
        lines = describe_row_mismatch(m, elements=elements)
        key = (m.mode, lines[0].rpartition(" (")[0], *lines[1:-1], _uncached(lines[-1]))
        groups.setdefault(key, (m, []))[1].append(m.stage)
    out: list[str] = []
    for first, stages in groups.values():
        lines = describe_row_mismatch(first, elements=elements)
        if len(stages) > 1:
            lines[0] = f"{lines[0].rpartition(' (')[0]} ({_stages(stages)})"
        out.extend(lines)
    return out


def _uncached(line: str) -> str:
    """A detail line without the cache's ``cached from a wrong read (STAGE, KIND): `` opening (or
    ``cached from a wrong read: ``)."""
    if line.startswith(f"  {CACHED_FROM} ("):
        return "  " + line.partition("): ")[2]
    if line.startswith(f"  {CACHED_FROM}: "):
        return "  " + line.removeprefix(f"  {CACHED_FROM}: ")
    return line


def _stages(stages: list[str]) -> str:
    """``gather, cache-pressure twice``: each stage once, in order, with how often it delivered the row."""
    return ", ".join(stage if n == 1 else f"{stage} {'twice' if n == 2 else f'{n} times'}"
                     for stage, n in Counter(stages).items())


def _first_bad(m: RowMismatch, elements: bool) -> str:
    """Where the delivered row's first NaN or Inf is, when it holds one."""
    p = m.actual_nonfinite
    if p is None:
        return ""
    return f" (first NaN/Inf at {'' if elements else f'block {p.block}, '}column {p.column})"


def describe_unstable(u: Unstable, file: str, offset: int) -> str:
    rows, same = (f"row {u.row}", "row") if u.rows == 1 else (f"rows {u.row}-{u.row + u.rows - 1}", "rows")
    return (f"unstable read: buffered (reference) file {escape_path(file)}, offset {offset} (0x{offset:x}), {rows}: "
            f"a reference read delivered other bytes than the first read of the same {same} "
            f"(xxh3-64 {u.first:016x}, then {u.later:016x}): buffered reads of this file are not stable, and "
            "which read was right is not known (the first's bytes were not kept)")
