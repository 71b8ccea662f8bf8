"""The text reporter: each report as lines for a terminal (fio style: where, then expected before actual).

Every name, path and value read from a file is escaped (ggaudit.text); offsets are decimal, raw bits hex.
A target that failed prints nothing here: its one-line error goes to stderr (see ``emit_outcomes``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from ...batch import Outcome, Report
from ...format.info import ModelInfo, bytes_per_type
from ...format.layout import ArrayValue, MetaValue
from ...rows.replay import Geometry, Mismatch, RowsReport, ShortRead
from ...scan.report import CAUSE_OVERFLOW, CHECK_NONE, KINDS, Finding, ScanReport, StructureFinding, TensorScan
from ...text import escape, escape_message, escape_path
from ...verify.diff import DiffReport, TensorDataDiff
from ...verify.diff_meta import MetadataChange
from ...verify.manifests.llama_hash import LlamaHashManifest, llama_hash_text
from ...verify.manifests.tensor import tensor_manifest_text
from ...verify.run import Mismatch as VerifyMismatch
from ...verify.run import VerifyReport
from ..common import STDOUT, ManifestWritten
from . import DEFAULT, Rendering

NAME = "text"


def report(outcomes: Sequence[Outcome[Report]], rendering: Rendering = DEFAULT) -> str:
    """Each report in turn, in the order the targets were given."""
    return "".join(line + "\n" for o in outcomes if o.result is not None for line in lines(o.result))


def lines(result: Report) -> Iterable[str]:
    render = _RENDERERS.get(type(result))
    if render is None:      # a new report type needs its lines here
        raise TypeError(f"no text rendering of {type(result).__name__}")
    return render(result)


# --- scan ------------------------------------------------------------------------------------------

def format_value(value: float | None) -> str:
    """A float for people: short, exact enough to recognise (``7.92e+06``), ``nan``/``+inf``/``-inf``."""
    if value is None:
        return "-"
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "+inf" if value > 0 else "-inf"
    return f"{value:.6g}"


def location(path: str, offset: int, length: int, *, tensor: str | None = None, expert: int | None = None,
             row: int | None = None, block: int | None = None, column: int | None = None,
             width: int | None = None) -> str:
    """Where a finding is, fio style: file, absolute offset and length first, then the tensor position."""
    parts = [f"file {escape_path(path)} offset {offset}, length {length}"]
    where = []
    if tensor is not None:
        where.append(f"tensor {escape(tensor)}")
    if expert is not None:
        where.append(f"expert {expert}")
    if row is not None:
        where.append(f"row {row}")
    if block is not None:
        where.append(f"block {block}")
    if column is not None:
        where.append(f"column {column}" if width in (None, 1) else f"columns {column}..{column + width - 1}")
    if where:
        parts.append(", ".join(where))
    return ": ".join(parts)


def describe_finding(f: Finding, max_abs: float | None = None) -> str:
    """One fio-like line: where, then expected before actual, in hex."""
    where = location(f.path, f.offset, f.size, tensor=f.tensor, expert=f.expert, row=f.row, block=f.block,
                     column=f.column, width=f.width)
    expected = f"|x| <= {format_value(max_abs)}" if f.kind == "outlier" else "finite"
    actual = f"{f.bits} ({f.kind if f.value is None else format_value(f.value)})"
    if f.cause == CAUSE_OVERFLOW:
        actual += f", which decodes to {f.kind}"
    return f"{f.kind} at {where}, field {escape(f.field)}: expected {expected}, got {actual}"


def _plural(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def counts_text(counts: Mapping[str, int]) -> str:
    return ", ".join(f"{k} {counts[k]}" for k in KINDS)


def describe_structure(s: StructureFinding) -> str:
    """One line: what and where (file, offset, length; the tensors on either side), expected before actual."""
    after = "the header" if s.after is None else f"tensor {escape(s.after)}"
    where = f"after {after}" if s.before is None else f"between {after} and tensor {escape(s.before)}"
    return (f"structure {s.kind} at {location(s.path, s.offset, s.length)}: {where}: "
            f"expected {s.expected}, got {s.actual}")


def expert_lines(t: TensorScan) -> Iterator[str]:
    """A mixture-of-experts tensor's findings per expert (every finding counted, not only those listed)."""
    if t.n_experts is None or not t.experts:
        return
    yield f"  experts with findings: {len(t.experts)} of {t.n_experts}"
    for e in t.experts:
        yield f"  expert {e.expert}: {counts_text(e.counts)}"


def scan_lines(report: ScanReport) -> Iterator[str]:
    total_bytes = report.stats.bytes
    yield (f"model {escape_path(report.model)}: {_plural(len(report.tensors), 'tensor')}, {total_bytes} bytes of "
           f"tensor data scanned in {_plural(len(report.files), 'file')}")
    for d in report.digests:
        for algorithm, digest in d.digests.items():
            yield f"{algorithm}  {digest}  {escape_path(d.path)}"
    yield from (describe_structure(s) for s in report.structure)
    not_applicable = []
    for t in report.tensors:
        if t.check == CHECK_NONE:
            not_applicable.append(escape(t.name))
            continue
        if not t.total:
            continue
        shown = ", ".join(str(n) for n in t.shape)
        yield (f"tensor {escape(t.name)} ({t.type} [{shown}]): {counts_text(t.counts)}; "
               f"max finite |x| {format_value(t.max_abs)}")
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
    found = [f"findings in {flagged} of {len(report.tensors)} tensors: {counts_text(report.counts)}"] if flagged else []
    if report.structure:
        found.append(_plural(len(report.structure), "structure finding"))
    if found:
        yield f"result: {'; '.join(found)}"
    else:
        yield f"result: clean: no non-finite values{' or outliers' if report.max_abs is not None else ''}"


# --- verify ----------------------------------------------------------------------------------------

def describe_mismatch(m: VerifyMismatch) -> list[str]:
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


def verify_lines(report: VerifyReport) -> list[str]:
    lines = [f"verify {report.kind}: {escape_path(report.source)}"]
    for item in report.checked:
        if item.ok:
            digest = f" {item.digest}" if item.digest else ""    # gguf-layout: a structure check, no digest
            lines.append(f"ok {item.algorithm}{digest}: file {escape_path(item.path)}, {item.size} bytes "
                         f"({escape_path(item.subject)})")
    for m in report.mismatches:
        lines.extend(describe_mismatch(m))
    stop = " (stopped at the first mismatch)" if report.stopped_early else ""
    stats = report.stats
    unchecked = f", {stats.unchecked} not hashed (quick)" if stats.unchecked else ""
    lines.append(f"summary: {stats.files} files checked, {stats.cached} from the cache, {stats.bytes_hashed} bytes "
                 f"hashed{unchecked}, {len(report.mismatches)} mismatches{stop}")
    return lines


# --- info and metadata -----------------------------------------------------------------------------

#: Longest string a metadata value shows before it is cut.
MAX_SHOWN = 80


def show_value(value: Any) -> str:
    """A metadata value for a terminal: escaped, quoted strings cut at MAX_SHOWN, arrays as type x count
    and their first elements."""
    if isinstance(value, ArrayValue):
        head = ", ".join(show_value(v) for v in value.head)
        more = ", ..." if value.count > len(value.head) else ""
        return f"[{value.elem_type.name.lower()} x {value.count}] [{head}{more}]"
    if isinstance(value, str):
        # Quotes inside are escaped too, or a tokenizer's quote token reads as three quotes. The
        # backslash itself is already escaped, so a backslash-quote can only mean a quote.
        text = escape(value).replace("'", "\\'")
        if len(text) > MAX_SHOWN:
            return f"'{text[:MAX_SHOWN]}...' ({len(value)} chars)"
        return f"'{text}'"
    return str(value)


def _meta_line(key: str, entry: MetaValue) -> str:
    return f"  {escape(key)} ({entry.type.name.lower()}) = {show_value(entry.value)}"


def info_lines(info: ModelInfo) -> list[str]:
    model = info.model
    lines = [f"model: {escape_path(model.source)}"]
    for f in model.files:
        lines.append(f"file: {escape_path(f.path)}: GGUF v{f.version}, {f.size} bytes, alignment {f.alignment}, "
                     f"data at offset {f.data_offset}, {len(f.tensors)} tensors, {len(f.metadata)} metadata keys")
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


# --- diff ------------------------------------------------------------------------------------------

def describe_metadata_change(c: MetadataChange) -> str:
    key = escape(c.key)
    if c.what == "only-in-a":
        return f"ONLY-IN-A metadata {key} ({c.type_a}) = {show_value(c.value_a)}"
    if c.what == "only-in-b":
        return f"ONLY-IN-B metadata {key} ({c.type_b}) = {show_value(c.value_b)}"
    if c.what == "type":
        return f"CHANGED metadata {key}: type: {c.type_a} -> {c.type_b}"
    line = f"CHANGED metadata {key}: value: {show_value(c.value_a)} -> {show_value(c.value_b)}"
    if c.element is not None:
        gone = "(none)"
        line += (f", first at element {c.element}: "
                 f"{gone if c.element_a is None else show_value(c.element_a)} -> "
                 f"{gone if c.element_b is None else show_value(c.element_b)}")
    return line


def _shape(shape: tuple[int, ...]) -> str:
    return "[" + ", ".join(str(n) for n in shape) + "]"


def describe_data_diff(d: TensorDataDiff) -> list[str]:
    """fio style: where (files, offsets, length; tensor, row, block, column), then A before B in hex."""
    f = d.first
    cols = f"column {f.column}" if f.columns == 1 else f"columns {f.column}-{f.column + f.columns - 1}"
    return [
        f"DIFFER tensor {escape(d.name)} ({d.ggml_type} {_shape(d.shape)}): {d.rows_differing} of {d.n_rows} "
        f"rows differ",
        f"  first at row {f.row}, block {f.block}, {cols}, byte {f.byte_in_block} of the {f.block_bytes}-byte block",
        f"  a: file {escape_path(d.path_a)}, offset {f.offset_a}, length {f.block_bytes}",
        f"  b: file {escape_path(d.path_b)}, offset {f.offset_b}, length {f.block_bytes}",
        f"  expected (a): {f.raw_a.hex()}",
        f"  actual   (b): {f.raw_b.hex()}",
    ]


def diff_lines(report: DiffReport) -> list[str]:
    lines = [f"diff a: {escape_path(report.a)}", f"diff b: {escape_path(report.b)}"]
    lines.extend(describe_metadata_change(c) for c in report.metadata)
    lines.extend(f"ONLY-IN-A tensor {escape(name)}" for name in report.only_in_a)
    lines.extend(f"ONLY-IN-B tensor {escape(name)}" for name in report.only_in_b)
    for c in report.layout_changes:
        lines.append(f"CHANGED tensor {escape(c.name)}: {c.what}: {c.type_a} {_shape(c.shape_a)} -> "
                     f"{c.type_b} {_shape(c.shape_b)}")
    for d in report.data_diffs:
        lines.extend(describe_data_diff(d))
    stop = " (stopped at the first difference)" if report.stopped_early else ""
    lines.append(f"summary: {len(report.identical)} identical, {len(report.data_diffs)} differ, "
                 f"{len(report.layout_changes)} changed type or shape, {len(report.only_in_a)} only in a, "
                 f"{len(report.only_in_b)} only in b, {len(report.metadata)} metadata keys differ{stop}")
    return lines


# --- rows ------------------------------------------------------------------------------------------

def _yes(value: bool | None) -> str:
    return "unknown" if value is None else ("yes" if value else "no")


def _differ(n: int, unit: str) -> str:
    return f"{n} {unit} differ" if n != 1 else f"1 {unit.rstrip('s')} differs"


def _geometry(g: Geometry) -> str:
    return f"4096-byte page {g.page}, 512-byte sector {g.sector}, 64 KiB {g.window_64k}"


def describe_row_mismatch(m: Mismatch) -> list[str]:
    """A mismatch the way fio reports a verify failure: where, then expected before actual."""
    other = f" (row {m.other_row})" if m.other_row is not None else ""
    lines = [
        f"mismatch: {m.mode} row {m.row} [{m.kind}{other}] ({m.stage})",
        f"  file {escape_path(m.file)}, offset {m.row_offset} (0x{m.row_offset:x}), length {m.length}",
        f"  tensor {escape(m.tensor)}, row {m.row}, block {m.block}, column {m.column} "
        f"(byte {m.byte} of the row, offset {m.offset} (0x{m.offset:x}))",
        f"  expected: {m.expected}",
        f"  actual:   {m.actual}",
        f"  {_differ(m.differing, m.unit)}; decoded row finite: expected "
        f"{_yes(m.expected_finite)}, actual {_yes(m.actual_finite)}"
        + (f"; max abs diff {m.max_abs_diff:g}" if m.max_abs_diff is not None else ""),
    ]
    if m.detail:
        lines.append(f"  {m.detail}")
    return lines


def describe_short_read(s: ShortRead) -> str:
    return (f"short read: {s.mode} ({s.stage}) file {escape_path(s.file)}, offset {s.offset} (0x{s.offset:x}), "
            f"asked {s.requested} bytes, got {s.returned}, not at end of file")


def rows_lines(report: RowsReport) -> list[str]:
    r = report
    lines = [f"file {escape_path(r.file)}",
             f"tensor {escape(r.tensor)}: {r.ggml_type}, {r.n_cols} columns, {r.row_bytes}-byte rows, "
             f"{r.n_rows} rows at offset {r.table_offset}",
             f"rows: {r.rows_checked} ({escape(r.selection)}); crossing: {_geometry(r.geometry)}"]
    for s in r.stats:
        cache = f", cache {s.cache_hits} hits / {s.cache_misses} misses / {s.cache_evictions} evictions" \
            if s.cache_hits or s.cache_misses else ""
        lines.append(f"{s.mode} ({s.stage}): {s.rows} rows, {s.reads} reads, {s.bytes} bytes, "
                     f"alignment {s.alignment} ({s.alignment_source}), {s.buffers} buffers{cache}, "
                     f"{s.seconds:.3f} s")
    for w in r.warnings:
        lines.append(f"warning: {w}")
    if r.capture is not None:
        c = r.capture
        diff = f", max abs diff {c.max_abs_diff:g}" if c.max_abs_diff is not None else ""
        lines.append(f"capture {escape_path(c.file)}: {c.rows} {c.kind} rows ({c.dtype}), "
                     f"{c.mismatched_rows} differ{diff}")
    for m in r.mismatches:
        lines.extend(describe_row_mismatch(m))
    lines.extend(describe_short_read(s) for s in r.short_reads)
    if r.mismatch_count > len(r.mismatches):
        lines.append(f"... {r.mismatch_count - len(r.mismatches)} more mismatches not shown")
    if r.short_read_count > len(r.short_reads):
        lines.append(f"... {r.short_read_count - len(r.short_reads)} more short reads not shown")
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
        verdict = (f"{r.mismatch_count} mismatches ({kinds}), {r.short_read_count} short reads; "
                   f"mismatched rows crossing: {_geometry(r.mismatch_geometry)}")
    if r.nonfinite_rows:
        verdict += f"; {_nonfinite(r)}"
    return f"result: {'clean: ' if r.ok and r.compared else ''}{verdict}"


def _delivered(r: RowsReport) -> str:
    if r.capture is None:
        return "every path delivered the file's bytes"
    if not r.stats:
        return f"the capture matched the file in all {r.capture.rows} rows (no read path run)"
    return "every path and the capture delivered the file's bytes"


def _nonfinite(r: RowsReport) -> str:
    f = r.first_nonfinite
    rows = f"{r.nonfinite_rows} selected row{'s hold' if r.nonfinite_rows != 1 else ' holds'} non-finite values"
    if f is None:
        return rows
    where = f"column {f.column}" if f.field == "value" else f"block {f.block}, field {escape(f.field)}"
    how = f"{f.bits} {f.kind}" + (", which overflows when decoded" if f.cause == CAUSE_OVERFLOW else "")
    return f"{rows} (first: row {f.row}, {where} = {how}, offset {f.offset})"


# --- manifest --------------------------------------------------------------------------------------

def manifest_lines(written: ManifestWritten) -> list[str]:
    """What was written where; with ``-o -`` the manifest itself (stdout is where it was written)."""
    built = written.manifest
    if isinstance(built, LlamaHashManifest):
        return llama_hash_lines(built, written.output)
    if written.output == STDOUT:
        return tensor_manifest_text(built).removesuffix("\n").split("\n")
    groups = sum(len(t.groups) for t in built.tensors)
    lines = [f"wrote {escape_path(written.output)}: {len(built.files)} file(s), {len(built.tensors)} tensors, "
             f"{groups} row groups"]
    lines.extend(f"  {escape(f.name)}: {f.size} bytes, sha256 {f.sha256}" for f in built.files)
    return lines


def llama_hash_lines(built: LlamaHashManifest, output: str) -> list[str]:
    """With ``-o -`` the lines as llama-gguf-hash prints them: a name holding a control or invisible
    character is shown escaped here (the file written with ``-o FILE`` holds it exactly)."""
    if output == STDOUT:
        return [escape_message(line) for line in llama_hash_text(built).removesuffix("\n").split("\n")]
    models = [h for h in built.lines if h.tensor is None]
    tensors = len({(h.path, h.tensor) for h in built.lines if h.tensor is not None})
    lines = [f"wrote {escape_path(output)}: {len(built.lines)} llama-gguf-hash lines ({', '.join(built.types)}), "
             f"{tensors} tensors"]
    lines.extend(f"  {escape_path(h.path)}: {h.type} {h.hex} (all tensor data)" for h in models)
    return lines


_RENDERERS: dict[type[Any], Callable[[Any], Iterable[str]]] = {
    ScanReport: scan_lines, VerifyReport: verify_lines, RowsReport: rows_lines, DiffReport: diff_lines,
    ModelInfo: info_lines, ManifestWritten: manifest_lines,
}
