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
from ...format.info import ModelInfo
from ...rows.replay import RowsReport
from ...scan.report import ScanReport
from ...text import escape, escape_message
from ...verify.diff import DiffReport
from ...verify.diff_structure import CHANGED, StructureDiff
from ...verify.run import Checked, VerifyReport
from ..common import ManifestWritten
from . import DEFAULT, Rendering
from . import text
from .json import STATUS_WORDS, error_to_json

NAME = "sarif"
VERSION = "2.1.0"
#: The OASIS schema of the SARIF 2.1.0 errata01 (the one tests/data holds).
SCHEMA_URI = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"

ERROR, WARNING, NOTE = "error", "warning", "note"

_REFETCH = ("Get the file again from its source and compare its sha256 with the publisher's; if the source "
            "holds it too, re-convert or re-quantize from the original weights and tell the publisher.")


@dataclass(frozen=True)
class Rule:
    """A kind of finding as SARIF describes it: what it is, what to do about it, and how bad it is."""

    id: str
    short: str
    help: str
    level: str

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "shortDescription": {"text": self.short}, "help": {"text": self.help},
                "defaultConfiguration": {"level": self.level}}


def _rules(*rules: Rule) -> dict[str, Rule]:
    return {r.id: r for r in rules}


#: Every rule, by id. Scan's are the finding kinds themselves ("nan", "+inf", "-inf", "outlier", "anomaly") and the
#: structure kinds; the other commands' are prefixed with the command ("verify/sha256", "diff/data").
RULES = _rules(
    Rule("nan", "A NaN stored in a tensor",
         "A NaN weight or block scale makes everything computed from it NaN. " + _REFETCH, ERROR),
    Rule("+inf", "A +Inf stored in a tensor",
         "An infinite weight or block scale makes everything computed from it Inf or NaN. " + _REFETCH, ERROR),
    Rule("-inf", "A -Inf stored in a tensor",
         "An infinite weight or block scale makes everything computed from it Inf or NaN. " + _REFETCH, ERROR),
    Rule("outlier", "A value or block scale larger than --max-abs",
         "Compare it with the tensor's largest finite |x| and with the original weights: a single huge scale "
         "is usually a damaged or badly quantized block; if such values are expected, raise --max-abs.", WARNING),
    Rule("anomaly", "A block scale far outside what its tensor's other scales predict (--anomalies)",
         "Likely, not certainly, a flipped exponent bit: check the file with `ggaudit verify` against a manifest "
         "made while it was known good, or compare it with another copy (`ggaudit diff`); if either confirms it, "
         + _REFETCH[0].lower() + _REFETCH[1:], WARNING),
    Rule("padding", "Alignment padding that is not zeros",
         "GGUF padding must be zeros: the file was written by a faulty tool or changed afterwards. " + _REFETCH,
         WARNING),
    Rule("gap", "Bytes between tensors that no tensor owns",
         "A writer leaves no gaps beyond the alignment: find out what the bytes are. " + _REFETCH, WARNING),
    Rule("trailing", "Data after the last tensor",
         "Bytes appended to a model load and run unnoticed: find out what they are and where they came from, "
         "and use a copy without them. " + _REFETCH, ERROR),
    Rule("verify/missing", "A file the manifest lists is missing",
         "Download or restore the file, then verify again.", ERROR),
    Rule("verify/not-a-file", "A path the manifest lists is not a regular file",
         "Replace it with the file itself, then verify again.", ERROR),
    Rule("verify/size", "A file's size differs from the expected one",
         "The file is truncated, grew, or is another file: download it again and verify again.", ERROR),
    Rule("verify/sha256", "A file's sha256 differs from the expected one",
         "The file is damaged or is not the one expected: download it again and verify again.", ERROR),
    Rule("verify/git-sha1", "A file's git blob SHA-1 differs from the expected one",
         "The file is damaged or is not the one expected: download it again and verify again.", ERROR),
    Rule("verify/md5", "A file's MD5 differs from the expected one",
         "The file is damaged or is not the one expected: download it again and verify again.", ERROR),
    Rule("verify/link", "A link that is not followed (dangling, a loop, or pointing out of its folder or store)",
         "Replace the link with the file it should name, or remove it.", ERROR),
    Rule("verify/header", "A file that no longer parses as GGUF",
         "Its header is damaged: download it again and verify again.", ERROR),
    Rule("verify/orphan", "A blob no model of the store references",
         "Left over from a removed model or an interrupted pull: remove it once no model needs it.", WARNING),
    Rule("verify/tensor-data", "A tensor's data differs from the manifest's digest",
         "The rows shown changed: download the file again, or compare it with a good copy (ggaudit diff) to "
         "see the bytes.", ERROR),
    Rule("verify/tensor-missing", "A tensor the manifest lists is not in the file",
         "The file is another model, or another version of it: check the manifest belongs to it.", ERROR),
    Rule("verify/file-extra", "A file of the model (a shard, a projector) that the manifest does not list",
         "Nothing says what the file should hold, so it was not checked: make the manifest from the whole "
         "model (every shard, the projector), or check the manifest belongs to this model.", ERROR),
    Rule("verify/tensor-extra", "A tensor in the file that the manifest does not list",
         "The file is another model, or another version of it: check the manifest belongs to it.", ERROR),
    Rule("verify/tensor-layout", "A tensor's type, shape or rows differ from the manifest's",
         "The file is another conversion or quantization: check the manifest belongs to it.", ERROR),
    Rule("verify/model-data", "The digest of all of a file's tensor data differs (llama-gguf-hash)",
         "Some tensor's data changed: verify with a per-tensor manifest to find which, or download again.", ERROR),
    Rule("verify/structure", "Bytes of the file that no tensor owns should not be there",
         "Digests of tensor data cannot see these bytes (padding, gaps, data after the last tensor): find out "
         "what they are. " + _REFETCH, ERROR),
    Rule("rows/short-read", "A read path delivered a row cut short",
         "The read path (or the filesystem under it) returns fewer bytes than asked: do not load the model "
         "through this path until it is fixed.", ERROR),
    Rule("rows/stale", "A read path delivered a row holding a previous read's bytes",
         "A reused buffer was not filled: the read path is faulty, do not load the model through it.", ERROR),
    Rule("rows/misplaced", "A read path delivered another row's bytes",
         "A read came from the wrong offset (alignment arithmetic): the read path is faulty.", ERROR),
    Rule("rows/cache-crosstalk", "A row cache returned another row's bytes",
         "The cache in front of the reads mixes up entries: fix or disable it.", ERROR),
    Rule("rows/garbage", "A read path delivered bytes that are in no row",
         "The read path or the storage under it corrupts data: check the device and the read path.", ERROR),
    Rule("rows/unclassified", "A read path delivered a wrong row (not classified: past the mismatches kept)",
         "See the classified mismatches of the same read path for the kind of fault.", ERROR),
    Rule("rows/incomplete-read", "A read returned fewer bytes than asked, not at the end of the file",
         "The read path treats a short read as complete: it must read again until it has every byte.", ERROR),
    Rule("rows/nonfinite", "Rows of the table hold NaN or Inf in the file itself",
         "Every read path delivers them faithfully: the file is damaged. " + _REFETCH, ERROR),
    Rule("diff/data", "A tensor's data differs between the two models",
         "Expected when one is a fine-tune or another quantization; otherwise the one that changed is damaged: "
         "scan both, and verify each against its source.", WARNING),
    Rule("diff/layout", "A tensor's type or shape differs between the two models",
         "The two models are different conversions or quantizations: compare like with like.", WARNING),
    Rule("diff/only-in-a", "A tensor only in model A",
         "The models differ in architecture or conversion, or B lost a tensor: check B's source.", WARNING),
    Rule("diff/only-in-b", "A tensor only in model B",
         "The models differ in architecture or conversion, or B gained a tensor: check B's source.", WARNING),
    Rule("diff/metadata", "A metadata key differs between the two models",
         "Check the key matters (the tokenizer, rope and context settings do): a wrong value changes the "
         "model's output without any damaged weight.", WARNING),
    Rule("diff/structure", "Bytes no tensor owns (padding, gaps, data after the last tensor), or the file's "
         "alignment, data offset or size, differ between the two files",
         "Tensor and metadata comparisons cannot see these bytes: find out what they are (`ggaudit scan` "
         "flags them in each file) and use the copy without them. " + _REFETCH, ERROR),
)


def rule(rule_id: str) -> Rule:
    """The rule of that id; a kind no rule describes yet (a new mismatch kind) still gets one."""
    known = RULES.get(rule_id)
    if known is not None:
        return known
    return Rule(rule_id, f"{rule_id.replace('/', ': ')} finding",
                "See the message for where and what; ggaudit's README says what the kind means.", ERROR)


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

    def digest_source(self, c: Checked) -> None:
        """Say on the artifact of a file whose digest the cache gave that it was not read again: in words
        and as properties (``digestSource`` ``cache``, ``digestCachedAt``). A file read says nothing more."""
        source = text.digest_source(c)
        if source is not None:
            entry = self.artifacts[c.path]
            entry["properties"] = {"digestSource": c.source, "digestCachedAt": c.cached_at}
            entry["description"] = {"text": source}

    def location(self, path: str, offset: int | None = None, length: int | None = None, *,
                 tensor: str | None = None) -> dict[str, Any]:
        physical: dict[str, Any] = {"artifactLocation": self.artifact(path)}
        if offset is not None and length is not None:
            physical["region"] = {"byteOffset": offset, "byteLength": length}
        where: dict[str, Any] = {"physicalLocation": physical}
        if tensor is not None:
            # Shown by viewers: escaped like any name on a terminal; properties hold it exact.
            where["logicalLocations"] = [{"name": escape(tensor), "kind": "member"}]
        return where

    def result(self, rule_id: str, message: str | list[str], locations: list[dict[str, Any]],
               properties: dict[str, Any], related: list[dict[str, Any]] | None = None) -> None:
        r = rule(rule_id)
        index = self.rules.setdefault(r.id, len(self.rules))
        doc: dict[str, Any] = {
            "ruleId": r.id, "ruleIndex": index, "level": r.level,
            "message": {"text": message if isinstance(message, str) else "\n".join(message)},
            "locations": locations, "properties": properties}
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
              "rules": [rule(r).to_json() for r in log.rules]}
    invocation = {"executionSuccessful": not any(n["level"] == ERROR for n in log.notifications),
                  "exitCode": status, "toolExecutionNotifications": log.notifications}
    run = {"tool": {"driver": driver}, "invocations": [invocation], "artifacts": list(log.artifacts.values()),
           "results": log.results,
           "properties": {"status": STATUS_WORDS[status], "targets": log.targets}}
    return {"$schema": SCHEMA_URI, "version": VERSION, "runs": [run]}


def _add(log: _Log, outcome: Outcome[Report]) -> None:
    if outcome.error is not None:
        err = error_to_json(outcome.error)
        log.notify(ERROR, str(outcome.error), {"target": outcome.model, **err})
        log.targets.append({"target": outcome.model, "error": err})
        return
    result = outcome.result
    assert result is not None     # an outcome holds a result or an error
    for warning in getattr(result, "warnings", ()):
        log.notify(WARNING, escape_message(warning), {"target": outcome.model})
    add = _ADDERS.get(type(result))
    if add is None:     # a new report type needs its results here
        raise TypeError(f"no SARIF rendering of {type(result).__name__}")
    summary = add(log, outcome.model, result)
    log.targets.append({"target": outcome.model, "ok": result.ok, **summary})


# --- scan ------------------------------------------------------------------------------------------

def _scan(log: _Log, target: str, r: ScanReport) -> dict[str, Any]:
    for path in r.files:
        log.artifact(path)
    for d in r.digests:
        log.artifact(d.path, d.size)
    for s in r.structure:
        log.result(s.kind, text.describe_structure(s), [log.location(s.path, s.offset, s.length)],
                   {"target": target, **s.to_json()})
    for t in r.tensors:
        for f in t.findings:
            log.result(f.kind, text.describe_finding(f, r.max_abs, ggml_type=t.type),
                       [log.location(f.path, f.offset, f.size, tensor=f.tensor)],
                       {"target": target, "tensor": f.tensor, "file": f.path, **f.to_json()})
    # Counted, not all listed (--limit): what every tensor with findings holds, listed or not.
    tensors = [{"name": t.name, "counts": dict(t.counts), "listed": len(t.findings),
                "not_listed": t.total - len(t.findings)} for t in r.tensors if t.total]
    return {"complete": r.complete, "counts": r.counts, "structure": len(r.structure), "tensors": tensors,
            "not_listed": sum(t["not_listed"] for t in tensors)}


# --- verify ----------------------------------------------------------------------------------------

def _verify(log: _Log, target: str, r: VerifyReport) -> dict[str, Any]:
    for c in r.checked:
        if c.algorithm != "gguf-layout" and c.subject != "all tensor data":   # those sizes are not the file's
            log.artifact(c.path, c.size)
        else:
            log.artifact(c.path)
        log.digest_source(c)
    listed = r.mismatches if log.limit is None else r.mismatches[:log.limit]
    for m in listed:
        log.result(f"verify/{m.kind}", text.describe_mismatch(m),
                   [log.location(m.path, m.offset, m.length, tensor=m.tensor)], {"target": target, **m.to_json()})
    return {"kind": r.kind, "stopped_early": r.stopped_early, "mismatches": len(r.mismatches),
            "listed": len(listed), "not_listed": len(r.mismatches) - len(listed)}


# --- rows ------------------------------------------------------------------------------------------

def _rows(log: _Log, target: str, r: RowsReport) -> dict[str, Any]:
    log.artifact(r.file)
    # As the text report words them (private there: text.py offers no public way to ask yet).
    elements = text.is_elements(r.ggml_type)
    for m in r.mismatches:
        log.result(f"rows/{m.kind}", text.describe_row_mismatch(m, elements=elements),
                   [log.location(m.file, m.row_offset, m.length, tensor=m.tensor)], {"target": target, **m.to_json()})
    for s in r.short_reads:
        log.result("rows/incomplete-read", text.describe_short_read(s), [log.location(s.file, s.offset, s.requested)],
                   {"target": target, "tensor": r.tensor, **s.to_json()})
    if r.nonfinite_rows:
        first = r.first_nonfinite
        where = log.location(r.file, None if first is None else r.table_offset + first.row * r.row_bytes,
                             r.row_bytes, tensor=r.tensor)
        log.result("rows/nonfinite", text.nonfinite_text(r), [where],
                   {"target": target, "tensor": r.tensor, "file": r.file, "nonfinite_rows": r.nonfinite_rows,
                    "first": None if first is None else first.to_json()})
    return {"tensor": r.tensor, "mismatches": r.mismatch_count, "listed": len(r.mismatches),
            "not_listed": r.mismatch_count - len(r.mismatches), "short_reads": r.short_read_count,
            "short_reads_listed": len(r.short_reads), "nonfinite_rows": r.nonfinite_rows}


# --- diff ------------------------------------------------------------------------------------------

def _diff(log: _Log, target: str, r: DiffReport) -> dict[str, Any]:
    for c in r.metadata:
        side = r.a if c.what == "only-in-a" else r.b
        log.result("diff/metadata", text.describe_metadata_change(c), [log.location(side)],
                   {"target": target, "a": r.a, "b": r.b, **c.to_json()})
    for name in r.only_in_a:
        log.result("diff/only-in-a", text.describe_only("a", name), [log.location(r.a, tensor=name)],
                   {"target": target, "tensor": name, "a": r.a, "b": r.b})
    for name in r.only_in_b:
        log.result("diff/only-in-b", text.describe_only("b", name), [log.location(r.b, tensor=name)],
                   {"target": target, "tensor": name, "a": r.a, "b": r.b})
    for lc in r.layout_changes:
        log.result("diff/layout", text.describe_layout_change(lc), [log.location(r.b, tensor=lc.name)],
                   {"target": target, "tensor": lc.name, "a": r.a, "b": r.b, **lc.to_json()})
    for d in r.data_diffs:
        f = d.first
        b_side = log.location(d.path_b, f.offset_b, f.block_bytes, tensor=d.name)
        a_side = {"id": 0, "message": {"text": "the same block in a (expected)"},
                  **log.location(d.path_a, f.offset_a, f.block_bytes, tensor=d.name)}
        log.result("diff/data", text.describe_data_diff(d), [b_side],
                   {"target": target, "tensor": d.name, **d.to_json()}, related=[a_side])
    for s in r.structure:
        _diff_structure(log, target, s)
    return {"identical": len(r.identical), "differ": len(r.data_diffs), "layout_changes": len(r.layout_changes),
            "only_in_a": len(r.only_in_a), "only_in_b": len(r.only_in_b), "metadata": len(r.metadata),
            "structure": r.structure_differences, "stopped_early": r.stopped_early}


def _diff_structure(log: _Log, target: str, s: StructureDiff) -> None:
    """A result per structure difference: at B's bytes (A's the related location), or at the one file
    that has them."""
    facts = text.describe_structure_facts(s)
    if facts:
        log.result("diff/structure", facts, [log.location(str(s.path_b if s.path_b is not None else s.path_a))],
                   {"target": target, **{k: v for k, v in s.to_json().items() if k != "changes"}})
    for c in s.changes:
        in_b = c.offset_b is not None
        path, offset, length = (s.path_b, c.offset_b, c.length_b) if in_b else (s.path_a, c.offset_a, c.length_a)
        related = None
        if c.what == CHANGED:
            related = [{"id": 0, "message": {"text": "the same place in a (expected)"},
                        **log.location(str(s.path_a), c.offset_a, c.length_a)}]
        log.result("diff/structure", text.describe_region_change(s, c), [log.location(str(path), offset, length)],
                   {"target": target, "path_a": s.path_a, "path_b": s.path_b, **c.to_json()}, related=related)


# The text report's lines for these two; text.py has no function of its own for them (yet).

# --- info and manifest: nothing to find, the files they read ------------------------------------------

def _info(log: _Log, target: str, r: ModelInfo) -> dict[str, Any]:
    for f in r.model.files:
        log.artifact(f.path, f.size)
    return {}


def _manifest(log: _Log, target: str, r: ManifestWritten) -> dict[str, Any]:
    return {"output": r.output}


_ADDERS: dict[type[Any], Callable[[_Log, str, Any], dict[str, Any]]] = {
    ScanReport: _scan, VerifyReport: _verify, RowsReport: _rows, DiffReport: _diff, ModelInfo: _info,
    ManifestWritten: _manifest,
}
