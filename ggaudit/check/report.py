"""A check's findings as data: :class:`CheckReport`, its JSON (docs/json.md, ``check_report`` in
ggaudit/schema/) and its diagnostics. The JSON shape is a public contract: keys may be added, never
removed or renamed without a new schema id."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from .._version import __version__
from ..diagnostic import Case, Diagnostic, Failure, Summary
from ..page import Block, Cell, Heading, Paragraph, Table
from ..scan.report import ScanReport
from ..escaping import escape, escape_message, escape_path
from ..wording import plural
from .facts import (CACHE_VERIFIED, DAMAGED, INTACT, NONFINITE, READ_PATH, UNVERIFIED, Conclusion, Expectation,
                    FileDecision)
from ..evidence.read_pass import PassStats

__all__ = ["DIAGNOSTIC_KINDS", "SCHEMA", "CheckReport", "FileCheck", "PathRead"]

SCHEMA = "ggaudit/check-report/1"

#: The conclusions that are findings, and the kind (ggaudit.kinds) of each one's diagnostic.
FINDING_KINDS = {"differs-from-published": "check/differs-from-published",
                 "differs-from-manifest": "check/differs-from-manifest",
                 "read-path-differs": "check/read-path-differs",
                 "manifest-differs-from-published": "check/manifest-differs-from-published",
                 "expectations-conflict": "check/expectations-conflict",
                 "device-differs": "check/device-differs",
                 "not-compared": "check/not-compared",
                 "plan-read-differs": "check/plan-read-differs",
                 "store-problem": "check/store-problem",
                 "file-extra": "check/file-extra",
                 "read-path-structure": "check/read-path-differs"}
#: Every kind of diagnostic a check yields: its own, then its scan's (stored values, structure).
DIAGNOSTIC_KINDS = (*FINDING_KINDS.values(), "check/path-skipped", "check/no-published-reference")


@dataclass(frozen=True, kw_only=True)
class PathRead:
    """One read path's pass over one file: how it read (``stats``) and what it delivered: ``fingerprint``
    (xxh3-128 of every byte) and ``digests`` (the expectations' algorithms it computed)."""

    stats: PassStats
    fingerprint: str
    digests: Mapping[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        s = self.stats
        return {"mode": s.mode, "bytes": s.bytes, "seconds": round(s.seconds, 6), "alignment": s.alignment,
                "alignment_source": s.alignment_source, "short_reads": s.short_reads,
                "xxh3_128": self.fingerprint, "digests": dict(self.digests)}


@dataclass(frozen=True, kw_only=True)
class FileCheck:
    """One file of the target: what it should be (``published``, ``manifest``), each path's read, the paths
    skipped here (mode -> why) and the decision."""

    path: str
    size: int
    published: Expectation | None
    manifest: Expectation | None
    reads: tuple[PathRead, ...]
    skipped: Mapping[str, str]
    decision: FileDecision
    #: Every digest published for the file, each compared (``published`` is the first).
    expectations: tuple[Expectation, ...] = ()
    #: The header the check was planned from was not the one the passes delivered: plan again (by
    #: :func:`ggaudit.check`) through this read path; None when it was.
    replanned: Any = None
    #: What the store only warns of for this file.
    warnings: tuple[str, ...] = ()

    def result(self, e: Expectation) -> str:
        """What the reads gave against one expectation: "matched" (a path's digest is it), "differs" (the paths
        that computed its algorithm gave another), or "not computed"."""
        computed = [r.digests[e.algorithm] for r in self.reads if e.algorithm in r.digests]
        return "matched" if e.digest in computed else "differs" if computed else "not computed"

    def to_json(self) -> dict[str, Any]:
        d = self.decision
        return {"path": self.path, "size": self.size, "verdict": d.verdict, "reference": d.reference,
                "published": _expectation(self.published), "manifest": _expectation(self.manifest),
                "expectations": [{**(_expectation(e) or {}), "result": self.result(e)} for e in self.expectations],
                "tested": None if d.tested is None else _tested(d),
                "paths": [r.to_json() for r in self.reads],
                "skipped": [{"mode": m, "reason": why} for m, why in self.skipped.items()],
                "right": list(d.right), "wrong": list(d.wrong), "decided": d.decided,
                "conclusions": [c.to_json() for c in d.conclusions]}


def _expectation(e: Expectation | None) -> dict[str, Any] | None:
    return None if e is None else {"algorithm": e.algorithm, "digest": e.digest, "source": e.what, "note": e.note}


def _tested(d: FileDecision) -> dict[str, Any]:
    """The active tests made for the file: each second read hashed (its digests, or why none), the eviction."""
    t = d.tested
    assert t is not None
    return {"rehashed": [{"mode": m, "digests": None if isinstance(o, str) else dict(o.digests),
                          "why": o if isinstance(o, str) else None} for m, o in t.rehashed.items()],
            "eviction": None if t.eviction is None else t.eviction.to_json()}


@dataclass(frozen=True, kw_only=True)
class CheckReport:
    """The whole check of a target: ``target`` as the user named it, ``store`` (its prefix, None for a
    path), ``files``, the read paths compared (``modes``), the scan of the bytes the ``scan_path`` read,
    the ``verdict`` (intact, damaged, nonfinite, read-path, unverified), what decided it (``reference``)
    and the ``conclusions``, first to last as the text report says them."""

    target: str
    store: str | None
    name: str
    files: tuple[FileCheck, ...]
    modes: tuple[str, ...]
    scans: tuple[ScanReport, ...]
    scan_path: str
    verdict: str
    reference: str | None
    conclusions: tuple[Conclusion, ...]
    next_steps: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        """Nothing is wrong: intact (or verified as the page cache delivers it, or unverified) with every path
        agreeing, no finding among the conclusions, and the scan found nothing."""
        return (self.verdict in (INTACT, CACHE_VERIFIED, UNVERIFIED) and all(s.ok for s in self.scans)
                and not any(c.code in FINDING_KINDS and c.code != "manifest-differs-from-published"
                            for c in self.conclusions))

    def diagnostics(self) -> Iterator[Diagnostic]:
        for f in self.files:
            for mode, why in f.skipped.items():
                yield Diagnostic(kind="check/path-skipped", message=escape_message(f"{mode} reads skipped: {why}"),
                                 file=f.path, extras={"mode": mode, "reason": why})
            for c in f.decision.conclusions:
                yield from _diagnostics(f, c)
        for s in self.scans:
            yield from s.diagnostics()

    # What every reporter reads (ggaudit.diagnostic.Report): the wording is below.
    def summary(self, limit: int | None = None) -> Summary:
        return Summary(headline=headline(self), lines=tuple(_lines(self)), seconds=self.seconds,
                       warnings=self.warnings)

    def cases(self) -> Iterator[Case]:
        return _cases(self)

    def page(self, limit: int | None = None) -> list[Block]:
        return _page(self)

    def to_json(self) -> dict[str, Any]:
        return {"schema": SCHEMA, "tool_version": __version__, "ok": self.ok, "target": self.target,
                "store": self.store, "verdict": self.verdict, "reference": self.reference, "modes": list(self.modes),
                "scan_path": self.scan_path, "conclusions": [c.to_json() for c in self.conclusions],
                "next_steps": list(self.next_steps), "files": [f.to_json() for f in self.files],
                "scans": [s.to_json() for s in self.scans], "warnings": list(self.warnings),
                "seconds": round(self.seconds, 6)}


def _diagnostics(f: FileCheck, c: Conclusion) -> Iterator[Diagnostic]:
    if c.code == "no-published-reference":
        yield Diagnostic(kind="check/no-published-reference", message=escape_message(c.text), file=f.path)
        return
    kind = FINDING_KINDS.get(c.code)
    if kind is None:
        return
    tensors = c.evidence.get("tensors") or []
    located = [t for t in tensors if isinstance(t, dict)]
    if not located:
        yield Diagnostic(kind=kind, message=escape_message(c.text), file=f.path, extras=dict(c.evidence))
        return
    for t in located:      # one per tensor and row range the manifest localised
        rows = t.get("rows")
        yield Diagnostic(kind=kind, message=escape_message(c.text), file=f.path, offset=t.get("offset"),
                         length=t.get("length"), tensor=t.get("tensor"), row=rows[0] if rows else None,
                         extras=dict(c.evidence))


# --- a check in words (CheckReport.summary): the verdict first, naming the model as the user typed it; then
# the evidence (what was compared with what, bytes, paths); then what it rules out and the next step.

def headline(r: CheckReport) -> str:
    """The verdict in one sentence."""
    paths = " and ".join(r.modes) if len(r.modes) < 3 else f"{', '.join(r.modes[:-1])} and {r.modes[-1]}"
    codes = {c.code for c in r.conclusions}
    if r.verdict == INTACT:
        what = f"intact: {_matched(r)}, and {paths} reads deliver the same bytes"
    elif r.verdict == CACHE_VERIFIED:
        what = (f"verified as the page cache delivers it: {_matched(r)} as {paths} reads deliver them; the device was "
                "not read past the page cache")
    elif r.verdict == DAMAGED and "expectations-conflict" in codes:
        what = "damaged or mislabelled: the digests published for it disagree, and its bytes are not what one says"
    elif r.verdict == DAMAGED and "device-differs" in codes:
        what = ("damaged on disk: the device holds other bytes than were published, while the page cache still held "
                "the published ones")
    elif r.verdict == DAMAGED and any(c.code.startswith("differs-from") and c.text.startswith("the bytes the page "
                                                                                               "cache")
                                      for c in r.conclusions):
        what = "damaged: the bytes the page cache delivers are not the ones published (the device was not read)"
    elif r.verdict == DAMAGED:
        what = "damaged: the file on disk is not the one published"
    elif r.verdict == NONFINITE:
        what = "the file holds NaN or Inf values as stored (the bytes are read right)"
    elif r.verdict == READ_PATH:
        what = "this machine reads the file differently depending on the read path"
    else:
        agree = not any(c.code == "read-path-differs" for c in r.conclusions)
        what = (f"unverified: no published reference, so the file can only be checked against itself; {paths} "
                "reads agree" if agree else "unverified: no published reference")
    return f"{escape_path(r.target)}: {what}{_scan_found(r)}"


def _scan_found(r: CheckReport) -> str:
    """Bytes read right can still say wrong things: the scan's findings (a chat template that runs code,
    metadata that contradicts the tensors, padding) said on the first line too, where the verdict alone
    would read as clean. A NONFINITE verdict already says what its scan found."""
    if r.verdict == NONFINITE or all(s.ok for s in r.scans):
        return ""
    kinds = list(dict.fromkeys(d.kind for s in r.scans for d in s.diagnostics()))
    return f"; but the scan found {', '.join(kinds)} findings (below)" if kinds else ""


def _matched(r: CheckReport) -> str:
    """What the intact bytes were found to match: a llama-gguf-hash manifest's lines cover the tensors' bytes
    only (not the header or the padding), so that is all that is claimed when one decided."""
    if any(c.code == "matches-manifest" and c.evidence.get("format") == "llama-gguf-hash" for c in r.conclusions):
        return "every tensor's bytes match the manifest's lines (llama-gguf-hash gives no digest of the header)"
    return "every byte matches what was published"


def _lines(r: CheckReport) -> Iterator[str]:
    yield headline(r)
    for f in r.files:
        reads = ", ".join(f"{p.stats.mode} {plural(p.stats.bytes, 'byte')} in {p.stats.seconds:.3f} s"
                          f"{'' if p.stats.alignment == 1 else f' (alignment {p.stats.alignment})'}" for p in f.reads)
        yield f"file {escape_path(f.path)}: {reads}"
        for mode, why in f.skipped.items():
            yield f"  {mode} reads skipped: {escape_message(why)}"
    for c in r.conclusions:
        yield f"- {escape_message(c.text)}"
    for d in (d for s in r.scans for d in s.diagnostics()):
        yield from ("  " + line for line in d.lines)
    for step in r.next_steps:
        yield f"next: {escape_message(step)}"
    yield f"verdict: {r.verdict} (reference: {r.reference or 'none'}; paths compared: {', '.join(r.modes)})"


def _cases(r: CheckReport) -> Iterator[Case]:
    """A case per file and read path (failing when that path's bytes are wrong), then the verdict's case
    (failing, with every finding's line, when something is wrong)."""
    for f in r.files:
        for p in f.reads:
            wrong = Failure(message=f"{p.stats.mode} reads deliver other bytes", kinds="check/read-path-differs",
                            lines=())
            yield Case(group=escape_path(f.path), name=p.stats.mode,
                       failure=wrong if p.stats.mode in f.decision.wrong else None)
    lines = tuple(d.message for d in r.diagnostics() if d.severity != "note")
    yield Case(name="verdict", failure=None if r.ok else Failure(message=r.verdict, kinds=r.verdict, lines=lines))


def _page(r: CheckReport) -> list[Block]:
    """The verdict first, in words; then each conclusion, each path's read and the next step."""
    reads = [(f, p) for f in r.files for p in f.reads]
    return [Paragraph(text=headline(r), css="verdict", strong=True), Heading(text="Conclusions"),
            Table(head=("code", "conclusion"), total=len(r.conclusions), what="conclusions",
                  rows=((Cell(text=c.code), Cell(text=escape(c.text))) for c in r.conclusions)),
            Heading(text="Read paths"), Table(
                head=("file", "path", "bytes", "seconds", "alignment", "xxh3-128"),
                rows=((Cell(text=escape_path(f.path), css="mono"), Cell(text=p.stats.mode), Cell.number(p.stats.bytes),
                       Cell(text=f"{p.stats.seconds:.3f}", css="num"), Cell.number(p.stats.alignment),
                       Cell(text=p.fingerprint, css="mono")) for f, p in reads), total=len(reads), what="reads"),
            *(Paragraph(text=f"next: {escape(step)}") for step in r.next_steps)]
