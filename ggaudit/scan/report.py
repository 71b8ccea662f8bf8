"""Scan findings as data (frozen dataclasses), their JSON shape, and the text rendering helpers.

The JSON shape of a scan report is a public contract (documented in the README): keys may be added,
never removed or renamed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping

from ..text import escape, escape_path

#: Every kind of finding, in the order counts are shown.
KINDS: tuple[str, ...] = ("nan", "+inf", "-inf", "outlier")

#: ``TensorScan.encoding`` of an I8 tensor the caller said holds FP8 E4M3 bytes (``--as NAME=fp8_e4m3``).
FP8_E4M3 = "fp8_e4m3"

#: What was checked in a tensor.
CHECK_ELEMENTS = "elements"
CHECK_FIELDS = "block fields"
CHECK_NONE = "not applicable"

#: Why a finding exists: the stored field itself is non-finite or too large; a finite field whose
#: decoded product overflows float32 (MXFP4 E8M0 0xFD/0xFE); or a decoded value that --deep found
#: non-finite in a block whose fields are all finite.
CAUSE_FIELD = "field"
CAUSE_OVERFLOW = "overflow"
CAUSE_DECODED = "decoded"


def hex_bits(bits: int, nbytes: int) -> str:
    """Raw bits as ``0x``-prefixed hex, zero-padded to the field's width (``0x7e00`` for an f16)."""
    return f"0x{bits:0{2 * nbytes}x}"


def format_value(value: float | None) -> str:
    """A float for people: short, exact enough to recognise (``7.92e+06``), ``nan``/``+inf``/``-inf``."""
    if value is None:
        return "-"
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "+inf" if value > 0 else "-inf"
    return f"{value:.6g}"


def location(path: str, offset: int, length: int, *, tensor: str | None = None, row: int | None = None,
             block: int | None = None, column: int | None = None, width: int | None = None) -> str:
    """Where a finding is, fio style: file, absolute offset and length first, then the tensor position."""
    parts = [f"file {escape_path(path)} offset {offset}, length {length}"]
    where = []
    if tensor is not None:
        where.append(f"tensor {escape(tensor)}")
    if row is not None:
        where.append(f"row {row}")
    if block is not None:
        where.append(f"block {block}")
    if column is not None:
        where.append(f"column {column}" if width in (None, 1) else f"columns {column}..{column + width - 1}")
    if where:
        parts.append(", ".join(where))
    return ": ".join(parts)


def finite_or_none(value: float | None) -> float | None:
    """The value when it is finite, else None: JSON has no NaN or Inf, findings compare equal, and the
    kind already says which non-finite value it was."""
    if value is None or not math.isfinite(value):
        return None
    return value


@dataclass(frozen=True)
class Finding:
    """One non-finite or out-of-range value, located exactly.

    ``column`` is the element index in the row; for a block field it is the first column of the
    block (or sub-block) the field scales, and ``width`` the number of columns it scales.
    ``offset``/``size`` are the absolute file offset and byte length of the field (or element).
    ``bits`` is the raw stored value (for IQ1_M the assembled f16; for a ``decoded`` finding the
    float32 bits of the decoded value). ``value`` is the decoded field when it is finite (an outlier,
    or a scale that overflows when decoded), else None: the kind says which non-finite it is.
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
    cause: str = CAUSE_FIELD

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "row": self.row, "column": self.column, "block": self.block,
                "field": self.field, "offset": self.offset, "bits": self.bits, "width": self.width,
                "size": self.size, "value": finite_or_none(self.value), "cause": self.cause}

    def describe(self, max_abs: float | None = None) -> str:
        """One fio-like line: where, then expected before actual, in hex."""
        where = location(self.path, self.offset, self.size, tensor=self.tensor, row=self.row,
                         block=self.block, column=self.column, width=self.width)
        if self.kind == "outlier":
            expected = f"|x| <= {format_value(max_abs)}"
        else:
            expected = "finite"
        actual = f"{self.bits} ({self.kind if self.value is None else format_value(self.value)})"
        if self.cause == CAUSE_OVERFLOW:
            actual += f", which decodes to {self.kind}"
        return f"{self.kind} at {where}, field {escape(self.field)}: expected {expected}, got {actual}"


@dataclass(frozen=True)
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

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    @property
    def truncated(self) -> bool:
        """More findings were counted than are listed (--limit)."""
        return self.total > len(self.findings)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "type": self.type, "counts": dict(self.counts),
                "max_abs": finite_or_none(self.max_abs),
                "findings": [f.to_json() for f in self.findings],
                "shape": list(self.shape), "file": self.path, "offset": self.offset,
                "nbytes": self.nbytes, "check": self.check, "encoding": self.encoding,
                "deep": self.deep, "complete": self.complete}


@dataclass(frozen=True)
class ScanStats:
    bytes: int          # tensor data bytes covered
    seconds: float
    workers: int        # worker processes used (0: read in the calling process)


@dataclass(frozen=True)
class FileDigest:
    """Digests of one whole file, computed in the same read as the scan (``scan(..., hashes=...)``)."""

    path: str
    size: int
    digests: Mapping[str, str]      # algorithm name ("sha256") -> lowercase hex

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "size": self.size, **self.digests}


@dataclass(frozen=True)
class ScanReport:
    """The result of :func:`ggaudit.scan.run.scan`."""

    model: str
    files: tuple[str, ...]
    tensors: tuple[TensorScan, ...]
    warnings: tuple[str, ...] = ()
    complete: bool = True
    max_abs: float | None = None     # the --max-abs threshold, when given
    stats: ScanStats = field(default_factory=lambda: ScanStats(0, 0.0, 0))
    hashes: tuple[str, ...] = ()          # digest algorithms asked for (empty: none)
    digests: tuple[FileDigest, ...] = ()  # per file read to its end; --fail-fast may leave some out

    @property
    def counts(self) -> dict[str, int]:
        return {k: sum(t.counts[k] for t in self.tensors) for k in KINDS}

    @property
    def has_findings(self) -> bool:
        return any(t.total for t in self.tensors)

    @property
    def status(self) -> str:
        return "findings" if self.has_findings else "ok"

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "status": self.status, "model": self.model,
            "tensors": [t.to_json() for t in self.tensors],
            "warnings": list(self.warnings),
            "files": list(self.files), "complete": self.complete, "counts": self.counts,
            "max_abs_threshold": self.max_abs,
            "stats": {"bytes": self.stats.bytes, "seconds": round(self.stats.seconds, 6),
                      "workers": self.stats.workers}}
        if self.hashes:     # only when asked for, so a plain scan's JSON is unchanged
            doc["digests"] = [d.to_json() for d in self.digests]
        return doc


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def counts_text(counts: Mapping[str, int]) -> str:
    return ", ".join(f"{k} {counts[k]}" for k in KINDS)


def render_text(report: ScanReport) -> Iterator[str]:
    """The report as lines for a terminal; names are escaped, offsets decimal, bits hex."""
    total_bytes = report.stats.bytes
    yield (f"model {escape_path(report.model)}: {_count(len(report.tensors), 'tensor')}, {total_bytes} bytes of "
           f"tensor data scanned in {_count(len(report.files), 'file')}")
    for d in report.digests:
        for algorithm, digest in d.digests.items():
            yield f"{algorithm}  {digest}  {escape_path(d.path)}"
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
            yield "  " + finding.describe(report.max_abs)
        if t.truncated:
            yield f"  ... {t.total - len(t.findings)} more not listed (--limit)"
    if not_applicable:
        yield f"not applicable (integer data): {', '.join(not_applicable)}"
    if not report.complete:
        yield "incomplete: stopped at the first finding (--fail-fast)"
    flagged = sum(1 for t in report.tensors if t.total)
    if flagged:
        yield (f"result: findings in {flagged} of {len(report.tensors)} tensors: "
               f"{counts_text(report.counts)}")
    else:
        yield f"result: clean: no non-finite values{' or outliers' if report.max_abs is not None else ''}"
