"""The text reporter: each report as lines for a terminal (fio style: where, then expected before actual).

Every name, path and value read from a file is escaped (ggaudit.text); offsets are decimal, raw bits hex,
floats the shortest text that reads back as the stored value (``1e-06`` for a float32, not
``9.999999974752427e-07``). Counts agree with their noun (``1 mismatch``). A value of a float tensor
is an element at a column; a quantized tensor's, a field of a block. A target that failed prints nothing
here: its one-line error goes to stderr (see ``emit_outcomes``). With several targets the report ends
with one line counting them; ``-q`` shows each report as its one-line summary (:func:`summary_line`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

from ...batch import Outcome, Report
from ...format.info import ModelInfo, bytes_per_type
from ...format.layout import MetaValue
from ...lines import plural, show_value
from ...lines import verb as _verb
from ...scan.report import (CHECK_NONE, KINDS, ScanReport, TensorScan, counts_text, describe_finding,
                            describe_metadata, describe_structure, describe_template, describe_tensor)
from ...text import escape, escape_message, escape_path
from ..common import STDOUT
from . import DEFAULT, Rendering

if TYPE_CHECKING:
    # Only the job that made a report loads its module: the renderers below are found by the report type's
    # name and import what they use when they run, so `ggaudit scan` loads nothing of rows, verify or diff
    # (tests/test_startup_cost.py).
    from ...check.report import CheckReport
    from ...rows.replay import Geometry, RowsReport
    from ...verify.diff import DiffReport
    from ...verify.manifests.llama_hash import LlamaHashManifest
    from ...verify.manifests.report import ManifestWritten
    from ...verify.report import Checked, VerifyReport

NAME = "text"
#: The kind of a verify report of a whole store (``ollama:*``'s last target), which is no model.
STORE_SEARCH = "ollama-store"


def report(outcomes: Sequence[Outcome[Report]], rendering: Rendering = DEFAULT) -> str:
    """Each report in turn, in the order the targets were given (with ``quiet``, each as its one-line
    summary); then, with several targets, how many had findings, were clean or failed."""
    shown: list[str] = []
    for o in outcomes:
        if o.result is not None:
            shown.extend(_quiet_lines(o.result) if rendering.quiet else lines(o.result, rendering))
    if len(outcomes) > 1:
        shown.append(run_summary(outcomes))
    return "".join(line + "\n" for line in shown)


def lines(result: Report, rendering: Rendering = DEFAULT) -> Iterable[str]:
    render = _RENDERERS.get(type(result).__name__)
    if render is None:      # a new report type needs its lines here
        raise TypeError(f"no text rendering of {type(result).__name__}")
    return render(result, rendering)


def run_summary(outcomes: Sequence[Outcome[Report]]) -> str:
    """The last line of a run of several targets: ``3 models: 1 with findings, 1 clean, 1 error``; a store
    searched as a whole (``verify ollama:*``: its orphan blobs) is counted apart from its models
    (``1 model and 1 store: ...``)."""
    errors = sum(1 for o in outcomes if o.error is not None)
    findings = sum(1 for o in outcomes if o.result is not None and not o.result.ok)
    clean = len(outcomes) - errors - findings
    stores = sum(1 for o in outcomes if getattr(o.result, "kind", None) == STORE_SEARCH)
    counted = plural(len(outcomes) - stores, "model") + (f" and {plural(stores, 'store')}" if stores else "")
    return f"{counted}: {findings} with findings, {clean} clean, {plural(errors, 'error')}"


def summary_line(result: Report) -> str:
    """One line saying what a report found: ``model a.gguf: 2 findings (nan 1, +inf 1)``, ``... clean``."""
    summarize = _SUMMARIES.get(type(result).__name__)
    if summarize is None:   # a new report type needs its summary here
        raise TypeError(f"no text summary of {type(result).__name__}")
    return summarize(result)


def _quiet_lines(result: Report) -> list[str]:
    # A manifest written to stdout is the output asked for, not a report about it: -q keeps it whole.
    written = cast("ManifestWritten", result)     # known by its type's name, as the renderers below
    if type(result).__name__ == "ManifestWritten" and written.output == STDOUT:
        return manifest_lines(written)
    return [summary_line(result)]


# --- scan ------------------------------------------------------------------------------------------

def expert_lines(t: TensorScan) -> Iterator[str]:
    """A mixture-of-experts tensor's findings per expert (every finding counted, not only those listed)."""
    if t.n_experts is None or not t.experts:
        return
    yield f"  experts with findings: {len(t.experts)} of {t.n_experts}"
    for e in t.experts:
        yield f"  expert {e.expert}: {counts_text(e.counts)}"


def scan_lines(report: ScanReport) -> Iterator[str]:
    total_bytes = report.stats.bytes
    yield (f"model {escape_path(report.model)}: {plural(len(report.tensors), 'tensor')}, "
           f"{plural(total_bytes, 'byte')} of tensor data scanned in {plural(len(report.files), 'file')}")
    if not report.tensors and report.header_checked:    # a vocabulary-only file: its header was checked
        yield f"header checked: {', '.join(escape(k) for k in report.header_checked)}"
    for d in report.digests:
        for algorithm, digest in d.digests.items():
            yield f"{algorithm}  {digest}  {escape_path(d.path)}"
    yield from (describe_structure(s) for s in report.structure)
    yield from (describe_metadata(m) for m in report.metadata)
    yield from (describe_template(t) for t in report.templates)
    not_applicable = []
    for t in report.tensors:
        if t.check == CHECK_NONE:
            not_applicable.append(escape(t.name))
            continue
        if not t.total:
            continue
        yield describe_tensor(t)
        for finding in t.findings:
            yield "  " + describe_finding(finding, report.max_abs)
        if t.truncated:
            yield f"  ... {t.total - len(t.findings)} more not listed (--limit)"
        yield from expert_lines(t)
    if not_applicable:
        yield f"not applicable (integer data): {', '.join(not_applicable)}"
    if not report.complete:
        yield "incomplete: stopped at the first finding (--fail-fast)"
    flagged = sum(1 for t in report.tensors if t.total)
    found = ([f"findings in {flagged} of {plural(len(report.tensors), 'tensor')}: {counts_text(report.counts)}"]
             if flagged else [])
    found += _header_counts(report)
    if report.counts.get("anomaly"):
        yield ("note: an anomaly is a likely, not a certain, flipped bit: `ggaudit verify` against a manifest "
               "or `ggaudit diff` against another copy confirms it")
    advice = _advice(report)
    if found:
        yield f"result: {'; '.join([*found, *advice])}"
    else:
        yield f"result: clean: {_clean_text(report)}{''.join('; ' + a for a in advice)}"


def _clean_text(report: ScanReport) -> str:
    """What a clean scan found nothing of: in the tensors, and in a vocabulary-only file's header."""
    if not report.tensors:
        return f"nothing wrong in {', '.join(escape(k) for k in report.header_checked)}; no tensor data to scan"
    also = [w for w, on in (("outliers", report.max_abs is not None), ("anomalous scales", report.anomalies)) if on]
    return f"no non-finite values{''.join(' or ' + w for w in also)}"


def _advice(report: ScanReport) -> list[str]:
    """``1 template warning, 2 template notes (advice: ...)``: the template findings that do not fail a run."""
    by_severity = Counter(t.severity for t in report.advice)
    if not by_severity:
        return []
    counted = ", ".join(plural(n, f"template {severity}") for severity, n in sorted(by_severity.items(), reverse=True))
    return [f"{counted} (advice: a run fails on them with --fail-on template)"]


def _header_counts(report: ScanReport) -> list[str]:
    """``1 structure finding``, ``2 metadata findings``, ``1 template finding``: those there are."""
    counted = ((report.structure, "structure finding"), (report.metadata, "metadata finding"),
               (report.failing_templates, "template finding"))
    return [plural(len(found), noun) for found, noun in counted if found]


def scan_summary(report: ScanReport) -> str:
    """``model a.gguf: 2 findings (nan 1, +inf 1)``, or ``model a.gguf: clean``."""
    total = sum(report.counts.values())
    found = [f"{plural(total, 'finding')} ({_nonzero(report.counts)})"] if total else []
    found += _header_counts(report)
    said = [*(found or ["clean"]), *_advice(report)]
    stop = " (stopped at the first finding)" if not report.complete else ""
    return f"model {escape_path(report.model)}: {', '.join(said)}{stop}"


def _nonzero(counts: Mapping[str, int]) -> str:
    return ", ".join(f"{k} {counts[k]}" for k in KINDS if counts.get(k))


# --- verify ----------------------------------------------------------------------------------------

def verify_lines(report: VerifyReport, *, limit: int | None = None) -> list[str]:
    """The files that matched, the first ``limit`` mismatches (None: all) and how many more, whether the
    model looks like another one than the manifest's, then the summary."""
    lines = [f"verify {report.kind}: {escape_path(report.source)}"]
    for item in report.checked:
        if item.ok:
            digest = f" {item.digest}" if item.digest else ""    # gguf-layout: a structure check, no digest
            source = digest_source(item)
            lines.append(f"ok {item.algorithm}{digest}: file {escape_path(item.path)}, {plural(item.size, 'byte')} "
                         f"({escape_path(item.subject)}){'' if source is None else '; ' + source}")
    listed = report.mismatches if limit is None else report.mismatches[:limit]
    lines.extend(line for d in list(report.diagnostics())[:len(listed)] for line in d.lines)
    if len(report.mismatches) > len(listed):
        rest = len(report.mismatches) - len(listed)
        lines.append(f"... and {plural(rest, 'more mismatch', 'more mismatches')} (--limit)")
    if report.another_model:
        lines.append(another_model_line(report))
    stop = " (stopped at the first mismatch)" if report.stopped_early else ""
    stats = report.stats
    unchecked = f", {stats.unchecked} not hashed (quick)" if stats.unchecked else ""
    lines.append(f"summary: {plural(stats.files, 'file')} checked, {cached_text(stats.cached)}, "
                 f"{plural(stats.bytes_hashed, 'byte')} hashed{unchecked}, "
                 f"{plural(len(report.mismatches), 'mismatch', 'mismatches')}{stop}")
    return lines


def digest_source(item: Checked) -> str | None:
    """``digest from the cache of DATE, not read again`` for a file whose digest the cache gave, else None
    (its bytes were read)."""
    from ...verify.report import not_read_again

    return None if item.cached_at is None else not_read_again(item.cached_at)


def cached_text(cached: int) -> str:
    """How many files' digests the cache gave: ``0 from the cache``, ``2 from the cache (not read again)``."""
    return f"{cached} from the cache" + (" (not read again)" if cached else "")


def another_model_line(report: VerifyReport) -> str:
    """Said when nearly every tensor differs from the manifest (VerifyReport.another_model)."""
    s = report.stats
    return (f"{s.tensors_differing} of {plural(s.tensors, 'tensor')} {_verb(s.tensors_differing)} from the "
            f"manifest: this looks like another model (or another build of it), not damage to this one")


def verify_summary(report: VerifyReport) -> str:
    """``verify manifest a.gguf: 3 mismatches (tensor-data 2, sha256 1)``, or ``...: clean, 2 files checked``."""
    head = f"verify {report.kind} {escape_path(report.source)}"
    if report.ok:
        cached = f", {cached_text(report.stats.cached)}" if report.stats.cached else ""
        return f"{head}: clean, {plural(report.stats.files, 'file')} checked{cached}"
    kinds: dict[str, int] = {}
    for m in report.mismatches:
        kinds[m.kind] = kinds.get(m.kind, 0) + 1
    found = ", ".join(f"{k} {n}" for k, n in kinds.items())
    other = "; looks like another model" if report.another_model else ""
    stop = " (stopped at the first mismatch)" if report.stopped_early else ""
    return f"{head}: {plural(len(report.mismatches), 'mismatch', 'mismatches')} ({found}){other}{stop}"


# --- info and metadata -----------------------------------------------------------------------------

def _meta_line(key: str, entry: MetaValue) -> str:
    return f"  {escape(key)} ({entry.type.name.lower()}) = {show_value(entry.value)}"


def info_lines(info: ModelInfo) -> list[str]:
    model = info.model
    lines = [f"model: {escape_path(model.source)}"]
    for f in model.files:
        lines.append(f"file: {escape_path(f.path)}: GGUF v{f.version}, {plural(f.size, 'byte')}, alignment "
                     f"{f.alignment}, data at offset {f.data_offset}, {plural(len(f.tensors), 'tensor')}, "
                     f"{plural(len(f.metadata), 'metadata key')}")
    lines.append(f"architecture: {escape(model.architecture or '(none)')}")
    lines.append(f"tensors: {len(model.tensors)}")
    lines.append("metadata:")
    lines.extend(_meta_line(k, v) for k, v in model.metadata.items())
    lines.append("tensors:")
    width = max([4] + [len(escape(t.name)) for t in model.tensors])
    lines.append(f"  {'name':<{width}}  {'type':<8} {'shape':<20} {'offset':>14} {'bytes':>14}")
    for t in model.tensors:
        shape = "x".join(str(n) for n in t.shape)
        lines.append(f"  {escape(t.name):<{width}}  {t.ggml_type.name:<8} {shape:<20} {t.offset:>14} {t.nbytes:>14}")
    lines.append("bytes per type:")
    lines.extend(f"  {name:<8} {nbytes:>14}" for name, nbytes in bytes_per_type(model.tensors).items())
    return lines


def info_summary(info: ModelInfo) -> str:
    model = info.model
    return (f"model {escape_path(model.source)}: {plural(len(model.tensors), 'tensor')}, "
            f"{plural(len(model.metadata), 'metadata key')}")


# --- diff ------------------------------------------------------------------------------------------

def diff_lines(report: DiffReport) -> list[str]:
    lines = [f"diff a: {escape_path(report.a)}", f"diff b: {escape_path(report.b)}"]
    # Metadata, tensors in one model only, changed layouts, data, structure: the diagnostics' order.
    lines.extend(line for d in report.diagnostics() for line in d.lines)
    stop = " (stopped at the first difference)" if report.stopped_early else ""
    lines.append(f"summary: {len(report.identical)} identical, {len(report.data_diffs)} "
                 f"{_verb(len(report.data_diffs))}, {len(report.layout_changes)} changed type or shape, "
                 f"{len(report.only_in_a)} only in a, {len(report.only_in_b)} only in b, "
                 f"{plural(len(report.metadata), 'metadata key')} {_verb(len(report.metadata))}, "
                 f"{plural(report.structure_differences, 'structure difference')}{stop}")
    return lines


def diff_summary(report: DiffReport) -> str:
    """``diff a.gguf b.gguf: 1 tensor with other data, 2 metadata keys differ``, or ``...: same``."""
    found = [text for n, text in (
        (len(report.data_diffs), f"{plural(len(report.data_diffs), 'tensor')} with other data"),
        (len(report.layout_changes), f"{len(report.layout_changes)} changed type or shape"),
        (len(report.only_in_a), f"{len(report.only_in_a)} only in a"),
        (len(report.only_in_b), f"{len(report.only_in_b)} only in b"),
        (len(report.metadata), f"{plural(len(report.metadata), 'metadata key')} {_verb(len(report.metadata))}"),
        (report.structure_differences, plural(report.structure_differences, "structure difference")),
    ) if n]
    stop = " (stopped at the first difference)" if report.stopped_early else ""
    same = "same metadata and tensors"
    return f"diff {escape_path(report.a)} {escape_path(report.b)}: {', '.join(found) or same}{stop}"


# --- rows ------------------------------------------------------------------------------------------

def _geometry(g: Geometry) -> str:
    return f"4096-byte page {g.page}, 512-byte sector {g.sector}, 64 KiB {g.window_64k}"


def rows_lines(report: RowsReport) -> list[str]:
    r = report
    lines = [f"file {escape_path(r.file)}",
             f"tensor {escape(r.tensor)}: {r.ggml_type}, {plural(r.n_cols, 'column')}, {r.row_bytes}-byte rows, "
             f"{plural(r.n_rows, 'row')} at offset {r.table_offset}",
             f"rows: {r.rows_checked} ({escape(r.selection)}); crossing: {_geometry(r.geometry)}"]
    for s in r.stats:
        cache = (f", cache {plural(s.cache_hits, 'hit')} / {plural(s.cache_misses, 'miss', 'misses')} / "
                 f"{plural(s.cache_evictions, 'eviction')}" if s.cache_hits or s.cache_misses else "")
        lines.append(f"{s.mode} ({s.stage}): {plural(s.rows, 'row')}, {plural(s.reads, 'read')}, "
                     f"{plural(s.bytes, 'byte')}, alignment {s.alignment} ({s.alignment_source}), "
                     f"{plural(s.buffers, 'buffer')}{cache}, {s.seconds:.3f} s")
    if r.exercised is not None:
        lines.append(f"note: {r.exercised.text}")
    if r.published is not None:
        from ...rows.lines import published_text

        lines.append(f"published: {published_text(r.published)}")
    for w in r.warnings:
        lines.append(f"warning: {w}")
    if r.capture is not None:
        c = r.capture
        diff = f", max abs diff {c.max_abs_diff:g}" if c.max_abs_diff is not None else ""
        if c.kind == "decoded" and c.max_abs_diff is None and c.mismatched_rows:
            diff = ", max abs diff unbounded (a NaN or Inf differs)"
        lines.append(f"capture {escape_path(c.file)}: {c.rows} {c.kind} {'row' if c.rows == 1 else 'rows'} "
                     f"({c.dtype}), {c.mismatched_rows} {_verb(c.mismatched_rows)}{diff}")
    # The mismatches and short reads kept; the rows holding NaN or Inf are said in the result line.
    lines.extend(line for d in r.diagnostics() if d.kind != "rows/nonfinite" for line in d.lines)
    if r.mismatch_count > len(r.mismatches):
        more = r.mismatch_count - len(r.mismatches)
        lines.append(f"... {plural(more, 'more mismatch', 'more mismatches')} not shown")
    if r.short_read_count > len(r.short_reads):
        lines.append(f"... {plural(r.short_read_count - len(r.short_reads), 'more short read')} not shown")
    if r.read_error_count > len(r.read_errors):
        lines.append(f"... {plural(r.read_error_count - len(r.read_errors), 'more read error')} not shown")
    if r.unstable_count > len(r.unstable):
        lines.append(f"... {plural(r.unstable_count - len(r.unstable), 'more unstable read')} not shown")
    lines.append(_rows_result(r))
    return lines


def _rows_result(r: RowsReport) -> str:
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
    from ...rows.lines import finite_text

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


def rows_summary(report: RowsReport) -> str:
    """``rows FILE, tensor NAME: `` and the verdict of the result line."""
    verdict = _rows_result(report).removeprefix("result: ")
    return f"rows {escape_path(report.file)}, tensor {escape(report.tensor)}: {verdict}"


# --- check ---------------------------------------------------------------------------------------

def check_lines(report: CheckReport) -> Iterable[str]:
    """The verdict first (ggaudit.check.lines words it), then the evidence and the next step."""
    from ...check.lines import check_lines as words

    return words(report)


def check_summary(report: CheckReport) -> str:
    from ...check.lines import headline

    return headline(report)


# --- manifest --------------------------------------------------------------------------------------

def manifest_lines(written: ManifestWritten) -> list[str]:
    """What was written where; with ``-o -`` the manifest itself (stdout is where it was written)."""
    from ...verify.manifests.llama_hash import LlamaHashManifest
    from ...verify.manifests.tensor import tensor_manifest_text

    built = written.manifest
    if isinstance(built, LlamaHashManifest):
        return llama_hash_lines(built, written.output)
    if written.output == STDOUT:
        return tensor_manifest_text(built).removesuffix("\n").split("\n")
    groups = sum(len(t.groups) for t in built.tensors)
    lines = [f"wrote {escape_path(written.output)}: {plural(len(built.files), 'file')}, "
             f"{plural(len(built.tensors), 'tensor')}, {plural(groups, 'row group')}"]
    lines.extend(f"  {escape(f.name)}: {plural(f.size, 'byte')}, sha256 {f.sha256}" for f in built.files)
    return lines


def llama_hash_lines(built: LlamaHashManifest, output: str) -> list[str]:
    """With ``-o -`` the lines as llama-gguf-hash prints them: a name holding a control or invisible
    character is shown escaped here (the file written with ``-o FILE`` holds it exactly)."""
    from ...verify.manifests.llama_hash import llama_hash_text

    if output == STDOUT:
        return [escape_message(line) for line in llama_hash_text(built).removesuffix("\n").split("\n")]
    models = [h for h in built.lines if h.tensor is None]
    tensors = len({(h.path, h.tensor) for h in built.lines if h.tensor is not None})
    lines = [f"wrote {escape_path(output)}: {plural(len(built.lines), 'llama-gguf-hash line')} "
             f"({', '.join(built.types)}), {plural(tensors, 'tensor')}"]
    lines.extend(f"  {escape_path(h.path)}: {h.type} {h.hex} (all tensor data)" for h in models)
    return lines


def manifest_summary(written: ManifestWritten) -> str:
    """What was written where, in one line (the first of :func:`manifest_lines` for a file)."""
    if written.output == STDOUT:
        return "manifest written to stdout"
    first: str = manifest_lines(written)[0]
    return first


#: Each report type's lines and summary, by the type's name (``type(report).__name__``): naming a type
#: imports nothing, so rendering a scan does not load the rows, verify and diff jobs.
_RENDERERS: dict[str, Callable[[Any, Rendering], Iterable[str]]] = {
    "ScanReport": lambda r, _: scan_lines(r), "VerifyReport": lambda r, how: verify_lines(r, limit=how.limit),
    "RowsReport": lambda r, _: rows_lines(r), "DiffReport": lambda r, _: diff_lines(r),
    "ModelInfo": lambda r, _: info_lines(r), "ManifestWritten": lambda r, _: manifest_lines(r),
    "CheckReport": lambda r, _: check_lines(r),
}

_SUMMARIES: dict[str, Callable[[Any], str]] = {
    "ScanReport": scan_summary, "VerifyReport": verify_summary, "RowsReport": rows_summary,
    "DiffReport": diff_summary, "ModelInfo": info_summary, "ManifestWritten": manifest_summary,
    "CheckReport": lambda r: check_summary(r),
}
