"""A check's findings as data: :class:`CheckReport`, its JSON (docs/json.md, ``check_report`` in
ggaudit/schema/) and its diagnostics. The JSON shape is a public contract: keys may be added, never
removed or renamed without a new schema id."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from .._version import __version__
from ..diagnostic import Diagnostic
from ..scan.report import ScanReport
from ..text import escape_message
from .facts import CACHE_VERIFIED, INTACT, UNVERIFIED, Conclusion, Expectation, FileDecision
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
