"""The text reporter: each report as lines for a terminal (fio style: where, then expected before actual).

Every name, path and value read from a file is escaped (ggaudit.text); offsets are decimal, raw bits hex,
floats the shortest text that reads back as the stored value (``1e-06`` for a float32, not
``9.999999974752427e-07``). Counts agree with their noun (``1 mismatch``). A value of a float tensor
is an element at a column; a quantized tensor's, a field of a block. A target that failed prints nothing
here: its one-line error goes to stderr (see ``emit_outcomes``). With several targets the report ends
with one line counting them; ``-q`` shows each report as its one-line summary (:func:`summary_line`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from ...batch import Outcome, Report
from ...format.blocks import LAYOUTS, BlockLayout, GGMLQuantizationType
from ...format.info import ModelInfo, bytes_per_type
from ...format.layout import ArrayValue, MetaValue
from ...rows.replay import Geometry, Mismatch, RowsReport, ShortRead
from ...scan.report import (CAUSE_DECODED, CAUSE_OVERFLOW, CHECK_NONE, KINDS, Finding, ScanReport,
                            StructureFinding, TensorScan)
from ...text import escape, escape_message, escape_path
from ...verify.diff import DiffReport, FirstDifference, LayoutChange, TensorDataDiff, ValueChange
from ...verify.diff_meta import MetadataChange
from ...verify.diff_structure import CHANGED, ONLY_IN_A, RegionChange, StructureDiff
from ...verify.manifests.llama_hash import LlamaHashManifest, llama_hash_text
from ...verify.manifests.tensor import tensor_manifest_text
from ...verify.run import Checked, VerifyReport, not_read_again
from ...verify.run import Mismatch as VerifyMismatch
from ..common import STDOUT, ManifestWritten
from . import DEFAULT, Rendering

NAME = "text"


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
    render = _RENDERERS.get(type(result))
    if render is None:      # a new report type needs its lines here
        raise TypeError(f"no text rendering of {type(result).__name__}")
    return render(result, rendering)


def run_summary(outcomes: Sequence[Outcome[Report]]) -> str:
    """The last line of a run of several targets: ``3 models: 1 with findings, 1 clean, 1 error``."""
    errors = sum(1 for o in outcomes if o.error is not None)
    findings = sum(1 for o in outcomes if o.result is not None and not o.result.ok)
    clean = len(outcomes) - errors - findings
    return f"{plural(len(outcomes), 'model')}: {findings} with findings, {clean} clean, {plural(errors, 'error')}"


def summary_line(result: Report) -> str:
    """One line saying what a report found: ``model a.gguf: 2 findings (nan 1, +inf 1)``, ``... clean``."""
    summarize = _SUMMARIES.get(type(result))
    if summarize is None:   # a new report type needs its summary here
        raise TypeError(f"no text summary of {type(result).__name__}")
    return summarize(result)


def _quiet_lines(result: Report) -> list[str]:
    # A manifest written to stdout is the output asked for, not a report about it: -q keeps it whole.
    if isinstance(result, ManifestWritten) and result.output == STDOUT:
        return manifest_lines(result)
    return [summary_line(result)]


def plural(n: int, noun: str, many: str | None = None) -> str:
    """``1 file``, ``2 files``; ``many`` for a noun whose plural is not noun + s (``mismatches``)."""
    return f"{n} {noun if n == 1 else many or noun + 's'}"


def _verb(n: int, verb: str = "differ") -> str:
    """The verb agreeing with a count as subject: ``1 differs``, ``2 differ``."""
    return verb + "s" if n == 1 else verb


# --- scan ------------------------------------------------------------------------------------------

def _bf16(x: float) -> float:
    """``x`` rounded to bfloat16 (via float32, to nearest even), as float."""
    bits = int(np.float32(x).view(np.uint32))
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return float(np.uint32(bits).view(np.float32))


#: How a text read back is rounded to each stored width (Encoding values); others are exact as float64.
_NARROW: dict[str, Callable[[float], float]] = {
    "f16": lambda x: float(np.float16(x)), "iq1m_f16": lambda x: float(np.float16(x)),
    "f32": lambda x: float(np.float32(x)), "bf16": _bf16,
}


def format_value(value: float | None, encoding: str | None = None) -> str:
    """A float for people: the shortest text that reads back as the value stored with ``encoding``
    (``f32``, ``f16``, ``bf16``, ...; None: a float64), so a float32 1e-06 is ``1e-06``;
    ``nan``/``+inf``/``-inf``; ``-`` for None."""
    if value is None:
        return "-"
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "+inf" if value > 0 else "-inf"
    narrow = _NARROW.get(encoding or "", float)
    # Below a million the integer digits are shown in full: -30, not -3e+01 (as %g does at 6 digits).
    whole = int(math.log10(abs(value))) + 1 if 1 <= abs(value) < 1e6 else 0
    with np.errstate(over="ignore"):    # a text that overflows the width does not read back: longer then
        for digits in range(1, 18):
            text = f"{value:.{max(digits, whole)}g}"
            if narrow(float(text)) == value:
                return text
    return repr(value)      # not a value of that width (the caller's width was wrong): exact as float64


def _layout(ggml_type: str | None) -> BlockLayout | None:
    """The block facts of a type named in a report, if ggaudit has them."""
    known = GGMLQuantizationType.__members__.get(ggml_type or "")
    return None if known is None else LAYOUTS.get(known)


def _finding_encoding(f: Finding, ggml_type: str | None) -> str | None:
    """How a finding's value is stored: decoded values are float32; a field's encoding is the type's
    (the tensor type given), else told by its bits' width where that is unambiguous."""
    if f.cause == CAUSE_DECODED:
        return "f32"
    layout = _layout(ggml_type)
    if layout is not None:
        return next((field.encoding.value for field in layout.fields if field.name == f.field), None)
    digits = len(f.bits) - 2
    if digits == 8:
        return "f32"
    return "f16" if digits == 4 and f.field != "value" else None    # an element of 16 bits: f16 or bf16


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


def describe_finding(f: Finding, max_abs: float | None = None, *, ggml_type: str | None = None) -> str:
    """One fio-like line: where, then expected before actual, in hex. An element of a float tensor is
    said by its column; a quantized block's field by block, columns and field name. ``ggml_type``: the
    tensor's type name, which tells how the value is stored (f16 or bf16) for its shortest text."""
    element = f.field == "value"
    where = location(f.path, f.offset, f.size, tensor=f.tensor, expert=f.expert, row=f.row,
                     block=None if element else f.block, column=f.column, width=f.width)
    encoding = _finding_encoding(f, ggml_type)
    expected = f"|x| <= {format_value(max_abs)}" if f.kind == "outlier" else "finite"
    if f.kind == "anomaly" and f.expected is not None and f.typical is not None:
        expected = (f"|{escape(f.field)}| near {format_value(f.expected, encoding)} (this tensor: "
                    f"{format_value(f.typical[0], encoding)}..{format_value(f.typical[1], encoding)})")
    shown = f.kind if f.value is None else format_value(f.value, encoding)
    actual = f"{f.bits} ({shown})"
    if f.score is not None:
        actual += f", {f.score:+.1f} spreads from its row and position"
    if f.cause == CAUSE_OVERFLOW:
        actual += f", a finite scale that overflows to {f.kind} when decoded"
    field = "" if element else f", field {escape(f.field)}"
    return f"{f.kind} at {where}{field}: expected {expected}, got {actual}"


def counts_text(counts: Mapping[str, int]) -> str:
    """``nan 1, +inf 0, -inf 0, outlier 0`` (and ``anomaly N`` when there are any)."""
    return ", ".join(f"{k} {counts.get(k, 0)}" for k in KINDS if k != "anomaly" or counts.get(k))


def describe_structure(s: StructureFinding) -> str:
    """One line: what and where (file, offset, length; the tensors on either side), expected before actual."""
    return (f"structure {s.kind} at {location(s.path, s.offset, s.length)}: {between(s.after, s.before)}: "
            f"expected {s.expected}, got {s.actual}")


def between(after: str | None, before: str | None) -> str:
    """Where a region no tensor owns is: ``between tensor X and tensor Y``, ``after the header``, ..."""
    first = "the header" if after is None else f"tensor {escape(after)}"
    return f"after {first}" if before is None else f"between {first} and tensor {escape(before)}"


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
               f"max finite |x| {format_value(t.max_abs, tensor_encoding(t))}")
        for finding in t.findings:
            yield "  " + describe_finding(finding, report.max_abs, ggml_type=t.type)
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
    if report.structure:
        found.append(plural(len(report.structure), "structure finding"))
    if report.counts.get("anomaly"):
        yield ("note: an anomaly is a likely, not a certain, flipped bit: `ggaudit verify` against a manifest "
               "or `ggaudit diff` against another copy confirms it")
    if found:
        yield f"result: {'; '.join(found)}"
    else:
        also = [w for w, on in (("outliers", report.max_abs is not None), ("anomalous scales", report.anomalies))
                if on]
        yield f"result: clean: no non-finite values{''.join(' or ' + w for w in also)}"


def tensor_encoding(t: TensorScan) -> str | None:
    """How a tensor's values (elements, or its blocks' fields when they share one encoding) are stored.
    With --deep the largest value may be a decoded float32: a width it does not fit prints it exactly."""
    layout = _layout(t.type)
    encodings = {f.encoding.value for f in layout.fields} if layout is not None else set()
    return encodings.pop() if len(encodings) == 1 else None


def scan_summary(report: ScanReport) -> str:
    """``model a.gguf: 2 findings (nan 1, +inf 1)``, or ``model a.gguf: clean``."""
    total = sum(report.counts.values())
    found = [f"{plural(total, 'finding')} ({_nonzero(report.counts)})"] if total else []
    if report.structure:
        found.append(plural(len(report.structure), "structure finding"))
    stop = " (stopped at the first finding)" if not report.complete else ""
    return f"model {escape_path(report.model)}: {', '.join(found) or 'clean'}{stop}"


def _nonzero(counts: Mapping[str, int]) -> str:
    return ", ".join(f"{k} {counts[k]}" for k in KINDS if counts.get(k))


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
    for m in listed:
        lines.extend(describe_mismatch(m))
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


def shape_text(shape: Sequence[int]) -> str:
    return "[" + ", ".join(str(n) for n in shape) + "]"


def describe_only(side: str, name: str) -> str:
    """A tensor only model ``side`` ("a" or "b") holds."""
    return f"ONLY-IN-{side.upper()} tensor {escape(name)}"


def describe_layout_change(c: LayoutChange) -> str:
    return (f"CHANGED tensor {escape(c.name)}: {c.what}: {c.type_a} {shape_text(c.shape_a)} -> "
            f"{c.type_b} {shape_text(c.shape_b)}")


def describe_data_diff(d: TensorDataDiff) -> list[str]:
    """fio style: where (files, offsets, length; tensor, row, then the element's column or the block and
    its columns), then A before B: the bytes that differ within the block, marked, and the values they
    change, decoded."""
    f = d.first
    element = f.columns == 1
    where = f"column {f.column}" if element else f"block {f.block}, columns {f.column}..{f.column + f.columns - 1}"
    return [
        f"DIFFER tensor {escape(d.name)} ({d.ggml_type} {shape_text(d.shape)}): {d.rows_differing} of "
        f"{plural(d.n_rows, 'row')} {_verb(d.rows_differing)}",
        f"  first at row {f.row}, {where}, byte {f.byte_in_block} of the {f.block_bytes}-byte "
        f"{'element' if element else 'block'}",
        f"  a: file {escape_path(d.path_a)}, offset {f.offset_a}, length {f.block_bytes}",
        f"  b: file {escape_path(d.path_b)}, offset {f.offset_b}, length {f.block_bytes}",
        *hex_window(f.raw_a, f.raw_b),
        *describe_value_changes(f),
    ]


#: Bytes shown a line by :func:`hex_window`, and at most how many lines of them (per side).
HEX_LINE = 16
MAX_HEX_LINES = 4


def hex_window(raw_a: bytes, raw_b: bytes) -> list[str]:
    """The lines of ``HEX_LINE`` bytes of a block that hold a differing byte (the first ``MAX_HEX_LINES``),
    A above B, each starting with its offset in the block, and ``^^`` under each byte that differs."""
    differs = [i for i, (x, y) in enumerate(zip(raw_a, raw_b, strict=False)) if x != y]
    starts = sorted({i - i % HEX_LINE for i in differs})[:MAX_HEX_LINES]
    width = len(str(starts[-1])) if starts else 1
    lines: list[str] = []
    for n, start in enumerate(starts):
        if n and start != starts[n - 1] + HEX_LINE:
            lines.append("  ...")
        a, b = raw_a[start:start + HEX_LINE], raw_b[start:start + HEX_LINE]
        head = f"  expected (a) +{start:<{width}}: "
        lines.append(head + a.hex(" "))
        lines.append(f"  actual   (b) +{start:<{width}}: " + b.hex(" "))
        lines.append(" " * len(head) + " ".join("^^" if x != y else "  " for x, y in zip(a, b, strict=False)).rstrip())
    hidden = [i for i in differs if starts and i >= starts[-1] + HEX_LINE]
    if hidden:
        lines.append(f"  ... and {plural(len(hidden), 'more differing byte')}, up to byte {hidden[-1]} "
                     f"(--json has the whole block)")
    return lines


def describe_value_changes(f: FirstDifference) -> list[str]:
    """The values the differing bytes change, A -> B: the element, the scale field, or else the block's
    dequantized elements (the first few, with how many differ)."""
    lines = [_value_change(c) for c in f.changes if c.what != "decoded"]
    decoded = [c for c in f.changes if c.what == "decoded"]
    if decoded:
        lines.append(f"  dequantized: {f.decoded_differing} of {plural(f.columns, 'column')} "
                     f"{_verb(f.decoded_differing)}")
        lines.extend(f"    column {c.column}: {_a_to_b(c)}" for c in decoded)
        if f.decoded_differing > len(decoded):
            lines.append(f"    ... and {f.decoded_differing - len(decoded)} more (--json lists the first "
                         f"{len(decoded)} too; dequantize the block for all)")
    return lines


def _value_change(c: ValueChange) -> str:
    if c.what == "element":
        return f"  value at column {c.column} ({c.encoding}): {_a_to_b(c)}"
    cols = f"column {c.column}" if c.columns == 1 else f"columns {c.column}..{c.column + c.columns - 1}"
    return f"  field {escape(c.name)} (scales {cols}, {c.encoding}): {_a_to_b(c)}"


def _a_to_b(c: ValueChange) -> str:
    return f"{format_value(c.a, c.encoding)} -> {format_value(c.b, c.encoding)}"


def diff_lines(report: DiffReport) -> list[str]:
    lines = [f"diff a: {escape_path(report.a)}", f"diff b: {escape_path(report.b)}"]
    lines.extend(describe_metadata_change(c) for c in report.metadata)
    lines.extend(describe_only("a", name) for name in report.only_in_a)
    lines.extend(describe_only("b", name) for name in report.only_in_b)
    lines.extend(describe_layout_change(c) for c in report.layout_changes)
    for d in report.data_diffs:
        lines.extend(describe_data_diff(d))
    for s in report.structure:
        lines.extend(line for found in describe_structure_diff(s) for line in found)
    stop = " (stopped at the first difference)" if report.stopped_early else ""
    lines.append(f"summary: {len(report.identical)} identical, {len(report.data_diffs)} "
                 f"{_verb(len(report.data_diffs))}, {len(report.layout_changes)} changed type or shape, "
                 f"{len(report.only_in_a)} only in a, {len(report.only_in_b)} only in b, "
                 f"{plural(len(report.metadata), 'metadata key')} {_verb(len(report.metadata))}, "
                 f"{plural(report.structure_differences, 'structure difference')}{stop}")
    return lines


def describe_structure_diff(s: StructureDiff) -> list[list[str]]:
    """The lines of each structure difference of a pair of files: the file facts that differ (alignment,
    data offset, size), then each region no tensor owns that differs."""
    facts = describe_structure_facts(s)
    return ([facts] if facts else []) + [describe_region_change(s, c) for c in s.changes]


def describe_structure_facts(s: StructureDiff) -> list[str]:
    """The facts of a pair of files that differ (none: no lines), or those of a file only one model has."""
    if s.path_a is None or s.path_b is None:
        side, path, facts = ("b", s.path_b, (s.alignment_b, s.data_offset_b, s.size_b)) if s.path_a is None \
            else ("a", s.path_a, (s.alignment_a, s.data_offset_a, s.size_a))
        return [f"ONLY-IN-{side.upper()} structure file {escape_path(str(path))}: alignment {facts[0]}, "
                f"data offset {facts[1]}, size {facts[2]}"]
    if not s.facts:
        return []
    return [f"CHANGED structure file: {', '.join(f'{name} {a} -> {b}' for name, a, b in s.facts)}",
            f"  a: file {escape_path(s.path_a)}", f"  b: file {escape_path(s.path_b)}"]


def describe_region_change(s: StructureDiff, c: RegionChange) -> list[str]:
    """A region that differs: in one file only (its offset, length and first bytes), or in both, with
    each file's region and the first differing byte (its offset in each file and the bytes from there)."""
    where = f"structure {c.kind} {between(c.after, c.before)}"
    if c.what != CHANGED:
        side, path, offset, length, head = ("a", s.path_a, c.offset_a, c.length_a, c.head_a) if c.what == ONLY_IN_A \
            else ("b", s.path_b, c.offset_b, c.length_b, c.head_b)
        return [f"ONLY-IN-{side.upper()} {where}: file {escape_path(str(path))}, offset {offset}, length {length}: "
                f"{_region_bytes(head, length or 0)}"]
    return [f"CHANGED {where}: first difference at byte {c.byte} of the region",
            _region_side("a", s.path_a, c.offset_a, c.length_a, c.first_a, c.head_a, c.byte),
            _region_side("b", s.path_b, c.offset_b, c.length_b, c.first_b, c.head_b, c.byte)]


def _region_side(side: str, path: str | None, offset: int | None, length: int | None, first: int | None,
                 head: str, byte: int) -> str:
    where = f"  {side}: file {escape_path(str(path))}, offset {offset}, length {length}"
    if first is None:
        return f"{where}; it ends at offset {(offset or 0) + (length or 0)}"
    return f"{where}; at offset {first}: {_region_bytes(head, (length or 0) - byte)}"


def _region_bytes(head: str, length: int) -> str:
    """A region's first bytes as hex, ``...`` when it holds more than those shown."""
    return head + ("..." if length > len(head) // 2 else "")


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

def _yes(value: bool | None) -> str:
    return "unknown" if value is None else ("yes" if value else "no")


def _differ(n: int, unit: str) -> str:
    return f"{n} {unit} differ" if n != 1 else f"1 {unit.rstrip('s')} differs"


def is_elements(ggml_type: str) -> bool:
    """A type of one value a block (F32, F16, BF16, F64, and I8 holding FP8): its blocks are elements."""
    layout = _layout(ggml_type)
    return layout is not None and layout.block_size == 1


def _geometry(g: Geometry) -> str:
    return f"4096-byte page {g.page}, 512-byte sector {g.sector}, 64 KiB {g.window_64k}"


def describe_row_mismatch(m: Mismatch, *, elements: bool = False) -> list[str]:
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
        f"{_yes(m.expected_finite)}, actual {_yes(m.actual_finite)}"
        + (f"; max abs diff {m.max_abs_diff:g}" if m.max_abs_diff is not None else ""),
    ]
    if m.detail:
        lines.append(f"  {m.detail}")
    return lines


def describe_short_read(s: ShortRead) -> str:
    return (f"short read: {s.mode} ({s.stage}) file {escape_path(s.file)}, offset {s.offset} (0x{s.offset:x}), "
            f"asked {plural(s.requested, 'byte')}, got {s.returned}, not at end of file")


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
    for w in r.warnings:
        lines.append(f"warning: {w}")
    if r.capture is not None:
        c = r.capture
        diff = f", max abs diff {c.max_abs_diff:g}" if c.max_abs_diff is not None else ""
        lines.append(f"capture {escape_path(c.file)}: {c.rows} {c.kind} {'row' if c.rows == 1 else 'rows'} "
                     f"({c.dtype}), {c.mismatched_rows} {_verb(c.mismatched_rows)}{diff}")
    elements = is_elements(r.ggml_type)
    for m in r.mismatches:
        lines.extend(describe_row_mismatch(m, elements=elements))
    lines.extend(describe_short_read(s) for s in r.short_reads)
    if r.mismatch_count > len(r.mismatches):
        more = r.mismatch_count - len(r.mismatches)
        lines.append(f"... {plural(more, 'more mismatch', 'more mismatches')} not shown")
    if r.short_read_count > len(r.short_reads):
        lines.append(f"... {plural(r.short_read_count - len(r.short_reads), 'more short read')} not shown")
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
        verdict = (f"{plural(r.mismatch_count, 'mismatch', 'mismatches')} ({kinds}), "
                   f"{plural(r.short_read_count, 'short read')}; mismatched rows crossing: "
                   f"{_geometry(r.mismatch_geometry)}")
    if r.nonfinite_rows:
        verdict += f"; {nonfinite_text(r)}"
    return f"result: {'clean: ' if r.ok and r.compared else ''}{verdict}"


def _delivered(r: RowsReport) -> str:
    if r.capture is None:
        return "every path delivered the file's bytes"
    if not r.stats:
        rows = "its 1 row" if r.capture.rows == 1 else f"all {r.capture.rows} rows"
        return f"the capture matched the file in {rows} (no read path run)"
    return "every path and the capture delivered the file's bytes"


def nonfinite_text(r: RowsReport) -> str:
    f = r.first_nonfinite
    rows = f"{r.nonfinite_rows} selected row{'s hold' if r.nonfinite_rows != 1 else ' holds'} non-finite values"
    if f is None:
        return rows
    where = f"column {f.column}" if f.field == "value" else f"block {f.block}, field {escape(f.field)}"
    how = f"{f.bits} {f.kind}" + (", which overflows when decoded" if f.cause == CAUSE_OVERFLOW else "")
    return f"{rows} (first: row {f.row}, {where} = {how}, offset {f.offset})"


def rows_summary(report: RowsReport) -> str:
    """``rows FILE, tensor NAME: `` and the verdict of the result line."""
    verdict = _rows_result(report).removeprefix("result: ")
    return f"rows {escape_path(report.file)}, tensor {escape(report.tensor)}: {verdict}"


# --- manifest --------------------------------------------------------------------------------------

def manifest_lines(written: ManifestWritten) -> list[str]:
    """What was written where; with ``-o -`` the manifest itself (stdout is where it was written)."""
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


_RENDERERS: dict[type[Any], Callable[[Any, Rendering], Iterable[str]]] = {
    ScanReport: lambda r, _: scan_lines(r), VerifyReport: lambda r, how: verify_lines(r, limit=how.limit),
    RowsReport: lambda r, _: rows_lines(r), DiffReport: lambda r, _: diff_lines(r),
    ModelInfo: lambda r, _: info_lines(r), ManifestWritten: lambda r, _: manifest_lines(r),
}

_SUMMARIES: dict[type[Any], Callable[[Any], str]] = {
    ScanReport: scan_summary, VerifyReport: verify_summary, RowsReport: rows_summary, DiffReport: diff_summary,
    ModelInfo: info_summary, ManifestWritten: manifest_summary,
}
