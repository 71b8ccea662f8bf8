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
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import PurePath
from typing import Any
from urllib.parse import quote_from_bytes

from ..._version import __version__
from ...diagnostic import Artifact, Diagnostic, Place, Report
from ...outcomes import Outcome, overall_status
from ...kinds import ERROR, WARNING, Kind, kind
from ...escaping import escape, escape_message
from . import DEFAULT, Rendering
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

    def file(self, read: Artifact) -> None:
        """A file a report read: listed with its length, and with what the report says of its digest (one a
        cache gave: ``digestSource`` ``cache``, ``digestCachedAt``, and in words)."""
        self.artifact(read.path, read.length)
        entry = self.artifacts[read.path]
        if read.properties is not None:
            entry["properties"] = dict(read.properties)
        if read.description is not None:
            entry["description"] = {"text": read.description}

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
    said = result.summary(log.limit)
    for warning in said.warnings:
        log.notify(WARNING, escape_message(warning), {"target": outcome.model})
    for read in said.files:     # listed before its results
        log.file(read)
    found = list(result.diagnostics())
    listed = found if log.limit is None else found[:log.limit]
    for d in listed:
        log.result(outcome.model, d)
    # Counted, not all listed (--limit): so nothing is lost unsaid.
    log.targets.append({"target": outcome.model, "ok": result.ok, **said.counted})
