"""The SARIF 2.1.0 reporter: one log with one ``run`` for the whole invocation, for code-scanning tools and CI.

Every finding a report lists is one ``result``: its rule (the kind of finding), its message (the text
report's line, escaped for a terminal), where it is (the file as ``artifactLocation``, its absolute byte
offset and length as ``region``; the tensor as a logical location) and its exact parts as ``properties``
(names unescaped, as in the JSON). Findings a report counts but does not list (``scan --limit``, rows past
the mismatches kept) are counted per target in ``run.properties``, so nothing is lost unsaid. A target that
failed is an error notification of ``invocations[0]``, whose ``executionSuccessful`` is then false; each
report's warnings are warning notifications.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import PurePath
from typing import Any
from urllib.parse import quote_from_bytes

from ..._version import __version__
from ...batch import Outcome, Report, overall_status
from ...diagnostic import Diagnostic, Place
from ...kinds import ERROR, WARNING, Kind, kind
from ...text import escape, escape_message
from . import DEFAULT, Rendering
from . import text
from .json import STATUS_WORDS, error_to_json

NAME = "sarif"
VERSION = "2.1.0"
#: The OASIS schema of the SARIF 2.1.0 errata01 (the one tests/data holds).
SCHEMA_URI = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"


def rule_json(k: Kind) -> dict[str, Any]:
    """A kind of finding (ggaudit.kinds) as a SARIF rule: what it is, what to do about it, how bad it is."""
    return {"id": k.id, "shortDescription": {"text": k.title}, "help": {"text": k.action},
            "defaultConfiguration": {"level": k.severity}}


def artifact_uri(path: str, flavour: type[PurePath] = PurePath) -> str:
    """A file URI for an absolute path, a relative URI reference (forward slashes) for a relative one;
    every byte not unreserved percent-encoded, ':' too, so a relative first segment never reads as a
    scheme. ``flavour`` (PurePosixPath or PureWindowsPath) is this OS's unless a test says otherwise."""
    p = flavour(path)
    posix = p.as_posix()
    if not p.is_absolute():
        return _quote(posix)
    if p.drive.startswith(("\\\\", "//")):           # \\server\share\...: the host goes after "file:"
        return "file:" + _quote(posix)
    if p.drive:                                      # C:\...: the drive letter keeps its colon
        return "file:///" + p.drive + _quote(posix[len(p.drive):])
    return "file://" + _quote(posix)


def _quote(text: str) -> str:
    # Bytes, not str: a name decoded with surrogateescape (undecodable bytes) encodes back to those bytes.
    return quote_from_bytes(os.fsencode(text), safe="/")


@dataclass
class _Log:
    """The parts of the run being built: results, the rules and artifacts they name (by index), the
    notifications of the invocation, and what each target counted."""

    limit: int | None
    results: list[dict[str, Any]] = field(default_factory=list)
    rules: dict[str, int] = field(default_factory=dict)
    artifacts: dict[str, dict[str, Any]] = field(default_factory=dict)
    notifications: list[dict[str, Any]] = field(default_factory=list)
    targets: list[dict[str, Any]] = field(default_factory=list)

    def artifact(self, path: str, length: int | None = None) -> dict[str, Any]:
        """The artifactLocation of ``path`` (listed once among the run's artifacts, with its length once
        known)."""
        entry = self.artifacts.setdefault(path, {"location": {"uri": artifact_uri(path)}})
        if length is not None:
            entry["length"] = length
        return {"uri": entry["location"]["uri"], "index": list(self.artifacts).index(path)}

    def digest_source(self, c: Any) -> None:
        """Say on the artifact of a file whose digest the cache gave (a verify ``Checked``) that it was not
        read again: in words and as properties (``digestSource`` ``cache``, ``digestCachedAt``). A file
        read says nothing more."""
        source = text.digest_source(c)
        if source is not None:
            entry = self.artifacts[c.path]
            entry["properties"] = {"digestSource": c.source, "digestCachedAt": c.cached_at}
            entry["description"] = {"text": source}

    def location(self, at: Diagnostic | Place) -> dict[str, Any]:
        physical: dict[str, Any] = {"artifactLocation": self.artifact(str(at.file))}
        if at.offset is not None and at.length is not None:
            physical["region"] = {"byteOffset": at.offset, "byteLength": at.length}
        where: dict[str, Any] = {"physicalLocation": physical}
        if at.tensor is not None:
            # Shown by viewers: escaped like any name on a terminal; properties hold it exact.
            where["logicalLocations"] = [{"name": escape(at.tensor), "kind": "member"}]
        return where

    def result(self, target: str, d: Diagnostic) -> None:
        """A result per diagnostic: its kind's rule, its message, where it is (and the other places it
        involves), and its exact parts as properties."""
        index = self.rules.setdefault(d.kind, len(self.rules))
        # The related places first: a file they name (A's, what was expected) is listed before the result's own.
        related = [{"id": n, "message": {"text": p.what}, **self.location(p)} for n, p in enumerate(d.related)]
        doc: dict[str, Any] = {
            "ruleId": d.kind, "ruleIndex": index, "level": d.severity, "message": {"text": d.message},
            "locations": [self.location(d)], "properties": {"target": target, **d.extras}}
        if related:
            doc["relatedLocations"] = related
        self.results.append(doc)

    def notify(self, level: str, message: str, properties: dict[str, Any] | None = None) -> None:
        doc: dict[str, Any] = {"level": level, "message": {"text": message}}
        if properties is not None:
            doc["properties"] = properties
        self.notifications.append(doc)


def report(outcomes: Sequence[Outcome[Report]], rendering: Rendering = DEFAULT) -> str:
    log = _Log(limit=rendering.limit)
    for o in outcomes:
        _add(log, o)
    return json.dumps(document(log, overall_status(outcomes)), indent=2) + "\n"


def document(log: _Log, status: int) -> dict[str, Any]:
    # No informationUri: the project names no home page to point at (pyproject.toml has no URLs).
    driver = {"name": "ggaudit", "version": __version__, "semanticVersion": __version__,
              "rules": [rule_json(kind(r)) for r in log.rules]}
    invocation = {"executionSuccessful": not any(n["level"] == ERROR for n in log.notifications),
                  "exitCode": status, "toolExecutionNotifications": log.notifications}
    run = {"tool": {"driver": driver}, "invocations": [invocation], "artifacts": list(log.artifacts.values()),
           "results": log.results,
           "properties": {"status": STATUS_WORDS[status], "targets": log.targets}}
    return {"$schema": SCHEMA_URI, "version": VERSION, "runs": [run]}


def _add(log: _Log, outcome: Outcome[Report]) -> None:
    """A target: its error, or its warnings, the files it read, a result per diagnostic (the first
    ``limit`` when one is given) and what it counted."""
    if outcome.error is not None:
        err = error_to_json(outcome.error)
        log.notify(ERROR, str(outcome.error), {"target": outcome.model, **err})
        log.targets.append({"target": outcome.model, "error": err})
        return
    result = outcome.result
    assert result is not None     # an outcome holds a result or an error
    for warning in getattr(result, "warnings", ()):
        log.notify(WARNING, escape_message(warning), {"target": outcome.model})
    name = type(result).__name__
    _FILES.get(name, _no_files)(log, result)
    found = list(result.diagnostics())
    listed = found if log.limit is None else found[:log.limit]
    for d in listed:
        log.result(outcome.model, d)
    summary = _SUMMARIES.get(name, _no_summary)(result, len(listed))
    log.targets.append({"target": outcome.model, "ok": result.ok, **summary})


# --- the files each report read (artifacts, listed before its results), and what it counted --------------
# By the report type's name: naming a type imports nothing of its job. A report type not named here has
# its results, and the files they name, all the same.

def _no_files(log: _Log, r: Any) -> None:
    return None


def _no_summary(r: Any, listed: int) -> dict[str, Any]:
    return {}


def _scan_files(log: _Log, r: Any) -> None:
    for path in r.files:
        log.artifact(path)
    for d in r.digests:
        log.artifact(d.path, d.size)


def _scan_summary(r: Any, listed: int) -> dict[str, Any]:
    # Counted, not all listed (--limit): what every tensor with findings holds, listed or not.
    tensors = [{"name": t.name, "counts": dict(t.counts), "listed": len(t.findings),
                "not_listed": t.total - len(t.findings)} for t in r.tensors if t.total]
    return {"complete": r.complete, "counts": r.counts, "structure": len(r.structure), "tensors": tensors,
            "not_listed": sum(t["not_listed"] for t in tensors)}


def _verify_files(log: _Log, r: Any) -> None:
    for c in r.checked:
        if c.algorithm != "gguf-layout" and c.subject != "all tensor data":   # those sizes are not the file's
            log.artifact(c.path, c.size)
        else:
            log.artifact(c.path)
        log.digest_source(c)


def _verify_summary(r: Any, listed: int) -> dict[str, Any]:
    return {"kind": r.kind, "stopped_early": r.stopped_early, "mismatches": len(r.mismatches),
            "listed": listed, "not_listed": len(r.mismatches) - listed}


def _rows_files(log: _Log, r: Any) -> None:
    log.artifact(r.file)


def _rows_summary(r: Any, listed: int) -> dict[str, Any]:
    extra = {} if r.exercised is None else {"exercised": r.exercised.to_json()}   # only when those stages ran
    if r.published is not None:     # only when the published digest was asked to decide disputed rows
        extra["published"] = r.published.to_json()
    return {"tensor": r.tensor, "mismatches": r.mismatch_count, "listed": len(r.mismatches),
            "not_listed": r.mismatch_count - len(r.mismatches), "short_reads": r.short_read_count,
            "short_reads_listed": len(r.short_reads), "nonfinite_rows": r.nonfinite_rows, **extra}


def _diff_summary(r: Any, listed: int) -> dict[str, Any]:
    return {"identical": len(r.identical), "differ": len(r.data_diffs), "layout_changes": len(r.layout_changes),
            "only_in_a": len(r.only_in_a), "only_in_b": len(r.only_in_b), "metadata": len(r.metadata),
            "structure": r.structure_differences, "stopped_early": r.stopped_early}


def _info_files(log: _Log, r: Any) -> None:
    for f in r.model.files:
        log.artifact(f.path, f.size)


def _manifest_summary(r: Any, listed: int) -> dict[str, Any]:
    return {"output": r.output}


_FILES: dict[str, Callable[[_Log, Any], None]] = {
    "ScanReport": _scan_files, "VerifyReport": _verify_files, "RowsReport": _rows_files, "ModelInfo": _info_files,
}

_SUMMARIES: dict[str, Callable[[Any, int], dict[str, Any]]] = {
    "ScanReport": _scan_summary, "VerifyReport": _verify_summary, "RowsReport": _rows_summary,
    "DiffReport": _diff_summary, "ManifestWritten": _manifest_summary,
}
