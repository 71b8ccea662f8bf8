"""The HTML reporter: one self-contained page for the whole run, with pictures drawn as inline SVG.

Nothing on the page is fetched: the style is inline, the pictures are SVG drawn from the reports, and there
is no script. Per target: a summary, its tables, and for a scan a map of each file with every finding placed
by offset and per-tensor histograms of scale magnitudes (when the scan counted them: ``scan
--format html`` does); for ``rows`` the table's rows with the checked, page- or sector-crossing and
mismatching rows marked. The lines of the text report follow, as it words them. Untrusted text is escaped
for a terminal (ggaudit.text) and then for HTML; big tables stop at :data:`MAX_ROWS` with a count of the
rest, so a model of 10,000 tensors still gives a page a browser opens.
"""

from __future__ import annotations

import html
import json
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from ..._version import __version__
from ...batch import STATUS_CLEAN, STATUS_ERROR, Outcome, Report, overall_status
from ...format.info import ModelInfo
from ...lines import format_value, plural, shape_text
from ...scan.report import (Finding, ScaleHistogram, ScanReport, TensorScan, counts_text, describe_finding,
                            describe_metadata, describe_structure, describe_template)
from ...text import escape, escape_message, escape_path
from . import DEFAULT, Rendering
from . import text as plain
from ._svg import Bar, Lane, Span, file_map, histogram, row_strip, runs, strip_bins

if TYPE_CHECKING:   # sections are found by the report type's name: a scan's page loads no other job
    from ...check.report import CheckReport
    from ...rows.replay import RowsReport
    from ...verify.diff import DiffReport
    from ...verify.report import VerifyReport

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
#: Tensors without findings shown unfolded when no tensor has one; more are folded.
FOLD_AT = 50

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

#: CSS class of each finding kind (a class name cannot hold "+").
_KIND_CSS = {"nan": "nan", "+inf": "pinf", "-inf": "ninf", "outlier": "outlier", "anomaly": "outlier"}


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
            head, lines = html.escape(plain.summary_line(o.result)), _finding_lines(o.result)
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

def _t(text: str) -> str:
    """Untrusted text (a name, a value) for the page: escaped for a terminal, then for HTML."""
    return html.escape(escape(text))


def _p(path: str) -> str:
    return html.escape(escape_path(path))


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


def _num(n: int | float | None) -> str:
    return _td("-" if n is None else str(n), "num")


def _lines(result: Report) -> str:
    """The text report's lines for ``result`` (at most MAX_LINES), already escaped for a terminal."""
    try:
        lines = list(plain.lines(result))
    except TypeError:       # a report type the text reporter does not know: its JSON says everything
        lines = json.dumps(result.to_json(), indent=2).split("\n")
    shown = "\n".join(html.escape(escape_message(line)) for line in lines[:MAX_LINES])
    more = f'<p class="more">... {len(lines) - MAX_LINES} more lines not shown</p>' if len(lines) > MAX_LINES else ""
    return f"<h3>Report</h3><pre>{shown}</pre>{more}"


def _legend(items: Sequence[tuple[str, str]]) -> str:
    return '<p class="legend">' + "".join(f'<span><i class="sw {css}"></i>{html.escape(name)}</span>'
                                           for css, name in items) + "</p>"


# --- sections --------------------------------------------------------------------------------------

def _section(outcome: Outcome[Report], rendering: Rendering, anchor: str) -> list[str]:
    if outcome.error is not None:
        return [f'<section id="{anchor}"><h2>{_p(outcome.model)} <span class="status s-error">error</span></h2>',
                f"<p>{html.escape(escape_message(str(outcome.error)))}</p></section>"]
    result = outcome.result
    assert result is not None     # an outcome holds a result or an error
    render = _SECTIONS.get(type(result).__name__)
    body = render(result, rendering) if render is not None else []
    return [f'<section id="{anchor}"><h2>{_p(outcome.model)} {_status(result.ok)}</h2>', *body, _lines(result),
            "</section>"]


def _scan(r: ScanReport, rendering: Rendering) -> list[str]:
    counts = ", ".join(f"{k} {n}" for k, n in r.counts.items())
    flagged = sum(1 for t in r.tensors if t.total)
    facts = [("files", str(len(r.files))), ("tensors", f"{len(r.tensors)} ({flagged} with findings)"),
             ("findings", counts), ("structure findings", str(len(r.structure))),
             ("metadata findings", str(len(r.metadata))), ("chat template findings", str(len(r.templates))),
             ("tensor bytes scanned", str(r.stats.bytes)), ("time", f"{r.stats.seconds:.3f} s"),
             ("reader processes", str(r.stats.workers)), ("complete", "yes" if r.complete else "no (--fail-fast)")]
    if r.max_abs is not None:
        facts.append(("outlier threshold |x| >", format_value(r.max_abs)))
    facts.extend((f"{name} of {escape_path(d.path)}", digest) for d in r.digests for name, digest in d.digests.items())
    out = ["<h3>Summary</h3>", _table(["", ""], ([_td(html.escape(k)), _td(html.escape(v), "mono")] for k, v in facts),
                                      len(facts), "facts")]
    out.extend(_header_findings(r))
    out.append("<h3>Tensors</h3>")
    out.extend(_tensor_tables(r.tensors))
    for path in r.files:
        out.extend(_scan_map(r, path))
    out.extend(_histograms(r))
    return out


def _header_findings(r: ScanReport) -> list[str]:
    """The header's findings, a line each as the text report words them (key or template line, offset, what)."""
    found = [*(describe_metadata(m) for m in r.metadata), *(describe_template(t) for t in r.templates)]
    if not found:
        return []
    return ["<h3>Metadata and chat templates</h3>",
            "<ol>" + "".join(f"<li><code>{html.escape(escape_message(line))}</code></li>" for line in found[:MAX_ROWS])
            + "</ol>", *([f'<p class="more">... {plural(len(found) - MAX_ROWS, "more finding")} not listed</p>']
                         if len(found) > MAX_ROWS else [])]


def _tensor_tables(tensors: Sequence[TensorScan]) -> list[str]:
    """The tensors with findings, then those without folded (a model of 1,000 clean tensors stays a page one
    can find the findings in); unfolded when none has a finding and they are few."""
    flagged = [t for t in tensors if t.total]
    clean = [t for t in tensors if not t.total]
    out = [_tensor_table(flagged)] if flagged else []
    if clean:
        unfolded = " open" if not flagged and len(clean) <= FOLD_AT else ""
        out.append(f"<details{unfolded}><summary>{plural(len(clean), 'tensor')} without findings</summary>"
                   f"{_tensor_table(clean)}</details>")
    return out


def _tensor_table(tensors: Sequence[TensorScan]) -> str:
    shown = _capped(tensors)
    rows = ([_td(_t(t.name), "mono"), _td(t.type), _td(shape_text(t.shape)), _num(t.nbytes),
             _td(html.escape(counts_text(t.counts) if t.total else "none")),
             _td(html.escape(format_value(t.max_abs, t.value_encoding)), "num")] for t in shown)
    return _table(["name", "type", "shape", "bytes", "findings", "max finite |x|"], rows, len(tensors), "tensors",
                  hits=lambda i: bool(shown[i].total))


def _capped(tensors: Sequence[TensorScan]) -> list[TensorScan]:
    """At most MAX_ROWS tensors, those with findings first chosen, shown in file order."""
    if len(tensors) <= MAX_ROWS:
        return list(tensors)
    order = sorted(range(len(tensors)), key=lambda i: (not tensors[i].total, i))[:MAX_ROWS]
    return [tensors[i] for i in sorted(order)]


def _scan_map(r: ScanReport, path: str) -> list[str]:
    tensors = sorted((t for t in r.tensors if t.path == path), key=lambda t: t.offset)
    structure = [s for s in r.structure if s.path == path]
    extent = max([t.offset + t.nbytes for t in tensors] + [s.offset + s.length for s in structure] + [1])
    segments = [Span(0, tensors[0].offset, "hdr", "header and tensor infos")] if tensors else []
    segments += [Span(t.offset, t.nbytes, f"tf{i % 2}" if t.total else f"t{i % 2}",
                      f"tensor {escape(t.name)} ({t.type} {shape_text(t.shape)}): offset {t.offset}, {t.nbytes} bytes")
                 for i, t in enumerate(tensors)]
    marks = [Span(s.offset, s.length, "structure", describe_structure(s)) for s in structure]
    findings = [f for t in tensors for f in t.findings]
    marks += [_finding_mark(f, r.max_abs) for f in findings[:MAX_MARKS]]
    left = len(findings) - MAX_MARKS
    label = f"map of {escape_path(path)}: tensors and findings by offset"
    out = [f"<h3>Map of {_p(path)}</h3>", file_map(extent, segments, marks, label),
           _legend([("hdr", "header"), ("t0", "tensor"), ("t1", "tensor (next)"), ("tf0", "tensor with findings"),
                    ("nan", "nan"), ("pinf", "+inf"), ("ninf", "-inf"), ("outlier", "outlier or anomaly"),
                    ("structure", "structure finding")])]
    if marks:     # the map's tooltips, also as text: readable without a pointer, and searchable
        out.append("<ol>" + "".join(f"<li><code>{html.escape(escape_message(m.title))}</code></li>"
                                    for m in marks[:MAX_ROWS]) + "</ol>")
    if left > 0:
        out.append(f'<p class="more">... {plural(left, "more finding")} not placed on the map</p>')
    unlisted = sum(t.total - len(t.findings) for t in tensors)
    if unlisted:
        out.append(f'<p class="more">{plural(unlisted, "finding")} counted but not listed (--limit): '
                   'not on the map</p>')
    return out


def _finding_mark(f: Finding, max_abs: float | None) -> Span:
    return Span(f.offset, f.size, _KIND_CSS.get(f.kind, "nan"), describe_finding(f, max_abs))


def _histograms(r: ScanReport) -> list[str]:
    counted = [t for t in r.tensors if t.histograms]
    if not counted:
        return []
    chosen = sorted(counted, key=lambda t: (not t.total, -t.nbytes))[:MAX_HISTOGRAMS]
    out = ["<h3>Scale magnitudes</h3>",
           "<p>Each float field of a tensor's blocks (its elements, for a float tensor) counted per power of two: a "
           "bar e holds the values with 2<sup>e</sup> &le; |x| &lt; 2<sup>e+1</sup>. Heights are on a log scale, so "
           "one block far from the rest still shows.</p>", '<div class="hists">']
    for t in chosen:
        for h in t.histograms or ():
            caption = f"{_t(t.name)} ({t.type}), field {_t(h.field)} ({h.encoding}): {h.total} values"
            out.append(f"<figure>{histogram(_bars(t, h), f'histogram of {escape(t.name)} {escape(h.field)}')}"
                       f"<figcaption>{caption}</figcaption></figure>")
    out.append("</div>")
    if len(counted) > len(chosen):
        out.append(f'<p class="more">... histograms of {len(counted) - len(chosen)} more tensors not drawn '
                   "(those with findings first, then the largest, are)</p>")
    return out


def _bars(t: TensorScan, h: ScaleHistogram) -> list[Bar]:
    """Zeros and subnormals, then every power of two from the smallest to the largest that occurs (empty
    ones too, so a lone outlier stands apart), then the non-finite values."""
    where = f"{escape(t.name)}, field {escape(h.field)}"
    bars = []
    if h.zero:
        bars.append(Bar("0", h.zero, "bz", f"{where}: zero: {h.zero}", "zero"))
    if h.subnormal:
        bars.append(Bar("sub", h.subnormal, "bz", f"{where}: subnormal: {h.subnormal}", "subnormal"))
    if h.powers:
        counts = dict(h.powers)
        lo, hi = h.powers[0][0], h.powers[-1][0]
        step = max(1, (hi - lo + 1) // 6)
        for e in range(lo, hi + 1):
            label = str(e) if e in (lo, hi) or ((e - lo) % step == 0 and hi - e >= step) else ""
            n = counts.get(e, 0)
            bars.append(Bar(label, n, "b", f"{where}: 2^{e} <= |x| < 2^{e + 1}: {n}", str(e)))
    if h.nonfinite:
        bars.append(Bar("NaN/Inf", h.nonfinite, "bn", f"{where}: non-finite: {h.nonfinite}", "nonfinite"))
    return bars


# --- rows ------------------------------------------------------------------------------------------

def _nonfinite_count(r: RowsReport) -> str:
    """Of the rows tested for NaN and Inf: a 0 alone would read as tested and finite."""
    untested = f"; {r.finite_untested} not tested (their reads failed)" if r.finite_untested else ""
    if not r.finite_tested:
        return "not tested" + untested
    return f"{r.nonfinite_rows} of {r.finite_tested} tested{untested}"


def _rows(r: RowsReport, rendering: Rendering) -> list[str]:
    facts = [("file", _p(r.file)), ("tensor", f"{_t(r.tensor)} ({html.escape(r.ggml_type)})"),
             ("table", f"{r.n_rows} rows of {r.row_bytes} bytes ({r.n_cols} columns) at offset {r.table_offset}"),
             ("rows checked", f"{r.rows_checked} ({_t(r.selection)})"),
             ("compared", html.escape(", ".join(r.compared) or "nothing")),
             ("mismatches", f"{r.mismatch_count} in rows; short reads {r.short_read_count}"),
             ("rows holding NaN/Inf", _nonfinite_count(r))]
    if r.exercised is not None:
        facts.append(("cache and buffer ring", html.escape(r.exercised.text)))
    if r.published is not None:
        from ...rows.lines import published_text

        facts.append(("published digest", html.escape(published_text(r.published))))
    out = ["<h3>Summary</h3>", _table(["", ""], ([_td(k), _td(v)] for k, v in facts), len(facts), "facts"),
           "<h3>Rows</h3>", _rows_strip(r),
           _legend([("checked", "checked"), ("page", "crosses a 4096-byte page"),
                    ("sector", "crosses a 512-byte sector"), ("mismatch", "mismatch")])]
    if r.stats:
        out += ["<h3>Read paths</h3>", _table(
            ["path", "stage", "rows", "reads", "bytes", "alignment", "seconds"],
            ([_td(html.escape(s.mode)), _td(html.escape(s.stage)), _num(s.rows), _num(s.reads), _num(s.bytes),
              _td(html.escape(f"{s.alignment} ({s.alignment_source})")), _td(f"{s.seconds:.3f}", "num")]
             for s in r.stats), len(r.stats), "read paths")]
    if r.mismatches:
        out += ["<h3>Mismatches</h3>", _table(
            ["path", "stage", "row", "kind", "offset", "block", "column", "expected", "actual"],
            ([_td(html.escape(m.mode)), _td(html.escape(m.stage)), _num(m.row), _td(html.escape(m.kind)),
              _num(m.offset), _num(m.block), _num(m.column), _td(_t(m.expected[:64]), "mono"),
              _td(_t(m.actual[:64]), "mono")] for m in r.mismatches), r.mismatch_count, "mismatches")]
    return out


def _rows_strip(r: RowsReport) -> str:
    from ...rows.lines import describe_row_mismatch
    from ...evidence.readers import PAGE, SECTOR

    bins = strip_bins(r.n_rows)

    def lane_runs(rows: Iterable[int], what: str) -> list[Span]:
        binned = sorted({row * bins // r.n_rows for row in rows})
        return [Span(b, n, "", f"rows {b * r.n_rows // bins}..{((b + n) * r.n_rows - 1) // bins}: {what}")
                for b, n in runs(binned)]

    checked = r.checked_ranges
    lanes = [Lane("checked" if checked is not None else "checked (not located)", "checked",
                  lane_runs((b * r.n_rows // bins for lo, hi in checked or ()
                             for b in range(lo * bins // r.n_rows, hi * bins // r.n_rows + 1)), "checked"))]
    for name, css, boundary in (("4096-byte page", "page", PAGE), ("512-byte sector", "sector", SECTOR)):
        crossing = (int(row) for piece in r.crossing_rows(boundary) for row in _thin(piece, r.n_rows, bins))
        lanes.append(Lane(f"crosses a {name}", css, lane_runs(crossing, f"some cross a {name}")))
    by_row: dict[int, list[str]] = {}
    for m in r.mismatches:
        by_row.setdefault(m.row, []).extend(describe_row_mismatch(m))
    marks = [Span(row, 1, "mismatch", "\n".join(text)) for row, text in sorted(by_row.items())]
    lanes.append(Lane("mismatch", "mismatch", []))
    return row_strip(r.n_rows, lanes, marks, f"rows of {escape(r.tensor)}")


def _thin(rows: Any, n_rows: int, bins: int) -> Any:
    """One row per bin of a numpy array of ascending rows (a table of 600M rows has 13M crossing rows)."""
    import numpy as np

    binned = np.asarray(rows, dtype=np.int64) * bins // max(n_rows, 1)
    first = np.ones(binned.size, dtype=bool)
    first[1:] = binned[1:] != binned[:-1]
    return rows[first]


# --- verify, diff, info, manifest -------------------------------------------------------------------

def _verify(r: VerifyReport, rendering: Rendering) -> list[str]:
    s = r.stats
    facts = [("kind", html.escape(r.kind)), ("source", _p(r.source)), ("files checked", str(s.files)),
             ("from the digest cache (not read again)", str(s.cached)), ("bytes hashed", str(s.bytes_hashed)),
             ("mismatches", str(len(r.mismatches)) + (" (stopped at the first)" if r.stopped_early else "")),
             ("time", f"{s.seconds:.3f} s")]
    limit = MAX_ROWS if rendering.limit is None else min(rendering.limit, MAX_ROWS)
    out = ["<h3>Summary</h3>", _table(["", ""], ([_td(k), _td(v)] for k, v in facts), len(facts), "facts")]
    if r.mismatches:
        rows = ([_td(html.escape(m.kind)), _td(_p(m.path), "mono"), _num(m.offset), _num(m.length),
                 _td(_t(m.tensor or "-"), "mono"), _td("-" if m.rows is None else f"{m.rows[0]}-{m.rows[1]}"),
                 _td(_t(m.detail)), _td(_t(m.expected or "-"), "mono"), _td(_t(m.actual or "-"), "mono")]
                for m in r.mismatches[:limit])
        out += ["<h3>Mismatches</h3>", _table(["kind", "file", "offset", "length", "tensor", "rows", "detail",
                                               "expected", "actual"], rows, len(r.mismatches), "mismatches")]
    out += ["<h3>Checked</h3>", _table(
        ["file", "what", "algorithm", "bytes", "ok", "digest"],
        ([_td(_p(c.path), "mono"), _td(_p(c.subject)), _td(html.escape(c.algorithm)), _num(c.size),
          _td("yes" if c.ok else "no"), _td(html.escape(plain.digest_source(c) or "read now"))]
         for c in r.checked), len(r.checked), "files")]
    return out


def _diff(r: DiffReport, rendering: Rendering) -> list[str]:
    facts = [("a", _p(r.a)), ("b", _p(r.b)), ("identical tensors", str(len(r.identical))),
             ("tensors whose data differ", str(len(r.data_diffs))),
             ("changed type or shape", str(len(r.layout_changes))), ("only in a", str(len(r.only_in_a))),
             ("only in b", str(len(r.only_in_b))), ("metadata keys that differ", str(len(r.metadata))),
             ("structure differences", str(r.structure_differences))]
    out = ["<h3>Summary</h3>", _table(["", ""], ([_td(k), _td(v)] for k, v in facts), len(facts), "facts")]
    if r.data_diffs:
        out += ["<h3>Differences</h3>", _table(
            ["tensor", "type", "shape", "rows differing", "first row", "block", "offset in a", "offset in b"],
            ([_td(_t(d.name), "mono"), _td(html.escape(d.ggml_type)), _td(shape_text(d.shape)),
              _td(f"{d.rows_differing} of {d.n_rows}", "num"), _num(d.first.row), _num(d.first.block),
              _num(d.first.offset_a), _num(d.first.offset_b)] for d in r.data_diffs), len(r.data_diffs),
            "differences")]
    if r.layout_changes:
        out += ["<h3>Changed type or shape</h3>", _table(
            ["tensor", "what", "a", "b"],
            ([_td(_t(c.name), "mono"), _td(html.escape(c.what)),
              _td(f"{html.escape(c.type_a)} {shape_text(c.shape_a)}"),
              _td(f"{html.escape(c.type_b)} {shape_text(c.shape_b)}")] for c in r.layout_changes),
            len(r.layout_changes), "changes")]
    # The text report's lines (escaped for a terminal already): each names both files' offsets and lengths.
    from ...verify.diff_structure import describe_structure_diff

    found = [lines for s in r.structure for lines in describe_structure_diff(s)]
    if found:
        out += ["<h3>Structure</h3>", _table(
            ["bytes no tensor owns, and the file facts, that differ"],
            ([_td("<br>".join(html.escape(line) for line in lines), "mono")] for lines in found), len(found),
            "structure differences")]
    return out


def _info(info: ModelInfo, rendering: Rendering) -> list[str]:
    model = info.model
    facts = [("files", str(len(model.files))), ("architecture", _t(model.architecture or "(none)")),
             ("tensors", str(len(model.tensors))), ("metadata keys", str(len(model.metadata)))]
    out = ["<h3>Summary</h3>", _table(["", ""], ([_td(k), _td(v)] for k, v in facts), len(facts), "facts")]
    for f in model.files:
        tensors = sorted((t for t in model.tensors if t.path == f.path), key=lambda t: t.offset)
        segments = [Span(0, f.data_offset, "hdr", "header and tensor infos")]
        segments += [Span(t.offset, t.nbytes, f"t{i % 2}", f"tensor {escape(t.name)} ({t.ggml_type.name} "
                          f"{shape_text(t.shape)}): offset {t.offset}, {t.nbytes} bytes")
                     for i, t in enumerate(tensors)]
        out += [f"<h3>Map of {_p(f.path)}</h3>", file_map(f.size, segments, [], f"map of {escape_path(f.path)}"),
                _legend([("hdr", "header"), ("t0", "tensor"), ("t1", "tensor (next)")])]
    out += ["<h3>Tensors</h3>", _table(
        ["name", "type", "shape", "offset", "bytes"],
        ([_td(_t(t.name), "mono"), _td(t.ggml_type.name), _td(shape_text(t.shape)), _num(t.offset), _num(t.nbytes)]
         for t in model.tensors), len(model.tensors), "tensors")]
    return out


def _check(r: CheckReport, rendering: Rendering) -> list[str]:
    """The verdict first, in words; then each conclusion, each path's read and the next step."""
    from ...check.lines import headline

    out = [f'<p class="verdict"><strong>{html.escape(headline(r))}</strong></p>',
           "<h3>Conclusions</h3>", _table(["code", "conclusion"], ([_td(html.escape(c.code)), _td(_t(c.text))]
                                                                   for c in r.conclusions), len(r.conclusions),
                                           "conclusions")]
    reads = [(f, p) for f in r.files for p in f.reads]
    out += ["<h3>Read paths</h3>", _table(
        ["file", "path", "bytes", "seconds", "alignment", "xxh3-128"],
        ([_td(_p(f.path), "mono"), _td(html.escape(p.stats.mode)), _num(p.stats.bytes),
          _td(f"{p.stats.seconds:.3f}", "num"), _num(p.stats.alignment), _td(p.fingerprint, "mono")]
         for f, p in reads), len(reads), "reads")]
    out += [f"<p>next: {_t(step)}</p>" for step in r.next_steps]
    return out


#: Each report type's section, by the type's name (``type(report).__name__``), as text.py finds its lines.
_SECTIONS: dict[str, Callable[[Any, Rendering], list[str]]] = {
    "ScanReport": _scan, "RowsReport": _rows, "VerifyReport": _verify, "DiffReport": _diff, "ModelInfo": _info,
    "CheckReport": _check,
}
