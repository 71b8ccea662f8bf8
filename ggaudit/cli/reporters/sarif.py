"""The SARIF 2.1.0 reporter, for code-scanning tools and CI, shaped to what GitHub code scanning accepts.

One ``run`` per target, each with its own ``automationDetails.id`` (``ggaudit/COMMAND/TARGET/``: for GitHub
the analysis's category, so an upload of one model never closes the alerts of another). Every finding a
report lists is one ``result``: its rule (the kind of finding), its message (the text report's line, escaped
for a terminal), where it is (the file as ``artifactLocation``; a ``region`` of ``startLine`` 1, which GitHub
requires of every region and gives a binary file, with the absolute byte offset and length; the tensor as a
logical location), a ``partialFingerprints`` entry that stays the same across runs of the same finding (its
kind, the file's name and its place: never a path, a duration or the order of the results), and its exact
parts as ``properties`` (names unescaped, as in the JSON). Findings a report counts but does not list
(``scan --limit``, rows past the mismatches kept) are counted in ``run.properties``, so nothing is lost
unsaid. A target that failed is an error notification of its run's ``invocations[0]``, whose
``executionSuccessful`` is then false; each report's warnings are warning notifications.

The log stays within code scanning's documented upload limits (:data:`MAX_RUNS`, :data:`MAX_RESULTS`,
:data:`MAX_LOCATIONS`, :data:`MAX_GZIP_BYTES`): what is cut to fit is said in the run (a warning
notification and ``run.properties.cut``) and on stderr.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import PurePath
from typing import Any
from urllib.parse import quote_from_bytes

import click

from ..._version import __version__
from ...diagnostic import Artifact, Diagnostic, Place, Report
from ...outcomes import Outcome, overall_status
from ...kinds import ERROR, WARNING, Kind, kind
from ...escaping import escape, escape_message
from ..common import hint
from . import DEFAULT, Rendering
from .json import STATUS_WORDS, error_to_json

NAME = "sarif"
VERSION = "2.1.0"
#: The OASIS schema of the SARIF 2.1.0 errata01 (the one tests/data holds).
SCHEMA_URI = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"

# GitHub code scanning's upload limits (docs.github.com: "SARIF support for code scanning", "SARIF results
# exceed one or more limits", "SARIF results file is too large"): a file over any of them is rejected.
#: Runs per file.
MAX_RUNS = 20
#: Results per run (of which GitHub shows the 5,000 most severe).
MAX_RESULTS = 25_000
#: Locations per result (ggaudit's own location and the related ones).
MAX_LOCATIONS = 1_000
#: The file, gzip-compressed as the upload sends it: 10 MB.
MAX_GZIP_BYTES = 10_000_000
#: The key of ggaudit's fingerprint in ``partialFingerprints`` (versioned: a new derivation, a new key).
FINGERPRINT = "ggauditFinding/v1"
#: The target name of the run that the targets past :data:`MAX_RUNS` share.
SHARED = "more-targets"


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


def fingerprint_key(d: Diagnostic) -> str:
    """What identifies a finding from one run to the next: its kind, the name (not the path: a CI runner's
    checkout or a temporary folder moves) of its file and of each related one, and its place in them."""
    def place(p: Diagnostic | Place) -> list[Any]:
        return [os.path.basename(str(p.file)) if p.file is not None else None, p.offset, p.length, p.tensor]

    where = [*place(d), d.row, d.column, d.block, d.field, d.expert]
    return json.dumps([d.kind, where, [place(p) for p in d.related]])


@dataclass
class _Run:
    """One run being built: its targets, results, the rules and artifacts they name (by index), the
    notifications of its invocation, what each target counted and what was cut to fit code scanning."""

    automation_id: str
    limit: int | None
    outcomes: list[Outcome[Report]] = field(default_factory=list)
    results: list[dict[str, Any]] = field(default_factory=list)
    rules: dict[str, int] = field(default_factory=dict)
    artifacts: dict[str, dict[str, Any]] = field(default_factory=dict)
    notifications: list[dict[str, Any]] = field(default_factory=list)
    targets: list[dict[str, Any]] = field(default_factory=list)
    cut: list[dict[str, Any]] = field(default_factory=list)
    #: What was changed to fit code scanning's limits, in words, for stderr too.
    said: list[str] = field(default_factory=list)
    fingerprints: Counter[str] = field(default_factory=Counter)

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
        # GitHub drops a region without startLine; a binary file's region is line 1 and its bytes.
        region: dict[str, Any] = {"startLine": 1}
        if at.offset is not None and at.length is not None:
            region.update(byteOffset=at.offset, byteLength=at.length)
        physical = {"artifactLocation": self.artifact(str(at.file)), "region": region}
        where: dict[str, Any] = {"physicalLocation": physical}
        if at.tensor is not None:
            # Shown by viewers: escaped like any name on a terminal; properties hold it exact.
            where["logicalLocations"] = [{"name": escape(at.tensor), "kind": "member"}]
        return where

    def result(self, target: str, d: Diagnostic) -> None:
        """A result per diagnostic: its kind's rule, its message, where it is (and the other places it
        involves, as many as code scanning takes), its fingerprint, and its exact parts as properties."""
        index = self.rules.setdefault(d.kind, len(self.rules))
        properties: dict[str, Any] = {"target": target, **d.extras}
        places = d.related[:MAX_LOCATIONS - 1]
        if len(places) < len(d.related):
            properties["related_not_listed"] = len(d.related) - len(places)
            self.fitted(f"{len(d.related) - len(places)} of {len(d.related)} related locations of a {d.kind} "
                        f"result not listed (code scanning takes at most {MAX_LOCATIONS} locations a result)")
        # The related places first: a file they name (A's, what was expected) is listed before the result's own.
        related = [{"id": n, "message": {"text": p.what}, **self.location(p)} for n, p in enumerate(places)]
        digest = hashlib.sha256(fingerprint_key(d).encode()).hexdigest()
        # Two findings alike in every part are told apart by their count, as GitHub's own line hashes are.
        self.fingerprints[digest] += 1
        doc: dict[str, Any] = {
            "ruleId": d.kind, "ruleIndex": index, "level": d.severity, "message": {"text": d.message},
            "locations": [self.location(d)],
            "partialFingerprints": {FINGERPRINT: f"{digest}:{self.fingerprints[digest]}"},
            "properties": properties}
        if related:
            doc["relatedLocations"] = related
        self.results.append(doc)

    def notify(self, level: str, message: str, properties: dict[str, Any] | None = None) -> None:
        doc: dict[str, Any] = {"level": level, "message": {"text": message}}
        if properties is not None:
            doc["properties"] = properties
        self.notifications.append(doc)

    def fitted(self, message: str) -> None:
        """Something changed to fit code scanning's limits: a warning of the run, and on stderr."""
        self.said.append(message)
        self.notify(WARNING, message, {"targets": [o.model for o in self.outcomes]})

    def cut_results(self, keep: int, why: str) -> None:
        """Keep the first ``keep`` results, and say how many were left out and why, in the run."""
        left_out = len(self.results) - keep
        del self.results[keep:]
        message = f"{left_out} of {keep + left_out} results not listed ({why}): counted in run.properties.cut"
        self.cut.append({"why": why, "listed": keep, "not_listed": left_out})
        self.fitted(message)


def report(outcomes: Sequence[Outcome[Report]], rendering: Rendering = DEFAULT) -> str:
    runs = _runs(outcomes, _command(), rendering.limit)
    status = overall_status(outcomes)
    text = _within_size(runs, status)
    for run in runs:
        for message in run.said:
            hint(f"ggaudit: warning: SARIF run {run.automation_id}: {message}")
    return text


def _command() -> str | None:
    """The command this run is (``scan``, ``check``), when the command line runs it."""
    ctx = click.get_current_context(silent=True)
    return ctx.info_name if ctx is not None else None


def automation_id(command: str | None, target: str) -> str:
    """A target's ``automationDetails.id``: ending in '/', all of it is the category code scanning keeps
    the target's alerts under, one per command and target (made safe for a terminal, since it is shown, but
    with a Windows path's backslashes as they are)."""
    return "/".join(["ggaudit", *([command] if command else []), escape_message(target)]) + "/"


def _runs(outcomes: Sequence[Outcome[Report]], command: str | None, limit: int | None) -> list[_Run]:
    """A run per target (one target named twice: one run); past :data:`MAX_RUNS` targets, the targets from
    the :data:`MAX_RUNS`-th on share the last run, which code scanning takes as one analysis."""
    ids = list(dict.fromkeys(automation_id(command, o.model) for o in outcomes))
    shared = automation_id(command, SHARED) if len(ids) > MAX_RUNS else None
    own = set(ids if shared is None else ids[:MAX_RUNS - 1])
    runs: dict[str, _Run] = {}
    for o in outcomes:
        key = automation_id(command, o.model)
        key = key if key in own or shared is None else shared
        runs.setdefault(key, _Run(automation_id=key, limit=limit)).outcomes.append(o)
    for run in runs.values():
        for o in run.outcomes:
            _add(run, o)
        if run.automation_id == shared:
            run.fitted(f"{len(run.outcomes)} targets share this run: code scanning takes at most {MAX_RUNS} runs "
                       "a file")
        if len(run.results) > MAX_RESULTS:
            run.cut_results(MAX_RESULTS, f"code scanning takes at most {MAX_RESULTS} results a run")
    return list(runs.values())


def _within_size(runs: list[_Run], status: int) -> str:
    """The log's text, the largest run's results halved until it is within :data:`MAX_GZIP_BYTES` once
    compressed (the size is worth computing only when the text itself is larger)."""
    while True:
        text = json.dumps(document(runs, status), indent=2) + "\n"
        encoded = text.encode()
        if len(encoded) <= MAX_GZIP_BYTES or len(gzip.compress(encoded, 6)) <= MAX_GZIP_BYTES:
            return text
        largest = max(runs, key=lambda r: len(r.results))
        if not largest.results:
            return text         # nothing left to cut: the size is the artifacts' and notifications'
        largest.cut_results(len(largest.results) // 2, f"code scanning takes at most {MAX_GZIP_BYTES} "
                                                      "bytes a file, gzip-compressed")


def document(runs: Sequence[_Run], status: int) -> dict[str, Any]:
    return {"$schema": SCHEMA_URI, "version": VERSION, "runs": [run_json(r, status) for r in runs]}


def run_json(run: _Run, status: int) -> dict[str, Any]:
    # No informationUri: the project names no home page to point at (pyproject.toml has no URLs).
    driver = {"name": "ggaudit", "version": __version__, "semanticVersion": __version__,
              "rules": [rule_json(kind(r)) for r in run.rules]}
    invocation = {"executionSuccessful": not any(n["level"] == ERROR for n in run.notifications),
                  "exitCode": status, "toolExecutionNotifications": run.notifications}
    properties: dict[str, Any] = {"status": STATUS_WORDS[overall_status(run.outcomes)], "targets": run.targets}
    if run.cut:
        properties["cut"] = run.cut
    return {"tool": {"driver": driver}, "automationDetails": {"id": run.automation_id},
            "invocations": [invocation], "artifacts": list(run.artifacts.values()), "results": run.results,
            "properties": properties}


def _add(run: _Run, outcome: Outcome[Report]) -> None:
    """A target: its error, or its warnings, the files it read, a result per diagnostic (the first
    ``limit`` when one is given) and what it counted."""
    if outcome.error is not None:
        err = error_to_json(outcome.error)
        run.notify(ERROR, str(outcome.error), {"target": outcome.model, **err})
        run.targets.append({"target": outcome.model, "error": err})
        return
    result = outcome.result
    assert result is not None     # an outcome holds a result or an error
    said = result.summary(run.limit)
    for warning in said.warnings:
        run.notify(WARNING, escape_message(warning), {"target": outcome.model})
    for read in said.files:     # listed before its results
        run.file(read)
    found = list(result.diagnostics())
    listed = found if run.limit is None else found[:run.limit]
    for d in listed:
        run.result(outcome.model, d)
    # Counted, not all listed (--limit): so nothing is lost unsaid.
    run.targets.append({"target": outcome.model, "ok": result.ok, **said.counted})
