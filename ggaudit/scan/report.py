"""Scan findings as data (frozen dataclasses), their JSON shape and their lines (:meth:`ScanReport.diagnostics`;
the text reporter prints the same lines).

The JSON shape of a scan report is a public contract (docs/json.md, ggaudit/schema/): keys may be added,
never removed or renamed without a new schema id.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from .._version import __version__
from ..diagnostic import Diagnostic
from ..kinds import fails_by_default
from ..format.structure import GAP, PADDING, TRAILING, StructureFinding
from ..lines import between, block_layout, format_value, location
from ..text import escape, escape_path

if TYPE_CHECKING:   # only named: the report types load without the header parser or jinja2
    from ..format.consistency import MetadataFinding
    from ..format.templates import TemplateFinding

__all__ = ["CAUSE_DECODED", "CAUSE_FIELD", "CAUSE_OVERFLOW", "CAUSE_STATISTIC", "CHECK_ELEMENTS", "CHECK_FIELDS",
           "CHECK_NONE", "FP8_E4M3", "KINDS", "SCHEMA", "ExpertCounts", "Finding", "ScaleHistogram",
           "ScanReport", "ScanStats", "StructureFinding", "TensorScan", "WholeFileDigests", "counted_kinds",
           "counts_text", "describe_finding", "describe_structure", "describe_tensor", "finite_or_none", "hex_bits"]

#: The ``schema`` of :meth:`ScanReport.to_json`.
SCHEMA = "ggaudit/scan-report/1"

#: Every kind of finding, in the order counts are shown.
KINDS: tuple[str, ...] = ("nan", "+inf", "-inf", "outlier", "anomaly")
#: Every kind of diagnostic a scan yields (ggaudit.kinds ids): its findings', then its structure's.
DIAGNOSTIC_KINDS: tuple[str, ...] = (*KINDS, PADDING, GAP, TRAILING, "metadata", "template")


def counted_kinds(anomalies: bool) -> tuple[str, ...]:
    """The kinds of finding a scan counts: ``anomaly`` only when it modelled block scales, so that a plain
    scan's counts (and JSON) are what they were before anomalies existed."""
    return KINDS if anomalies else tuple(k for k in KINDS if k != "anomaly")


#: ``TensorScan.encoding`` of an I8 tensor the caller said holds FP8 E4M3 bytes (``--as NAME=fp8_e4m3``).
FP8_E4M3 = "fp8_e4m3"

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


@dataclass(frozen=True, kw_only=True)
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

    tensor: str
    path: str
    kind: str
    row: int
    column: int
    width: int
    block: int
    field: str
    offset: int
    size: int
    bits: str
    value: float | None
    encoding: str
    cause: str = CAUSE_FIELD
    expert: int | None = None
    score: float | None = None
    expected: float | None = None
    typical: tuple[float, float] | None = None

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"kind": self.kind, "row": self.row, "column": self.column, "block": self.block,
                               "field": self.field, "offset": self.offset, "bits": self.bits, "width": self.width,
                               "size": self.size, "value": finite_or_none(self.value), "cause": self.cause,
                               "expert": self.expert}
        if self.score is not None:      # an anomaly: only then, so other findings' JSON is unchanged
            doc.update(score=round(self.score, 2), expected=self.expected,
                       typical=list(self.typical) if self.typical else None)
        return doc


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


@dataclass(frozen=True, kw_only=True)
class ExpertCounts:
    """What the scan found in one expert of a mixture-of-experts tensor."""

    expert: int
    counts: Mapping[str, int]

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def to_json(self) -> dict[str, Any]:
        return {"expert": self.expert, "counts": dict(self.counts)}


@dataclass(frozen=True, kw_only=True)
class ScaleHistogram:
    """How many values of one float field of a tensor's blocks (``d``, ``dmin``, ...; ``value`` for the
    elements of a float tensor) fall in each power of two, counted from their stored exponent bits
    (``scan(..., histograms=True)``).

    ``powers``: ``(e, count)`` for each ``e`` with ``2**e <= |x| < 2**(e + 1)`` that occurs, ascending;
    zeros (either sign), subnormals and non-finite values (NaN, Inf) are counted apart.
    """

    field: str
    encoding: str       # the field's encoding: f16, bf16, f32, f64, e8m0, ue4m3, e4m3, iq1m_f16
    powers: tuple[tuple[int, int], ...]
    zero: int = 0
    subnormal: int = 0
    nonfinite: int = 0

    @property
    def total(self) -> int:
        return sum(n for _, n in self.powers) + self.zero + self.subnormal + self.nonfinite

    def to_json(self) -> dict[str, Any]:
        return {"field": self.field, "encoding": self.encoding,
                "powers": [{"exponent": e, "count": n} for e, n in self.powers],
                "zero": self.zero, "subnormal": self.subnormal, "nonfinite": self.nonfinite}


@dataclass(frozen=True, kw_only=True)
class TensorScan:
    """What the scan found in one tensor."""

    name: str
    type: str
    shape: tuple[int, ...]
    path: str
    offset: int
    nbytes: int
    check: str
    counts: Mapping[str, int]
    max_abs: float | None
    findings: tuple[Finding, ...] = ()
    encoding: str | None = None     # FP8_E4M3 when the caller said an I8 tensor holds FP8
    deep: bool = False              # decoded with gguf.quants as well
    complete: bool = True           # False when --fail-fast stopped inside this tensor
    n_experts: int | None = None    # a mixture-of-experts tensor (ffn_*_exps): how many experts it holds
    experts: tuple[ExpertCounts, ...] = ()     # its experts with a finding, in order (all counted)
    #: Per float field, the magnitudes of its values by power of two; None unless asked for
    #: (``scan(..., histograms=True)``) and the tensor holds float fields or elements.
    histograms: tuple[ScaleHistogram, ...] | None = None

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
        doc: dict[str, Any] = {"name": self.name, "type": self.type, "counts": dict(self.counts),
                               "max_abs": finite_or_none(self.max_abs),
                               "findings": [f.to_json() for f in self.findings],
                               "shape": list(self.shape), "file": self.path, "offset": self.offset,
                               "nbytes": self.nbytes, "check": self.check, "encoding": self.encoding,
                               "deep": self.deep, "complete": self.complete, "n_experts": self.n_experts,
                               "experts": [e.to_json() for e in self.experts]}
        if self.histograms is not None:     # only when collected, so a plain scan's JSON is unchanged
            doc["histograms"] = [h.to_json() for h in self.histograms]
        return doc


@dataclass(frozen=True, kw_only=True)
class ScanStats:
    bytes: int          # tensor data bytes covered
    seconds: float
    workers: int        # worker processes used (0: read in the calling process)

    def to_json(self) -> dict[str, Any]:
        return {"bytes": self.bytes, "seconds": round(self.seconds, 6), "workers": self.workers}


@dataclass(frozen=True, kw_only=True)
class WholeFileDigests:
    """Digests of one whole file, computed in the same read as the scan (``scan(..., hashes=...)``)."""

    path: str
    size: int
    digests: Mapping[str, str]      # algorithm name ("sha256") -> lowercase hex

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "size": self.size, **self.digests}


@dataclass(frozen=True, kw_only=True)
class ScanReport:
    """The result of :func:`ggaudit.scan.run.scan`; ``ok`` when no tensor holds a finding and the files'
    structure is sound (``structure``: padding that is not zeros, gaps, data after the last tensor)."""

    model: str
    files: tuple[str, ...]
    tensors: tuple[TensorScan, ...]
    warnings: tuple[str, ...] = ()
    complete: bool = True
    max_abs: float | None = None     # the --max-abs threshold, when given
    stats: ScanStats = field(default_factory=lambda: ScanStats(bytes=0, seconds=0.0, workers=0))
    hashes: tuple[str, ...] = ()          # digest algorithms asked for (empty: none)
    digests: tuple[WholeFileDigests, ...] = ()  # per file read to its end; --fail-fast may leave some out
    structure: tuple[StructureFinding, ...] = ()    # per file, in file order
    anomalies: bool = False         # block scales were modelled (scan(..., anomalies=True))
    metadata: tuple[MetadataFinding, ...] = ()      # keys contradicting the tensors or the vocabulary
    templates: tuple[TemplateFinding, ...] = ()     # chat templates that run code or hide content
    #: The header's keys whose values were checked, tensors or none (the vocabulary, each chat template): a
    #: vocabulary-only file is checked by them.
    header_checked: tuple[str, ...] = ()

    @property
    def counts(self) -> dict[str, int]:
        """Findings per kind over all tensors (``anomaly`` only when scales were modelled)."""
        return {k: sum(t.counts.get(k, 0) for t in self.tensors) for k in counted_kinds(self.anomalies)}

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

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "schema": SCHEMA, "tool_version": __version__, "ok": self.ok, "model": self.model,
            "files": list(self.files), "complete": self.complete, "counts": self.counts,
            "max_abs_threshold": self.max_abs, "warnings": list(self.warnings),
            "tensors": [t.to_json() for t in self.tensors], "stats": self.stats.to_json(),
            "structure": [s.to_json() for s in self.structure],
            "metadata": [m.to_json() for m in self.metadata], "templates": [t.to_json() for t in self.templates],
            "header_checked": list(self.header_checked)}
        if self.hashes:     # only when asked for, so a plain scan's JSON is unchanged
            doc["digests"] = [d.to_json() for d in self.digests]
        if self.anomalies:
            doc["anomalies"] = True
        return doc
