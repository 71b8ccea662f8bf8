"""The lines of verify's findings (a :class:`~ggaudit.verify.report.Mismatch` each), as the text report
prints them and :meth:`VerifyReport.diagnostics` says them."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..text import escape, escape_path

if TYPE_CHECKING:
    from .report import Mismatch

__all__ = ["describe_mismatch"]


def describe_mismatch(m: Mismatch) -> list[str]:
    """fio style: where (file, offset, length; tensor, rows), what, then expected before actual."""
    where = [f"file {escape_path(m.path)}"]
    if m.offset is not None:
        where.append(f"offset {m.offset}")
    if m.length is not None:
        where.append(f"length {m.length}")
    place = ", ".join(where)
    if m.tensor is not None:
        place += f"; tensor {escape(m.tensor)}"
        if m.rows is not None:
            place += f", rows {m.rows[0]}-{m.rows[1]}"
    elif m.subject:
        place += f" ({escape_path(m.subject)})"
    lines = [f"MISMATCH {m.kind}: {place}: {escape(m.detail)}"]
    if m.expected is not None or m.actual is not None:
        lines.append(f"  expected: {escape(m.expected or '-')}")
        lines.append(f"  actual:   {escape(m.actual or '-')}")
    return lines
