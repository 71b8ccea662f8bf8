"""Scan findings as data (frozen dataclasses), their JSON shape and their lines (:meth:`ScanReport.diagnostics`;
the text reporter prints the same lines).

The JSON shape of a scan report is a public contract (docs/json.md, ggaudit/schema/): keys may be added,
never removed or renamed without a new schema id.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass
from collections.abc import Iterator, Mapping
from typing import Any, ClassVar, Literal

from ..diagnostic import Artifact, Case, Diagnostic, Failure, Summary
from ..format.blocks import Encoding
from ..format.metadata_finding import MetadataFinding
from ..format.templates.finding import TemplateFinding
from ..json_shape import json_key, json_record, report_json, to_json
from ..kinds import fails_by_default
from ..format.structure import GAP, PADDING, TRAILING, StructureFinding
from ..page import (Bar, Block, Cell, FactTable, Figure, FileMap, Folded, Heading, Histograms, Legend, Listing, Span,
                    Table)
from ..wording import between, block_layout, format_value, location, plural, shape_text
from ..escaping import escape, escape_path
from . import FP8_E4M3


__all__ = ["CAUSE_DECODED", "CAUSE_FIELD", "CAUSE_OVERFLOW", "CAUSE_STATISTIC", "CHECK_ELEMENTS", "CHECK_FIELDS",
           "CHECK_NONE", "FP8_E4M3", "KINDS", "KIND_OF", "SCHEMA", "ExpertCounts", "Finding", "FindingKind",
           "HeaderChecks", "ScaleHistogram", "ScanReport", "ScanStats", "StructureFinding", "TensorScan",
           "WholeFileDigests", "counted_kinds", "counts_text", "describe_finding", "describe_structure",
           "describe_tensor", "finite_or_none", "hex_bits"]

#: The ``schema`` of :meth:`ScanReport.to_json`.
SCHEMA = "ggaudit/scan-report/1"

#: A finding's kind, for type checkers: one of KINDS (tests/test_api.py holds them equal).
FindingKind = Literal["nan", "+inf", "-inf", "outlier", "anomaly"]
#: Every kind of finding, in the order counts are shown.
KINDS: tuple[FindingKind, ...] = ("nan", "+inf", "-inf", "outlier", "anomaly")
#: Each kind by its text: a kind the kernel computes as text (in a numpy array) is a FindingKind by this lookup.
KIND_OF: dict[str, FindingKind] = {kind: kind for kind in KINDS}
#: Every kind of diagnostic a scan yields (ggaudit.kinds ids): its findings', then its structure's.
DIAGNOSTIC_KINDS: tuple[str, ...] = (*KINDS, PADDING, GAP, TRAILING, "metadata", "template")


def counted_kinds(anomalies: bool) -> tuple[str, ...]:
    """The kinds of finding a scan counts: ``anomaly`` only when it modelled block scales, so that a plain
    scan's counts (and JSON) are what they were before anomalies existed."""
    return KINDS if anomalies else tuple(k for k in KINDS if k != "anomaly")


#: What was checked in a tensor.
CHECK_ELEMENTS = "elements"
CHECK_FIELDS = "block fields"
CHECK_NONE = "not applicable"

#: Why a finding exists: the stored field itself is non-finite or too large; a finite field whose
#: block decodes past FLT_MAX to +-Inf (Q8_K and Q8_1's f32 ``d``, MXFP4's E8M0 0xFD/0xFE: the types the
#: block table says can overflow); or a decoded value that --deep found non-finite in a block whose
#: fields are all finite.
CAUSE_FIELD = "field"
CAUSE_OVERFLOW = "overflow"
CAUSE_DECODED = "decoded"
#: An ``anomaly``: a finite block scale far outside what the tensor's other scales predict
#: (``scan(..., anomalies=True)``; likely, not certain, damage).
CAUSE_STATISTIC = "statistic"


def hex_bits(bits: int, nbytes: int) -> str:
    """Raw bits as ``0x``-prefixed hex, zero-padded to the field's width (``0x7e00`` for an f16)."""
    return f"0x{bits:0{2 * nbytes}x}"


def finite_or_none(value: float | None) -> float | None:
    """The value when it is finite, else None: JSON has no NaN or Inf, findings compare equal, and the
    kind already says which non-finite value it was."""
    if value is None or not math.isfinite(value):
        return None
    return value


def _anomaly(f: Finding) -> bool:
    return f.score is not None


#: An anomaly's ``typical``: the 1st and 99th percentile of its tensor's |scale|.
_TYPICAL = {"anyOf": [{"type": "array", "items": {"type": "number", "minimum": 0}, "minItems": 2, "maxItems": 2},
                      {"type": "null"}]}
#: Findings per kind, in the JSON (:data:`KINDS`; ``anomaly`` only when scales were modelled).
_COUNTS = {"$ref": "#/$defs/counts"}
#: A magnitude, finite, or null (none, or not finite: the kind says which).
_MAGNITUDE = {"anyOf": [{"type": "number", "minimum": 0}, {"type": "null"}]}


@json_record
class Finding:
    """One non-finite or out-of-range value, located exactly.

    ``column`` is the element index in the row; for a block field it is the first column of the
    block (or sub-block) the field scales, and ``width`` the number of columns it scales.
    ``offset``/``size`` are the absolute file offset and byte length of the field (or element).
    ``bits`` is the raw stored value (for IQ1_M the assembled f16; for a ``decoded`` finding the
    float32 bits of the decoded value). ``value`` is the decoded field when it is finite (an outlier,
    or a scale that overflows when decoded), else None: the kind says which non-finite it is.
    ``encoding`` is how ``bits`` are stored, from the block table (:class:`ggaudit.format.blocks.Encoding`
    values: ``f16``, ``bf16``, ``f32``, ``f64``, ``e8m0``, ``ue4m3``, ``iq1m_f16``, ``e4m3``; ``f32`` for a
    ``decoded`` finding): the width a value is shown at.
    ``expert``: in a mixture-of-experts tensor (``ffn_*_exps``, experts along the last axis), the expert
    the value belongs to, ``row // (rows per expert)`` (``row`` counts across all experts); else None.
    An ``anomaly`` also has ``score`` (its distance from the scale model, in robust spreads: positive
    above, negative below), ``expected`` (the |scale| the model predicts for its row and position) and
    ``typical`` (the 1st and 99th percentile of the tensor's |scale|); None for other kinds.
    """

    JSON_DEF: ClassVar[str] = "finding"

    tensor: str = json_key(in_json=False)
    path: str = json_key(in_json=False)
    encoding: str = json_key(in_json=False)
    kind: FindingKind = json_key(values=KINDS)
    row: int = json_key(minimum=0)
    column: int = json_key(minimum=0)
    block: int = json_key(minimum=0)
    field: str
    offset: int = json_key(minimum=0)
    bits: str = json_key(pattern="^0x[0-9a-f]+$")
    width: int = json_key(minimum=1)
    size: int = json_key(minimum=1)
    value: float | None = json_key(convert=finite_or_none, schema={"anyOf": [{"type": "number"}, {"type": "null"}]})
    cause: str = json_key(default=CAUSE_FIELD, values=(CAUSE_FIELD, CAUSE_OVERFLOW, CAUSE_DECODED, CAUSE_STATISTIC))
    expert: int | None = json_key(default=None, minimum=0)
    # An anomaly's keys: only on an anomaly, so other findings' JSON is unchanged.
    score: float | None = json_key(default=None, when=_anomaly, digits=2, schema={"type": "number"})
    expected: float | None = json_key(default=None, when=_anomaly, schema={"type": "number", "minimum": 0})
    typical: tuple[float, float] | None = json_key(default=None, when=_anomaly, schema=_TYPICAL)

    def to_json(self) -> dict[str, Any]:
        return to_json(self)


def describe_finding(f: Finding, max_abs: float | None = None) -> str:
    """One fio-like line: where, then expected before actual, in hex. An element of a float tensor is
    said by its column; a quantized block's field by block, columns and field name; values as the
    shortest text that reads back at the finding's encoding."""
    element = f.field == "value"
    where = location(f.path, f.offset, f.size, tensor=f.tensor, expert=f.expert, row=f.row,
                     block=None if element else f.block, column=f.column, width=f.width)
    encoding = f.encoding
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


def describe_tensor(t: TensorScan) -> str:
    """A tensor with findings in one line: name, type and shape, its counts, its largest finite |x|."""
    shown = ", ".join(str(n) for n in t.shape)
    return (f"tensor {escape(t.name)} ({t.type} [{shown}]): {counts_text(t.counts)}; "
            f"max finite |x| {format_value(t.max_abs, t.value_encoding)}")


def describe_structure(s: StructureFinding) -> str:
    """One line: what and where (file, offset, length; the tensors on either side), expected before actual."""
    return (f"structure {s.kind} at {location(s.path, s.offset, s.length)}: {between(s.after, s.before)}: "
            f"expected {s.expected}, got {s.actual}")


def structure_diagnostic(s: StructureFinding) -> Diagnostic:
    return Diagnostic(kind=s.kind, message=describe_structure(s), file=s.path, offset=s.offset, length=s.length,
                      extras=s.to_json())


def describe_metadata(m: MetadataFinding) -> str:
    """One line: the key and its value, where it is, the tensor it contradicts, expected before actual."""
    where = f"file {escape_path(m.path)}" + ("" if m.offset is None else f" offset {m.offset}")
    tensor = "" if m.tensor is None else f", tensor {escape(m.tensor)}"
    warning = "warning: " if m.severity == "warning" else ""
    return (f"metadata {escape(m.key)} = {escape(str(m.value))} at {where}{tensor}: {warning}expected "
            f"{escape(m.expected)}, got {escape(m.actual)}")


def metadata_diagnostic(m: MetadataFinding) -> Diagnostic:
    return Diagnostic(kind=m.kind, severity=m.severity, message=describe_metadata(m), file=m.path, offset=m.offset,
                      tensor=m.tensor, field=m.key, extras=m.to_json())


def describe_template(t: TemplateFinding) -> str:
    """One line: the template's key, line and column, its file offset, then what was seen there."""
    return (f"template {escape(t.key)} line {t.line} column {t.column} at file {escape_path(t.path)} offset "
            f"{t.offset}: {t.severity} {t.rule}: {escape(t.detail)}")


def template_diagnostic(t: TemplateFinding) -> Diagnostic:
    return Diagnostic(kind=t.kind, severity=t.severity, message=describe_template(t), file=t.path, offset=t.offset,
                      field=t.key, extras=t.to_json())      # line and column are the template's: in extras


def finding_diagnostic(f: Finding, max_abs: float | None) -> Diagnostic:
    """A finding's diagnostic; an element of a float tensor has a column and no block (as its line says)."""
    element = f.field == "value"
    return Diagnostic(kind=f.kind, message=describe_finding(f, max_abs), file=f.path,
                      offset=f.offset, length=f.size, tensor=f.tensor, row=f.row, column=f.column,
                      block=None if element else f.block, field=f.field, expert=f.expert,
                      extras={"tensor": f.tensor, "file": f.path, **f.to_json()})


@json_record
class ExpertCounts:
    """What the scan found in one expert of a mixture-of-experts tensor."""

    JSON_DEF: ClassVar[str] = "expert_counts"

    expert: int = json_key(minimum=0)
    counts: Mapping[str, int] = json_key(convert=dict, schema=_COUNTS)

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def to_json(self) -> dict[str, Any]:
        return to_json(self)


def _powers(powers: tuple[tuple[int, int], ...]) -> list[dict[str, int]]:
    return [{"exponent": e, "count": n} for e, n in powers]


_POWERS = {"type": "array", "items": {"type": "object", "required": ["exponent", "count"], "properties": {
    "exponent": {"type": "integer"}, "count": {"type": "integer", "minimum": 1}}, "additionalProperties": False}}


@json_record
class ScaleHistogram:
    """How many values of one float field of a tensor's blocks (``d``, ``dmin``, ...; ``value`` for the
    elements of a float tensor) fall in each power of two, counted from their stored exponent bits
    (``scan(..., histograms=True)``).

    ``powers``: ``(e, count)`` for each ``e`` with ``2**e <= |x| < 2**(e + 1)`` that occurs, ascending;
    zeros (either sign), subnormals and non-finite values (NaN, Inf) are counted apart.
    """

    JSON_DEF: ClassVar[str] = "scale_histogram"

    field: str
    encoding: str = json_key(values=tuple(e.value for e in Encoding))     # the field's encoding
    powers: tuple[tuple[int, int], ...] = json_key(convert=_powers, schema=_POWERS)
    zero: int = json_key(default=0, minimum=0)
    subnormal: int = json_key(default=0, minimum=0)
    nonfinite: int = json_key(default=0, minimum=0)

    @property
    def total(self) -> int:
        return sum(n for _, n in self.powers) + self.zero + self.subnormal + self.nonfinite

    def to_json(self) -> dict[str, Any]:
        return to_json(self)


@json_record
class TensorScan:
    """What the scan found in one tensor."""

    JSON_DEF: ClassVar[str] = "tensor_scan"

    name: str
    type: str
    counts: Mapping[str, int] = json_key(convert=dict, schema=_COUNTS)
    max_abs: float | None = json_key(convert=finite_or_none, schema=_MAGNITUDE)
    findings: tuple[Finding, ...] = ()
    shape: tuple[int, ...] = json_key(minimum=0)
    path: str = json_key(name="file")
    offset: int = json_key(minimum=0)
    nbytes: int = json_key(minimum=0)
    check: str = json_key(values=(CHECK_ELEMENTS, CHECK_FIELDS, CHECK_NONE))
    #: FP8_E4M3 when the caller said an I8 tensor holds FP8.
    encoding: str | None = json_key(default=None, values=(FP8_E4M3, None))
    deep: bool = False              # decoded with gguf.quants as well
    complete: bool = True           # False when --fail-fast stopped inside this tensor
    #: A mixture-of-experts tensor (ffn_*_exps): how many experts it holds.
    n_experts: int | None = json_key(default=None, minimum=1)
    experts: tuple[ExpertCounts, ...] = ()     # its experts with a finding, in order (all counted)
    #: Per float field, the magnitudes of its values by power of two; None unless asked for
    #: (``scan(..., histograms=True)``) and the tensor holds float fields or elements: only then in the
    #: JSON, so a plain scan's is unchanged.
    histograms: tuple[ScaleHistogram, ...] | None = json_key(
        default=None, when=lambda t: t.histograms is not None,
        schema={"type": "array", "items": {"$ref": "#/$defs/scale_histogram"}})

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    @property
    def truncated(self) -> bool:
        """More findings were counted than are listed (--limit)."""
        return self.total > len(self.findings)

    @property
    def value_encoding(self) -> str | None:
        """How the tensor's values are stored (its elements, or its blocks' float fields when they share
        one encoding), from the block table; None when they do not. ``max_abs`` is shown at this width:
        with --deep it may be a decoded float32, which a width it does not fit prints exactly."""
        layout = block_layout(self.type)
        encodings = {f.encoding.value for f in layout.fields} if layout is not None else set()
        return encodings.pop() if len(encodings) == 1 else None

    def to_json(self) -> dict[str, Any]:
        return to_json(self)


@json_record
class ScanStats:
    bytes: int = json_key(minimum=0)            # tensor data bytes covered
    seconds: float = json_key(minimum=0, digits=6)
    workers: int = json_key(minimum=0)          # worker processes used (0: read in the calling process)

    def to_json(self) -> dict[str, Any]:
        return to_json(self)


@dataclass(frozen=True, kw_only=True)
class WholeFileDigests:
    """Digests of one whole file, computed in the same read as the scan (``scan(..., hashes=...)``)."""

    path: str
    size: int
    digests: Mapping[str, str]      # algorithm name ("sha256") -> lowercase hex

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "size": self.size, **self.digests}


@json_record
class HeaderChecks:
    """What the header's checks covered, counted: all a file with no tensor (a vocabulary-only file) is checked by.
    ``metadata_keys``: the keys the header holds, each parsed within its bounds. ``tokens``: the vocabulary
    (``tokenizer.ggml.tokens``; None: none), against which the lengths of ``scores`` and ``token_type``,
    ``<arch>.vocab_size`` and the ``special_tokens`` special-token ids present are checked. ``merges``: the
    ``tokenizer.ggml.merges`` array's length (None: none); each merge's tokens are looked up in the vocabulary only
    when ``merges_looked_up`` (a deep scan). ``templates``: the chat templates checked (syntax tree, text, a
    sandboxed render)."""

    JSON_DEF: ClassVar[str] = "header_checks"

    metadata_keys: int = json_key(minimum=0)
    tokens: int | None = json_key(default=None, minimum=0)
    special_tokens: int = json_key(default=0, minimum=0)
    merges: int | None = json_key(default=None, minimum=0)
    merges_looked_up: bool = False
    templates: int = json_key(default=0, minimum=0)

    def to_json(self) -> dict[str, Any]:
        return to_json(self)


def _no_tensor(r: Any) -> bool:
    """A report of a file holding no tensor, whose header is all there was to check."""
    return not r.tensors and r.header_checks is not None


@json_record
class ScanReport:
    """The result of :func:`ggaudit.scan.run.scan`; ``ok`` when no tensor holds a finding and the files'
    structure is sound (``structure``: padding that is not zeros, gaps, data after the last tensor)."""

    SCHEMA: ClassVar[str] = SCHEMA
    JSON_DEF: ClassVar[str] = "scan_report"

    model: str
    files: tuple[str, ...]
    complete: bool = True
    #: Findings per kind over all tensors (``anomaly`` only when scales were modelled).
    counts: Mapping[str, int] = json_key(init=False, convert=dict, schema=_COUNTS)
    #: The --max-abs threshold, when given.
    max_abs: float | None = json_key(default=None, name="max_abs_threshold", minimum=0)
    warnings: tuple[str, ...] = ()
    tensors: tuple[TensorScan, ...]
    stats: ScanStats = json_key(default_factory=lambda: ScanStats(bytes=0, seconds=0.0, workers=0))
    structure: tuple[StructureFinding, ...] = ()    # per file, in file order
    metadata: tuple[MetadataFinding, ...] = ()      # keys contradicting the tensors or the vocabulary
    templates: tuple[TemplateFinding, ...] = ()     # chat templates that run code or hide content
    #: The header's keys whose values were checked, tensors or none (the vocabulary, each chat template): a
    #: vocabulary-only file is checked by them.
    header_checked: tuple[str, ...] = ()
    #: What the header's checks covered, counted; in the JSON only for a file with no tensor (a vocabulary-only
    #: file, checked by these alone), so every other scan's JSON is as it was.
    header_checks: HeaderChecks | None = json_key(default=None, when=_no_tensor)
    hashes: tuple[str, ...] = json_key(default=(), in_json=False)     # digest algorithms asked for
    #: Per file read to its end (--fail-fast may leave some out); in the JSON only when asked for, so a
    #: plain scan's is unchanged.
    digests: tuple[WholeFileDigests, ...] = json_key(
        default=(), when=lambda r: bool(r.hashes), schema={"type": "array", "items": {"$ref": "#/$defs/file_digest"}})
    #: Block scales were modelled (scan(..., anomalies=True)); in the JSON only then.
    anomalies: bool = json_key(default=False, when=lambda r: r.anomalies, schema={"const": True})

    def __post_init__(self) -> None:
        counts = {k: sum(t.counts.get(k, 0) for t in self.tensors) for k in counted_kinds(self.anomalies)}
        object.__setattr__(self, "counts", counts)

    @property
    def ok(self) -> bool:
        """Nothing found: no non-finite value (and, with ``max_abs``, no outlier) in any tensor, and no
        structure, metadata or template finding (warnings included), but a template's advice (a warning or
        a note: :data:`ggaudit.kinds.ADVISORY`), which ``--fail-on template`` makes fail a run."""
        return not (self.structure or self.metadata or self.failing_templates) and \
            not any(t.total for t in self.tensors)

    @property
    def failing_templates(self) -> tuple[TemplateFinding, ...]:
        """The template findings that fail a run as they are (errors); the others are :attr:`advice`."""
        return tuple(t for t in self.templates if fails_by_default(t.kind, t.severity))

    @property
    def advice(self) -> tuple[TemplateFinding, ...]:
        """The template findings that fail a run only when ``--fail-on`` selects them (warnings, notes)."""
        return tuple(t for t in self.templates if not fails_by_default(t.kind, t.severity))

    def diagnostics(self) -> Iterator[Diagnostic]:
        """Each structure finding, metadata finding and template finding, then each tensor's listed findings
        (``--limit`` lists fewer than it counts: ``TensorScan.total``)."""
        yield from (structure_diagnostic(s) for s in self.structure)
        yield from (metadata_diagnostic(m) for m in self.metadata)
        yield from (template_diagnostic(t) for t in self.templates)
        for t in self.tensors:
            yield from (finding_diagnostic(f, self.max_abs) for f in t.findings)

    # What every reporter reads (ggaudit.diagnostic.Report): the wording is below, after the types it reads.
    def summary(self, limit: int | None = None) -> Summary:
        return _summary(self)

    def cases(self) -> Iterator[Case]:
        return _cases(self)

    def page(self, limit: int | None = None) -> list[Block]:
        return _page(self)

    def to_json(self) -> dict[str, Any]:
        return report_json(self)


# --- a scan in words (ScanReport.summary) and as test cases (ScanReport.cases) ---------------------------

def _summary(r: ScanReport) -> Summary:
    # Counted, not all listed (--limit): what every tensor with findings holds, listed or not.
    flagged = [t for t in r.tensors if t.total]
    tensors = [{"name": t.name, "counts": dict(t.counts), "listed": len(t.findings),
                "not_listed": t.total - len(t.findings)} for t in flagged]
    counted = {"complete": r.complete, "counts": r.counts, "structure": len(r.structure), "tensors": tensors,
               "not_listed": sum(t.total - len(t.findings) for t in flagged)}
    files = (*(Artifact(path=path) for path in r.files), *(Artifact(path=d.path, length=d.size) for d in r.digests))
    return Summary(headline=_headline(r), lines=tuple(_lines(r)), files=files, counted=counted,
                   seconds=r.stats.seconds, warnings=r.warnings)


def expert_lines(t: TensorScan) -> Iterator[str]:
    """A mixture-of-experts tensor's findings per expert (every finding counted, not only those listed)."""
    if t.n_experts is None or not t.experts:
        return
    yield f"  experts with findings: {len(t.experts)} of {t.n_experts}"
    for e in t.experts:
        yield f"  expert {e.expert}: {counts_text(e.counts)}"


def _lines(report: ScanReport) -> Iterator[str]:
    total_bytes = report.stats.bytes
    yield (f"model {escape_path(report.model)}: {plural(len(report.tensors), 'tensor')}, "
           f"{plural(total_bytes, 'byte')} of tensor data scanned in {plural(len(report.files), 'file')}")
    if not report.tensors and report.header_checked:    # a vocabulary-only file: its header was checked
        yield f"header checked: {', '.join(escape(k) for k in report.header_checked)}"
        if report.header_checks is not None:
            yield f"checked: {header_checks_text(report.header_checks)}; no tensor data in the file"
    for d in report.digests:
        for algorithm, digest in d.digests.items():
            yield f"{algorithm}  {digest}  {escape_path(d.path)}"
    yield from (describe_structure(s) for s in report.structure)
    yield from (describe_metadata(m) for m in report.metadata)
    yield from (describe_template(t) for t in report.templates)
    yield from _tensor_lines(report)
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


def _tensor_lines(report: ScanReport) -> Iterator[str]:
    """Each tensor with findings, its listed findings and its experts; then the tensors not applicable."""
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


def header_checks_text(h: HeaderChecks) -> str:
    """``9 metadata keys parsed; a vocabulary of 10 tokens, 2 special-token ids, 5 merges (not looked up: --deep does);
    1 chat template``: what the header's checks covered."""
    parts = [plural(h.metadata_keys, "metadata key") + " parsed"]
    if h.tokens is not None:
        vocabulary = [f"a vocabulary of {plural(h.tokens, 'token')}", plural(h.special_tokens, "special-token id")]
        if h.merges is not None:
            how = "each looked up in it" if h.merges_looked_up else "not looked up: --deep does"
            vocabulary.append(f"{plural(h.merges, 'merge')} ({how})")
        parts.append(", ".join(vocabulary))
    parts.append(plural(h.templates, "chat template"))
    return "; ".join(parts)


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


def _headline(report: ScanReport) -> str:
    """``model a.gguf: 2 findings (nan 1, +inf 1)``, or ``model a.gguf: clean``."""
    total = sum(report.counts.values())
    nonzero = ", ".join(f"{k} {report.counts[k]}" for k in KINDS if report.counts.get(k))
    found = [f"{plural(total, 'finding')} ({nonzero})"] if total else []
    found += _header_counts(report)
    said = [*(found or ["clean"]), *_advice(report)]
    stop = " (stopped at the first finding)" if not report.complete else ""
    return f"model {escape_path(report.model)}: {', '.join(said)}{stop}"


def _cases(r: ScanReport) -> Iterator[Case]:
    """A case per file (its structure) and per tensor group (a layer's tensors, ``blk.N``, then the others):
    what JUnit readers expect of a model of 1,500 tensors; a group fails with each failing tensor's lines."""
    by_place: dict[tuple[str, str | None], list[Diagnostic]] = {}
    advice: dict[str | None, list[str]] = {}
    for d in r.diagnostics():      # a structure finding is at a file, a finding at a tensor
        if not fails_by_default(d.kind, d.severity):    # a template's warning: said, not failed (as the exit)
            advice.setdefault(d.file, []).extend(d.lines)
            continue
        by_place.setdefault(("tensor", d.tensor) if d.tensor is not None else ("file", d.file), []).append(d)
    for path in r.files:
        found = by_place.get(("file", path))
        yield Case(name=f"structure of {escape_path(path)}", failure=Failure.of(found) if found else None,
                   out=tuple(advice.get(path, [])))
    groups: dict[str, list[TensorScan]] = {}
    for t in r.tensors:
        groups.setdefault(tensor_group(t.name), []).append(t)
    for name, tensors in groups.items():
        yield _group_case(name, tensors, by_place)


#: A layer's tensors (``blk.12.attn_q.weight``, ``v.blk.3.ffn_up.weight``): the group is the layer's prefix.
_LAYER = re.compile(r"((?:[A-Za-z_]+\.)*blk\.\d+)\.")
#: The group of every tensor outside a numbered layer (token_embd, output_norm, ...).
OTHER_TENSORS = "other tensors"


def tensor_group(name: str) -> str:
    """The test case a tensor is counted in: its layer (``blk.12``), else :data:`OTHER_TENSORS`."""
    layer = _LAYER.match(name)
    return f"tensors {layer.group(1)}.*" if layer is not None else OTHER_TENSORS


def _group_case(name: str, tensors: list[TensorScan], by_place: dict[tuple[str, str | None], list[Diagnostic]]) -> Case:
    if all(t.check == CHECK_NONE for t in tensors):
        return Case(name=escape(name), skipped="not applicable (integer data)")
    failing = [t for t in tensors if t.check != CHECK_NONE and t.total]
    if not failing:
        return Case(name=escape(name))
    lines = [line for t in failing for line in _failing_tensor(t, by_place.get(("tensor", t.name), []))]
    headline = describe_tensor(failing[0]) if len(failing) == 1 else \
        f"{len(failing)} of {plural(len(tensors), 'tensor')} hold findings; first: {describe_tensor(failing[0])}"
    kinds = ",".join(k for k in KINDS if any(t.counts.get(k) for t in failing))
    return Case(name=escape(name), failure=Failure(message=headline, kinds=kinds,
                                                   lines=tuple(lines if len(failing) > 1 else lines[1:])))


def _failing_tensor(t: TensorScan, found: list[Diagnostic]) -> list[str]:
    """A failing tensor's detail, as the text report words it: its line, then its findings' lines."""
    lines = [describe_tensor(t), *(d.message for d in found)]
    if t.truncated:
        lines.append(f"... {t.total - len(t.findings)} more not listed (--limit)")
    lines.extend(line.strip() for line in expert_lines(t))
    return lines


# --- a scan on a page (ScanReport.page) -------------------------------------------------------------------

#: Tensors without findings shown unfolded when no tensor has one; more are folded.
FOLD_AT = 50
#: CSS class of each finding kind (a class name cannot hold "+").
_KIND_CSS = {"nan": "nan", "+inf": "pinf", "-inf": "ninf", "outlier": "outlier", "anomaly": "outlier"}
_MAP_LEGEND = Legend(items=(("hdr", "header"), ("t0", "tensor"), ("t1", "tensor (next)"),
                            ("tf0", "tensor with findings"), ("nan", "nan"), ("pinf", "+inf"), ("ninf", "-inf"),
                            ("outlier", "outlier or anomaly"), ("structure", "structure finding")))


def _page(r: ScanReport) -> list[Block]:
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
    header = (*(describe_metadata(m) for m in r.metadata), *(describe_template(t) for t in r.templates))
    found: list[Block] = [Heading(text="Metadata and chat templates"), Listing(lines=header)] if header else []
    return [Heading(text="Summary"), FactTable(rows=tuple(facts), mono=True), *found,
            Heading(text="Tensors"), *_tensor_tables(r.tensors),
            *(block for path in r.files for block in _file_map(r, path)), *_histograms(r)]


def _tensor_tables(tensors: tuple[TensorScan, ...]) -> list[Block]:
    """The tensors with findings, then those without folded (a model of 1,000 clean tensors stays a page one
    can find the findings in); unfolded when none has a finding and they are few."""
    flagged = [t for t in tensors if t.total]
    clean = [t for t in tensors if not t.total]
    out: list[Block] = [_tensor_table(flagged)] if flagged else []
    if clean:
        out.append(Folded(summary=f"{plural(len(clean), 'tensor')} without findings", table=_tensor_table(clean),
                          open=not flagged and len(clean) <= FOLD_AT))
    return out


def _tensor_table(tensors: list[TensorScan]) -> Table:
    rows = ((Cell(text=escape(t.name), css="mono"), Cell(text=t.type), Cell(text=shape_text(t.shape)),
             Cell.number(t.nbytes), Cell(text=counts_text(t.counts) if t.total else "none"),
             Cell(text=format_value(t.max_abs, t.value_encoding), css="num")) for t in tensors)
    return Table(head=("name", "type", "shape", "bytes", "findings", "max finite |x|"), rows=rows,
                 total=len(tensors), what="tensors", hits=frozenset(i for i, t in enumerate(tensors) if t.total))


def _file_map(r: ScanReport, path: str) -> list[Block]:
    tensors = sorted((t for t in r.tensors if t.path == path), key=lambda t: t.offset)
    structure = [s for s in r.structure if s.path == path]
    extent = max([t.offset + t.nbytes for t in tensors] + [s.offset + s.length for s in structure] + [1])
    segments = [Span(0, tensors[0].offset, "hdr", "header and tensor infos")] if tensors else []
    segments += [Span(t.offset, t.nbytes, f"tf{i % 2}" if t.total else f"t{i % 2}",
                      f"tensor {escape(t.name)} ({t.type} {shape_text(t.shape)}): offset {t.offset}, {t.nbytes} bytes")
                 for i, t in enumerate(tensors)]
    findings = tuple(Span(f.offset, f.size, _KIND_CSS.get(f.kind, "nan"), describe_finding(f, r.max_abs))
                     for t in tensors for f in t.findings)
    return [Heading(text=f"Map of {escape_path(path)}"),
            FileMap(extent=extent, segments=tuple(segments), label=f"map of {escape_path(path)}: tensors and "
                    "findings by offset", legend=_MAP_LEGEND, findings=findings,
                    marks=tuple(Span(s.offset, s.length, "structure", describe_structure(s)) for s in structure),
                    unlisted=sum(t.total - len(t.findings) for t in tensors))]


def _histograms(r: ScanReport) -> list[Block]:
    """Each counted tensor's histograms, those with findings first, then the largest."""
    counted = sorted((t for t in r.tensors if t.histograms), key=lambda t: (not t.total, -t.nbytes))
    if not counted:
        return []
    groups = tuple(tuple(Figure(bars=tuple(_bars(t, h)), label=f"histogram of {escape(t.name)} {escape(h.field)}",
                                caption=f"{escape(t.name)} ({t.type}), field {escape(h.field)} ({h.encoding}): "
                                        f"{h.total} values") for h in t.histograms or ()) for t in counted)
    return [Heading(text="Scale magnitudes"), Histograms(groups=groups)]


def _bars(t: TensorScan, h: ScaleHistogram) -> Iterator[Bar]:
    """Zeros and subnormals, then every power of two from the smallest to the largest that occurs (empty
    ones too, so a lone outlier stands apart), then the non-finite values."""
    where = f"{escape(t.name)}, field {escape(h.field)}"
    if h.zero:
        yield Bar("0", h.zero, "bz", f"{where}: zero: {h.zero}", "zero")
    if h.subnormal:
        yield Bar("sub", h.subnormal, "bz", f"{where}: subnormal: {h.subnormal}", "subnormal")
    if h.powers:
        counts = dict(h.powers)
        lo, hi = h.powers[0][0], h.powers[-1][0]
        step = max(1, (hi - lo + 1) // 6)
        for e in range(lo, hi + 1):
            label = str(e) if e in (lo, hi) or ((e - lo) % step == 0 and hi - e >= step) else ""
            n = counts.get(e, 0)
            yield Bar(label, n, "b", f"{where}: 2^{e} <= |x| < 2^{e + 1}: {n}", str(e))
    if h.nonfinite:
        yield Bar("NaN/Inf", h.nonfinite, "bn", f"{where}: non-finite: {h.nonfinite}", "nonfinite")
