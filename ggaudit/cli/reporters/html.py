"""The HTML reporter: one self-contained page for the whole run, with pictures drawn as inline SVG.

Nothing on the page is fetched: the style is inline, the pictures are SVG drawn from the reports, and there
is no script. Per target: a summary, its tables, and for a scan a map of each file with every finding placed
by offset and per-tensor histograms of scale magnitudes (when the scan counted them: ``scan
--format html`` does); for ``rows`` the table's rows with the checked, page- or sector-crossing and
mismatching rows marked. The lines of the text report follow, as it words them. Untrusted text is escaped
for a terminal (ggaudit.escaping) and then for HTML; big tables stop at :data:`MAX_ROWS` with a count of the
rest, so a model of 10,000 tensors still gives a page a browser opens.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Iterable, Iterator, Sequence
from itertools import chain
from typing import TYPE_CHECKING, Any

from ..._version import __version__
from ...diagnostic import Report
from ...outcomes import STATUS_CLEAN, STATUS_ERROR, Outcome, overall_status
from ...page import (Block, FactTable, FileMap, Folded, Heading, Histograms, Listing, Paragraph, RowLane, RowStrip,
                     Span, Table)
from ...escaping import escape_message, escape_path
from ...wording import plural
from . import DEFAULT, Rendering
from ._svg import Lane, file_map, histogram, row_strip, runs, strip_bins

if TYPE_CHECKING:
    from numpy.typing import ArrayLike

NAME = "html"

#: Rows of any one table (tensors, mismatches, differences, metadata); the rest are counted.
MAX_ROWS = 500
#: Lines of the text report shown per target.
MAX_LINES = 2000
#: Findings placed on one file's map.
MAX_MARKS = 1000
#: Tensors whose histograms are drawn per model: those with findings first, then the largest.
MAX_HISTOGRAMS = 24
#: Findings listed per target on the first screen (all are in its section).
MAX_VERDICT_LINES = 20

_STATUS = {STATUS_CLEAN: "clean", STATUS_ERROR: "error"}

_CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#1d2330;background:#fff}
h1{font-size:22px;margin:0 0 4px}h2{font-size:18px;margin:28px 0 6px;border-top:1px solid #ccd;padding-top:14px}
h3{font-size:15px;margin:18px 0 6px}code,pre,td.mono{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:12px}
pre{background:#f5f6f8;padding:8px;overflow-x:auto;white-space:pre-wrap;word-break:break-all}
table{border-collapse:collapse;margin:6px 0}td,th{border:1px solid #d8dbe2;padding:2px 8px;text-align:left}
th{background:#eef0f4}td.num{text-align:right;font-variant-numeric:tabular-nums}tr.hit td{background:#fde8e8}
.status{display:inline-block;padding:1px 8px;border-radius:3px;color:#fff;font-weight:600}
.s-clean{background:#2e7d32}.s-findings{background:#c62828}.s-error{background:#6a1b9a}
.more{color:#555;font-style:italic}.legend span{margin-right:14px;white-space:nowrap}
.sw{display:inline-block;width:12px;height:12px;margin-right:4px;vertical-align:-2px;border:1px solid #999}
svg text{font:11px system-ui,sans-serif;fill:#333}svg .bg{fill:#eceef2}
.hdr,.sw.hdr{fill:#9aa3b5;background:#9aa3b5}.t0,.sw.t0{fill:#6f9bd1;background:#6f9bd1}
.t1,.sw.t1{fill:#4a78b5;background:#4a78b5}.tf0,.sw.tf0{fill:#f3b8b3;background:#f3b8b3}.tf1{fill:#e99a93}
.mark.nan,.sw.nan{fill:#d32f2f;background:#d32f2f}.mark.pinf,.sw.pinf{fill:#ad1457;background:#ad1457}
.mark.ninf,.sw.ninf{fill:#6a1b9a;background:#6a1b9a}.mark.outlier,.sw.outlier{fill:#ef6c00;background:#ef6c00}
.mark.structure,.sw.structure{fill:#00897b;background:#00897b}.mark.mismatch,.sw.mismatch{fill:#d32f2f;background:#d32f2f}
.mark{fill-opacity:.85}.axis{stroke:#888}
.b{fill:#4a78b5}.bz{fill:#9aa3b5}.bn{fill:#d32f2f}
.checked,.sw.checked{fill:#7cb342;background:#7cb342}.page,.sw.page{fill:#f0a04b;background:#f0a04b}
.sector,.sw.sector{fill:#ffd54f;background:#ffd54f}.w64k,.sw.w64k{fill:#b39ddb;background:#b39ddb}
.hists{display:flex;flex-wrap:wrap;gap:10px}.hists figure{margin:0;border:1px solid #e0e2e8;padding:4px}
figcaption{font-size:12px;max-width:300px;overflow-wrap:anywhere}
"""

def report(outcomes: Sequence[Outcome[Report]], rendering: Rendering = DEFAULT) -> str:
    status = overall_status(outcomes)
    word = _STATUS.get(status, "findings")
    out = ['<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">',
           '<meta name="viewport" content="width=device-width, initial-scale=1">',
           f"<title>ggaudit report: {word}</title><style>{_CSS}</style></head><body>",
           f'<h1>ggaudit report <span class="status s-{word}">{word}</span></h1>',
           f"<p>ggaudit {html.escape(__version__)}; {_summary(outcomes)}</p>", *_verdict(outcomes)]
    for number, outcome in enumerate(outcomes):
        out.extend(_section(outcome, rendering, _anchor(number)))
    out.append("</body></html>\n")
    return "\n".join(out)


def _anchor(number: int) -> str:
    return f"target-{number + 1}"


def _verdict(outcomes: Sequence[Outcome[Report]]) -> list[str]:
    """The first screen: each target's one-line result (a link to its section when there are several: the
    index) and its findings' first lines, as text, before any table or picture."""
    out = ['<section class="verdict"><h2>Verdict</h2><ul>']
    for number, o in enumerate(outcomes):
        if o.result is not None:
            head, lines = html.escape(o.result.summary().headline), _finding_lines(o.result)
        else:
            head, lines = f"{_p(o.model)}: error: {html.escape(escape_message(str(o.error)))}", ""
        if len(outcomes) > 1:
            head = f'<a href="#{_anchor(number)}">{head}</a>'
        out.append(f"<li>{head}{lines}</li>")
    out.append("</ul></section>")
    return out


def _finding_lines(result: Report) -> str:
    """The first MAX_VERDICT_LINES findings' first lines (their text report's words), then how many more."""
    found = list(result.diagnostics())
    if not found:
        return ""
    items = "".join(f"<li><code>{html.escape(escape_message(d.lines[0]))}</code></li>"
                    for d in found[:MAX_VERDICT_LINES])
    more = f'<li class="more">... {plural(len(found) - MAX_VERDICT_LINES, "more finding")}</li>' \
        if len(found) > MAX_VERDICT_LINES else ""
    return f"<ul>{items}{more}</ul>"


def _summary(outcomes: Sequence[Outcome[Report]]) -> str:
    errors = sum(1 for o in outcomes if o.error is not None)
    found = sum(1 for o in outcomes if o.result is not None and not o.result.ok)
    n = len(outcomes)
    return (f"{n} target{'' if n == 1 else 's'}: {found} with findings, {n - errors - found} clean, "
            f"{errors} error{'' if errors == 1 else 's'}")


# --- helpers ---------------------------------------------------------------------------------------

def _p(path: str) -> str:
    return html.escape(escape_path(path))


def _h(text: str) -> str:
    """Text already escaped for a terminal (a report's words), for the page; a line break as ``<br>``."""
    return "<br>".join(html.escape(line) for line in text.split("\n"))


def _status(ok: bool) -> str:
    word = "clean" if ok else "findings"
    return f'<span class="status s-{word}">{word}</span>'


def _table(head: Sequence[str], rows: Iterable[Sequence[str]], total: int, what: str,
           hits: Callable[[int], bool] = lambda i: False) -> str:
    """A table of at most MAX_ROWS rows (cells are HTML already), then how many more there were."""
    out = ["<table>" + ("<tr>" + "".join(f"<th>{h}</th>" for h in head) + "</tr>" if any(head) else "")]
    shown = 0
    for i, row in enumerate(rows):
        if shown == MAX_ROWS:
            break
        css = ' class="hit"' if hits(i) else ""
        out.append(f"<tr{css}>" + "".join(row) + "</tr>")
        shown += 1
    out.append("</table>")
    if total > shown:
        out.append(f'<p class="more">... {total - shown} more {what} not listed</p>')
    return "".join(out)


def _td(text: str, css: str = "") -> str:
    return f'<td class="{css}">{text}</td>' if css else f"<td>{text}</td>"


def _lines(result: Report) -> str:
    """The text report's lines for ``result`` (at most MAX_LINES), already escaped for a terminal."""
    lines = result.summary().lines
    shown = "\n".join(html.escape(escape_message(line)) for line in lines[:MAX_LINES])
    more = f'<p class="more">... {len(lines) - MAX_LINES} more lines not shown</p>' if len(lines) > MAX_LINES else ""
    return f"<h3>Report</h3><pre>{shown}</pre>{more}"


def _legend(items: Sequence[tuple[str, str]]) -> str:
    return '<p class="legend">' + "".join(f'<span><i class="sw {css}"></i>{html.escape(name)}</span>'
                                           for css, name in items) + "</p>"


# --- sections: each report's blocks (report.page()), drawn ---------------------------------------------

def _section(outcome: Outcome[Report], rendering: Rendering, anchor: str) -> list[str]:
    if outcome.error is not None:
        return [f'<section id="{anchor}"><h2>{_p(outcome.model)} <span class="status s-error">error</span></h2>',
                f"<p>{html.escape(escape_message(str(outcome.error)))}</p></section>"]
    result = outcome.result
    assert result is not None     # an outcome holds a result or an error
    body = [part for block in result.page(rendering.limit) for part in _block(block)]
    return [f'<section id="{anchor}"><h2>{_p(outcome.model)} {_status(result.ok)}</h2>', *body, _lines(result),
            "</section>"]


def _block(block: Block) -> list[str]:
    draw: Callable[[Any], list[str]] = _DRAW[type(block)]
    return draw(block)


def _heading(b: Heading) -> list[str]:
    return [f"<h3>{_h(b.text)}</h3>"]


def _paragraph(b: Paragraph) -> list[str]:
    text = f"<strong>{_h(b.text)}</strong>" if b.strong else _h(b.text)
    return [f'<p class="{b.css}">{text}</p>' if b.css else f"<p>{text}</p>"]


def _facts(b: FactTable) -> list[str]:
    rows = ([_td(_h(k)), _td(_h(v), "mono" if b.mono else "")] for k, v in b.rows)
    return [_table(["", ""], rows, len(b.rows), "facts")]


def _table_of(b: Table) -> str:
    rows = ([_td(_h(c.text), c.css) for c in row] for row in b.rows)
    return _table(list(b.head), rows, b.total, b.what, hits=lambda i: i in b.hits)


def _folded(b: Folded) -> list[str]:
    return [f"<details{' open' if b.open else ''}><summary>{_h(b.summary)}</summary>{_table_of(b.table)}</details>"]


def _listing(b: Listing) -> list[str]:
    items = "".join(f"<li><code>{html.escape(escape_message(line))}</code></li>" for line in b.lines[:MAX_ROWS])
    more = [f'<p class="more">... {plural(len(b.lines) - MAX_ROWS, "more " + b.what)} not listed</p>'] \
        if len(b.lines) > MAX_ROWS else []
    return [f"<ol>{items}</ol>", *more]


def _file_map(b: FileMap) -> list[str]:
    marks = [*b.marks, *b.findings[:MAX_MARKS]]
    out = [file_map(b.extent, b.segments, marks, b.label), _legend(b.legend.items)]
    if marks:     # the map's tooltips, also as text: readable without a pointer, and searchable
        out.append("<ol>" + "".join(f"<li><code>{html.escape(escape_message(m.title))}</code></li>"
                                    for m in marks[:MAX_ROWS]) + "</ol>")
    left = len(b.findings) - MAX_MARKS
    if left > 0:
        out.append(f'<p class="more">... {plural(left, "more finding")} not placed on the map</p>')
    if b.unlisted:
        out.append(f'<p class="more">{plural(b.unlisted, "finding")} counted but not listed (--limit): '
                   'not on the map</p>')
    return out


def _histograms(b: Histograms) -> list[str]:
    chosen = b.groups[:MAX_HISTOGRAMS]
    out = ["<p>Each float field of a tensor's blocks (its elements, for a float tensor) counted per power of two: a "
           "bar e holds the values with 2<sup>e</sup> &le; |x| &lt; 2<sup>e+1</sup>. Heights are on a log scale, so "
           "one block far from the rest still shows.</p>", '<div class="hists">']
    out.extend(f"<figure>{histogram(f.bars, f.label)}<figcaption>{_h(f.caption)}</figcaption></figure>"
               for figures in chosen for f in figures)
    out.append("</div>")
    if len(b.groups) > len(chosen):
        out.append(f'<p class="more">... histograms of {len(b.groups) - len(chosen)} more tensors not drawn '
                   "(those with findings first, then the largest, are)</p>")
    return out


def _row_strip(b: RowStrip) -> list[str]:
    lanes = [Lane(lane.name, lane.css, _lane_runs(b.n_rows, lane)) for lane in b.lanes]
    return [row_strip(b.n_rows, lanes, b.marks, b.label), _legend(b.legend.items)]


def _lane_runs(n_rows: int, lane: RowLane) -> list[Span]:
    """The bins a lane's rows fall in, as runs: each range's bins, and one row a bin of its pieces."""
    bins = strip_bins(n_rows)
    ranged = (b * n_rows // bins for lo, hi in lane.ranges for b in range(lo * bins // n_rows, hi * bins // n_rows + 1))
    pieces = (int(row) for piece in lane.pieces for row in _thin(piece, n_rows, bins))
    binned = sorted({row * bins // n_rows for row in chain(ranged, pieces)})
    return [Span(b, n, "", f"rows {b * n_rows // bins}..{((b + n) * n_rows - 1) // bins}: {lane.what}")
            for b, n in runs(binned)]


def _thin(rows: ArrayLike, n_rows: int, bins: int) -> Iterator[int]:
    """One row per bin of ascending rows (a table of 600M rows has 13M crossing rows): numpy's, for speed."""
    import numpy as np

    ordered = np.asarray(rows, dtype=np.int64)
    binned = ordered * bins // max(n_rows, 1)
    first = np.ones(binned.size, dtype=bool)
    first[1:] = binned[1:] != binned[:-1]
    return iter(ordered[first].tolist())


#: How each kind of block is drawn.
_DRAW: dict[type, Callable[[Any], list[str]]] = {
    Heading: _heading, Paragraph: _paragraph, FactTable: _facts, Table: lambda b: [_table_of(b)], Folded: _folded,
    Listing: _listing, FileMap: _file_map, Histograms: _histograms, RowStrip: _row_strip,
}
