"""A check's findings as data: :class:`CheckReport`, its JSON (docs/json.md, ``check_report`` in
ggaudit/schema/) and its diagnostics. The JSON shape is a public contract: keys may be added, never
removed or renamed without a new schema id."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from .._version import __version__
from ..diagnostic import Case, Diagnostic, Failure, Summary
from ..page import Block, Cell, Heading, Paragraph, Table
from ..scan.report import Finding, ScanReport, describe_finding
from ..escaping import escape, escape_message, escape_path
from ..wording import joined, plural
from .facts import (CACHE_VERIFIED, DAMAGED, INTACT, MANIFEST, NONFINITE, PUBLISHED, READ_PATH, STRUCTURE, UNVERIFIED,
                    Conclusion, Expectation, FileDecision, Verdict)
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
                 "read-path-structure": "check/read-path-differs",
                 "read-path-nonfinite": "check/nonfinite-delivered"}
#: The scan's kinds of a non-finite value (stored, or as a read path delivered it).
NONFINITE_KINDS = ("nan", "+inf", "-inf")
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
        that computed its algorithm gave another), or "not computed". A path's second read counts where it
        delivered the bytes of its first (the digest rides on one pass; a path that differs is hashed again)."""
        computed = [d[e.algorithm] for d in self._computed() if e.algorithm in d]
        return "matched" if e.digest in computed else "differs" if computed else "not computed"

    def _computed(self) -> list[Mapping[str, str]]:
        first = {r.stats.mode: r.fingerprint for r in self.reads}
        again = {} if self.decision.tested is None else self.decision.tested.rehashed
        return [*(r.digests for r in self.reads),
                *(o.digests for m, o in again.items() if not isinstance(o, str) and o.fingerprint == first.get(m))]

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
    verdict: Verdict
    reference: str | None
    conclusions: tuple[Conclusion, ...]
    next_steps: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    seconds: float = 0.0
    #: The non-finite values only the scan path delivered (``read-path-nonfinite``), each a
    #: ``check/nonfinite-delivered`` diagnostic: never the scan's own kind, which says a value is stored.
    delivered: tuple[Finding, ...] = ()
    #: The engine of the target's store and the read path it reads through by default (``Store.ENGINE``).
    engine: tuple[str, str] | None = None

    @property
    def ok(self) -> bool:
        """Nothing is wrong: intact (or verified as the page cache delivers it, or unverified) with every path
        agreeing, no finding among the conclusions, and the scan found nothing."""
        return (self.verdict in (INTACT, CACHE_VERIFIED, UNVERIFIED) and all(s.ok for s in self.scans)
                and not any(c.code in FINDING_KINDS and c.code != "manifest-differs-from-published"
                            for c in self.conclusions))

    def diagnostics(self) -> Iterator[Diagnostic]:
        for f in self.files:
            # With several files, each file's findings name it: their lines alone would read alike.
            named = f"{escape_path(f.path)}: " if len(self.files) > 1 else ""
            for mode, why in f.skipped.items():
                yield Diagnostic(kind="check/path-skipped",
                                 message=named + escape_message(f"{mode} reads skipped: {why}"),
                                 file=f.path, extras={"mode": mode, "reason": why})
            for c in f.decision.conclusions:
                yield from _diagnostics(f, c, named)
        yield from _scan_diagnostics(self)
        yield from _path_diagnostics(self)

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


def _scan_diagnostics(r: CheckReport) -> Iterator[Diagnostic]:
    """The scan's findings of the bytes it read, but for the values only the scan path delivered (in a tensor
    it reads differently, nothing decided): those are the path's (:func:`_path_diagnostics`)."""
    delivered = {(f.path, f.offset, f.kind) for f in r.delivered}
    for s in r.scans:
        yield from (d for d in s.diagnostics() if (d.file, d.offset, d.kind) not in delivered)


def _path_diagnostics(r: CheckReport) -> Iterator[Diagnostic]:
    """What a wrong read path delivered, as that path's findings (read-path family): each non-finite value it
    delivered, and bytes no tensor owns that look wrong only as it delivered them."""
    through = next((c for c in r.conclusions if c.code == "read-path-nonfinite"), None)
    for f in r.delivered:
        assert through is not None      # the values delivered are that conclusion's
        yield Diagnostic(kind="check/nonfinite-delivered", message=delivered_line(f, through), file=f.path,
                         offset=f.offset, length=f.size, tensor=f.tensor, row=f.row, column=f.column,
                         block=None if f.field == "value" else f.block, field=f.field, expert=f.expert,
                         extras={"tensor": f.tensor, "file": f.path, **f.to_json(), "path": through.evidence["path"],
                                 "decided": through.evidence["decided"]})
    for c in r.conclusions:
        if c.code == "read-path-structure":
            e = c.evidence
            yield Diagnostic(kind=FINDING_KINDS[c.code], message=escape_message(c.text), file=e.get("file"),
                             offset=e.get("offset"), length=e.get("length"), extras=dict(e))


def delivered_line(f: Finding, through: Conclusion) -> str:
    """A value the scan path delivered, in one line: the scan's line for it, then whose value it is."""
    e = through.evidence
    whose = (f"the file's bytes there are what {joined(e['agree'])} read" if e.get("decided") and e.get("agree")
             else "which bytes are the file's is not known")
    return f"{describe_finding(f)}, as {e['path']} reads delivered it ({whose})"


def _diagnostics(f: FileCheck, c: Conclusion, named: str = "") -> Iterator[Diagnostic]:
    message = named + escape_message(c.text)
    if c.code == "no-published-reference":
        yield Diagnostic(kind="check/no-published-reference", message=message, file=f.path)
        return
    kind = FINDING_KINDS.get(c.code)
    if kind is None:
        return
    first = c.evidence.get("first")
    if c.code == "read-path-differs" and isinstance(first, dict):      # at the first byte the paths differ
        yield Diagnostic(kind=kind, message=message, file=f.path, offset=first["offset"], length=1,
                         tensor=first.get("tensor"), row=first.get("row"), extras=dict(c.evidence))
        return
    tensors = c.evidence.get("tensors") or []
    located = [t for t in tensors if isinstance(t, dict)]
    if not located:
        yield Diagnostic(kind=kind, message=message, file=f.path, extras=dict(c.evidence))
        return
    for t in located:      # one per tensor and row range the manifest localised
        rows = t.get("rows")
        yield Diagnostic(kind=kind, message=message, file=f.path, offset=t.get("offset"),
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
        what = f"this machine reads the file differently depending on the read path{_located(r)}"
    elif r.verdict == STRUCTURE:
        what = _structure_headline(r, paths)
    else:
        agree = not any(c.code == "read-path-differs" for c in r.conclusions)
        what = (f"unverified: no published reference, so the file can only be checked against itself; {paths} "
                "reads agree" if agree else "unverified: no published reference")
    return f"{escape_path(r.target)}: {what}{_scan_found(r)}{_engine_said(r) if r.verdict == READ_PATH else ''}"


def _scan_found(r: CheckReport) -> str:
    """Bytes read right can still say wrong things: the scan's findings (a chat template that runs code,
    metadata that contradicts the tensors, padding) said on the first line too, where the verdict alone
    would read as clean; a non-finite value as what it is, the file's or a read path's. A NONFINITE verdict
    already says what its scan found, a STRUCTURE verdict its structure findings."""
    if r.verdict == NONFINITE:
        return ""
    said = "".join(_nonfinite_said(c) for c in r.conclusions if c.code in ("stored-nonfinite", "read-path-nonfinite"))
    shown = (*NONFINITE_KINDS, *(STRUCTURE_KINDS if r.verdict == STRUCTURE else ()))
    kinds = list(dict.fromkeys(d.kind for d in _scan_diagnostics(r) if d.kind not in shown))
    return said + (f"; but the scan found {', '.join(kinds)} findings (below)" if kinds else "")


#: The scan's kinds of bytes no tensor owns.
STRUCTURE_KINDS = ("padding", "gap", "trailing")


def _nonfinite_said(c: Conclusion) -> str:
    """A stored-nonfinite or read-path-nonfinite conclusion in a few words: how many values, what they are and
    where the first is, and whose they are."""
    e = c.evidence
    listed = [f for f in e.get("findings") or [] if isinstance(f, dict)]
    count = int(e.get("count", 0))
    if not listed or not count:
        return ""
    first = listed[0]
    kinds = {f.get("kind") for f in listed}
    name = ("non-finite value" if len(listed) < count else "NaN" if kinds == {"nan"} else
            "Inf" if kinds <= {"+inf", "-inf"} else "NaN or Inf")
    values = f"1 {name}" if count == 1 else f"{count} {name}{'s' if name == 'non-finite value' else ' values'}"
    where = f"tensor {escape(str(first.get('tensor')))}, row {first.get('row')}"
    if c.code == "stored-nonfinite":
        return f"; and the file holds {values}: {where}" if count == 1 else f"; and the file holds {values}, the " \
                                                                           f"first at {where}"
    located = f"{values} ({where})" if count == 1 else f"{values} (the first: {where})"
    whose = ("that the file does not hold" if e.get("decided") and e.get("agree") else
             "where the paths differ, and which bytes are the file's is not known")
    return f"; {e.get('path')} reads delivered {located} {whose}"


def _located(r: CheckReport) -> str:
    """Where the read paths first differ: the first byte (its tensor and row) when a read found it, and the first
    run of row groups whose digests differ (its tensor, rows and offset)."""
    c = next((c for c in r.conclusions if c.code == "read-path-differs"), None)
    if c is None:
        return ""
    e = c.evidence
    runs = [w for w in e.get("where") or [] if isinstance(w, dict)]
    first = e.get("first")
    if not runs and not isinstance(first, dict):
        return ""
    run = runs[0] if runs else {}
    rows = run.get("rows")
    group = (f"rows {rows[0]}-{rows[1]}, whose digests differ" if rows else "")
    if isinstance(first, dict):
        at = f"offset {first['offset']}" + ("" if first.get("tensor") is None else
                                              f": tensor {escape(str(first['tensor']))}, row {first['row']}")
        where = f"first at {at}" + (f" (in {group})" if group and first.get("tensor") == run.get("tensor") else "")
    else:
        where = (f"first in tensor {escape(str(run['tensor']))}" + (f" {group}" if group else "")
                 + f" (the {run['length']} bytes from offset {run['offset']})")
    return f": {joined(e['paths'])} reads deliver other bytes than {joined(e['agree'])} reads, {where}"


def _engine_said(r: CheckReport) -> str:
    """Whether the read path the store's engine reads through by default delivered the right bytes: what the
    user's engine got."""
    c = next((c for c in r.conclusions if c.code == "read-path-differs"), None)
    if r.engine is None or c is None:
        return ""
    engine, mode = r.engine
    e = c.evidence
    reads = f"; {engine} reads through {mode} by default"
    known = bool(e.get("decided")) or e.get("reference") in (PUBLISHED, MANIFEST)
    if mode not in r.modes:
        return f"{reads}, which was not compared"
    if mode in e.get("paths", ()) and known:
        return f"{reads}, one of the paths that delivered the wrong bytes: {engine} gets them"
    if mode in e.get("agree", ()) and known:
        return f"{reads}, which delivered the right bytes: {engine} gets the file's bytes"
    return f"{reads}, and which bytes are the file's is not known"


def _structure_headline(r: CheckReport, paths: str) -> str:
    """Bytes no tensor owns that should not be there, read right: the first region, and what the bytes were
    checked against."""
    found = [c for c in r.conclusions if c.code == "structure"]
    e = found[0].evidence
    region = {"trailing": f"{plural(e['length'], 'byte')} of data after the last tensor",
              "gap": f"a gap of {plural(e['length'], 'byte')} between tensors",
              "padding": f"padding of {plural(e['length'], 'byte')} that is not zeros"}.get(str(e["kind"]),
                                                                                          str(e["kind"]))
    where = f"at offset {e['offset']}" + (f" of {escape_path(str(e['file']))}" if len(r.files) > 1 else "")
    more = f" (and {plural(len(found) - 1, 'more region')})" if len(found) > 1 else ""
    verdicts = {f.decision.verdict for f in r.files}
    # A llama-gguf-hash manifest's lines cover the tensors' bytes only: they say nothing of these.
    covered = ", these bytes included" if _matched(r) == EVERY_BYTE else ""
    basis = (f"{_matched(r)}{covered}" if verdicts == {INTACT} else
             f"{_matched(r)} as {paths} reads deliver them" if verdicts <= {INTACT, CACHE_VERIFIED} else
             f"{paths} reads agree on them; nothing published says whether the publisher's file holds them")
    return f"structure: the file holds {region} {where}{more}, which no tensor reads ({basis})"


def _matched(r: CheckReport) -> str:
    """What the intact bytes were found to match: a llama-gguf-hash manifest's lines cover the tensors' bytes
    only (not the header or the padding), so that is all that is claimed when one decided."""
    if any(c.code == "matches-manifest" and c.evidence.get("format") == "llama-gguf-hash" for c in r.conclusions):
        return "every tensor's bytes match the manifest's lines (llama-gguf-hash gives no digest of the header)"
    return EVERY_BYTE


#: What intact bytes matched when a whole-file digest decided.
EVERY_BYTE = "every byte matches what was published"


def _lines(r: CheckReport) -> Iterator[str]:
    yield headline(r)
    for f in r.files:
        reads = ", ".join(f"{p.stats.mode} {plural(p.stats.bytes, 'byte')} in {p.stats.seconds:.3f} s"
                          f"{'' if p.stats.alignment == 1 else f' (alignment {p.stats.alignment})'}" for p in f.reads)
        yield f"file {escape_path(f.path)}: {reads}"
        for mode, why in f.skipped.items():
            yield f"  {mode} reads skipped: {escape_message(why)}"
    yield from (f"- {text}" for _, text in _said(r, escape_message))
    for d in (*_scan_diagnostics(r), *(d for d in _path_diagnostics(r) if d.kind == "check/nonfinite-delivered")):
        yield from ("  " + line for line in d.lines)
    for step in r.next_steps:
        yield f"next: {escape_message(step)}"
    yield f"verdict: {r.verdict} (reference: {r.reference or 'none'}; paths compared: {', '.join(r.modes)})"


def _said(r: CheckReport, escaped: Callable[[str], str]) -> Iterator[tuple[Conclusion, str]]:
    """Each conclusion once, in order, with its text as shown (``escaped``: the text report's escaping, or the
    page's). With several files, a file's own conclusion names its file, and one every file concluded alike is
    said once, naming them all."""
    if len(r.files) < 2:
        yield from ((c, escaped(c.text)) for c in r.conclusions)
        return
    own = {(f.path, c.text) for f in r.files for c in f.decision.conclusions}
    by_text: dict[str, list[str]] = {}
    for c in r.conclusions:
        path = str(c.evidence.get("file"))
        if (path, c.text) in own:
            by_text.setdefault(c.text, []).append(path)
    said: set[str] = set()
    for c in r.conclusions:
        if c.text not in by_text:
            yield c, escaped(c.text)
        elif c.text not in said:
            said.add(c.text)
            yield c, f"{joined([escape_path(p) for p in dict.fromkeys(by_text[c.text])])}: {escaped(c.text)}"


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
    said = list(_said(r, escape))
    return [Paragraph(text=headline(r), css="verdict", strong=True), Heading(text="Conclusions"),
            Table(head=("code", "conclusion"), total=len(said), what="conclusions",
                  rows=((Cell(text=c.code), Cell(text=text)) for c, text in said)),
            Heading(text="Read paths"), Table(
                head=("file", "path", "bytes", "seconds", "alignment", "xxh3-128"),
                rows=((Cell(text=escape_path(f.path), css="mono"), Cell(text=p.stats.mode), Cell.number(p.stats.bytes),
                       Cell(text=f"{p.stats.seconds:.3f}", css="num"), Cell.number(p.stats.alignment),
                       Cell(text=p.fingerprint, css="mono")) for f, p in reads), total=len(reads), what="reads"),
            *(Paragraph(text=f"next: {escape(step)}") for step in r.next_steps)]
