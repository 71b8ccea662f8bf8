"""The JUnit XML reporter (the Jenkins/pytest schema), for CI dashboards that count tests and failures.

    <testsuites name="ggaudit" tests failures errors time>
      <testsuite name=TARGET tests failures errors skipped time>    one per target, in the order given
        <testcase classname name time> [<failure message type>lines</failure> | <error> | <skipped>]

What a test case is, per command: for ``scan`` each file's structure and each tensor group (a layer's
tensors, ``blk.N``, then the others: a model of 1,500 tensors is some 40 cases), failing when a tensor of
it holds findings, with each failing tensor's line and its listed findings as the failure's lines; for
``verify`` a checked file or subject (failing with each of its mismatches); for ``rows`` a read path and
stage (failing with its mismatches and short reads) and the table's values (failing when rows hold NaN or
Inf); for ``diff`` the metadata and each tensor (failing when it differs). A target that failed is a suite
of one test case holding ``<error>``. Each suite's ``<system-out>`` is the target's text report, so what is
counted but not listed is said too.

Text is the text report's, escaped for a terminal; whatever reaches the XML goes through
:func:`ggaudit.text.escape_message` once more, so no control character (invalid in XML 1.0) gets in.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ...batch import Outcome, Report
from ...diagnostic import Diagnostic
from ...format.info import ModelInfo
from ...kinds import fails_by_default
from ...lines import plural
from ...scan.report import CHECK_NONE, KINDS, ScanReport, TensorScan, describe_tensor
from ...text import escape, escape_message, escape_path
from . import DEFAULT, Rendering
from . import text
from .json import public_kind

if TYPE_CHECKING:   # found by its type's name: `ggaudit scan` loads nothing of verify
    from ...verify.manifests.report import ManifestWritten

NAME = "junit"


def xml_text(line: str) -> str:
    """A line made safe for XML 1.0: control (and invisible, bidi) characters escaped as the terminal
    sees them; text already escaped is unchanged (escape_message is idempotent)."""
    return escape_message(line)


@dataclass
class Case:
    """One test case: passed, or failed (``failure``: its message and lines), erred, or skipped."""

    classname: str
    name: str
    seconds: float = 0.0
    failure: tuple[str, str, list[str]] | None = None     # message, type, lines
    error: tuple[str, str] | None = None                  # message, type
    skipped: str | None = None
    out: list[str] = field(default_factory=list)      # said of the case, passed or not

    def element(self) -> ET.Element:
        case = ET.Element("testcase", classname=xml_text(self.classname), name=xml_text(self.name),
                          time=_seconds(self.seconds))
        if self.failure is not None:
            message, kind, lines = self.failure
            failed = ET.SubElement(case, "failure", message=xml_text(message), type=xml_text(kind))
            failed.text = "\n".join(xml_text(line) for line in lines)
        if self.error is not None:
            message, kind = self.error
            erred = ET.SubElement(case, "error", message=xml_text(message), type=xml_text(kind))
            erred.text = xml_text(message)
        if self.skipped is not None:
            ET.SubElement(case, "skipped", message=xml_text(self.skipped))
        if self.out:
            ET.SubElement(case, "system-out").text = "\n".join(xml_text(line) for line in self.out) + "\n"
        return case


@dataclass
class Suite:
    name: str
    cases: list[Case] = field(default_factory=list)
    seconds: float = 0.0
    out: list[str] = field(default_factory=list)     # the target's text report

    def count(self, what: str) -> int:
        return sum(1 for c in self.cases if getattr(c, what) is not None)

    def element(self) -> ET.Element:
        suite = ET.Element("testsuite", name=xml_text(self.name), tests=str(len(self.cases)),
                           failures=str(self.count("failure")), errors=str(self.count("error")),
                           skipped=str(self.count("skipped")), time=_seconds(self.seconds))
        suite.extend(c.element() for c in self.cases)
        if self.out:
            ET.SubElement(suite, "system-out").text = "\n".join(xml_text(line) for line in self.out) + "\n"
        return suite


def _seconds(seconds: float) -> str:
    return f"{seconds:.3f}"


def report(outcomes: Sequence[Outcome[Report]], rendering: Rendering = DEFAULT) -> str:
    suites = [suite(o, rendering) for o in outcomes]
    root = ET.Element("testsuites", name="ggaudit", tests=str(sum(len(s.cases) for s in suites)),
                      failures=str(sum(s.count("failure") for s in suites)),
                      errors=str(sum(s.count("error") for s in suites)),
                      time=_seconds(sum(s.seconds for s in suites)))
    root.extend(s.element() for s in suites)
    ET.indent(root)
    # ASCII, other characters as references: right whatever encoding stdout or the file is written in.
    written: bytes = ET.tostring(root, encoding="us-ascii", xml_declaration=True)
    return written.decode("ascii") + "\n"


def suite(outcome: Outcome[Report], rendering: Rendering = DEFAULT) -> Suite:
    """The target's suite. Every mismatch is a failure's line whatever ``rendering.limit`` says (CI counts
    them); the limit applies to the text report in ``<system-out>``."""
    target = escape_path(outcome.model)
    if outcome.error is not None:
        message = str(outcome.error)
        return Suite(target, [Case(target, "audit", error=(message, public_kind(outcome.error)))])
    result = outcome.result
    assert result is not None     # an outcome holds a result or an error
    cases = _CASES.get(type(result).__name__)
    if cases is None:     # a new report type needs its test cases here
        raise TypeError(f"no JUnit rendering of {type(result).__name__}")
    return Suite(target, list(cases(target, result)), _SECONDS.get(type(result).__name__, _no_time)(result),
                 list(text.lines(result, rendering)))


def _no_time(result: Any) -> float:
    return 0.0


def _kind(d: Diagnostic) -> str:
    """A failure's type: the kind without its job's prefix (``sha256``, ``misplaced``, ``data``)."""
    return d.kind.rpartition("/")[2]


def _failure(found: Sequence[Diagnostic], lines: list[str] | None = None) -> tuple[str, str, list[str]]:
    """A failure of these diagnostics: the first one's first line, their kinds, and every line."""
    kinds = ",".join(dict.fromkeys(_kind(d) for d in found))
    return found[0].lines[0], kinds, lines if lines is not None else [line for d in found for line in d.lines]


# --- scan ------------------------------------------------------------------------------------------

def _scan(target: str, r: ScanReport) -> Iterable[Case]:
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
        yield Case(target, f"structure of {escape_path(path)}", failure=_failure(found) if found else None,
                   out=advice.get(path, []))
    groups: dict[str, list[TensorScan]] = {}
    for t in r.tensors:
        groups.setdefault(tensor_group(t.name), []).append(t)
    for name, tensors in groups.items():
        yield _group_case(target, name, tensors, by_place)


#: A layer's tensors (``blk.12.attn_q.weight``, ``v.blk.3.ffn_up.weight``): the group is the layer's prefix.
_LAYER = re.compile(r"((?:[A-Za-z_]+\.)*blk\.\d+)\.")
#: The group of every tensor outside a numbered layer (token_embd, output_norm, ...).
OTHER_TENSORS = "other tensors"


def tensor_group(name: str) -> str:
    """The JUnit case a tensor is counted in: its layer (``blk.12``), else :data:`OTHER_TENSORS`."""
    layer = _LAYER.match(name)
    return f"tensors {layer.group(1)}.*" if layer is not None else OTHER_TENSORS


def _group_case(target: str, name: str, tensors: list[TensorScan],
                by_place: dict[tuple[str, str | None], list[Diagnostic]]) -> Case:
    case = Case(target, escape(name))
    if all(t.check == CHECK_NONE for t in tensors):
        case.skipped = "not applicable (integer data)"
        return case
    failing = [t for t in tensors if t.check != CHECK_NONE and t.total]
    if failing:
        lines = [line for t in failing for line in _tensor_lines(t, by_place.get(("tensor", t.name), []))]
        headline = describe_tensor(failing[0]) if len(failing) == 1 else \
            f"{len(failing)} of {plural(len(tensors), 'tensor')} hold findings; first: {describe_tensor(failing[0])}"
        kinds = ",".join(k for k in KINDS if any(t.counts.get(k) for t in failing))
        case.failure = (headline, kinds, lines if len(failing) > 1 else lines[1:])
    return case


def _tensor_lines(t: TensorScan, found: list[Diagnostic]) -> list[str]:
    """A failing tensor's detail, as the text report words it: its line, then its findings' lines."""
    lines = [describe_tensor(t), *(d.message for d in found)]
    if t.truncated:
        lines.append(f"... {t.total - len(t.findings)} more not listed (--limit)")
    lines.extend(line.strip() for line in text.expert_lines(t))
    return lines


# --- verify ----------------------------------------------------------------------------------------

def _verify(target: str, r: Any) -> Iterable[Case]:
    """A test case per (file, subject) checked or found wrong, in the order first met; every mismatch of
    it is a line of its failure."""
    checked: dict[tuple[str, str], bool] = {}
    sources: dict[tuple[str, str], list[str]] = {}
    for c in r.checked:
        checked[(c.path, c.subject)] = checked.get((c.path, c.subject), True) and c.ok
        source = text.digest_source(c)
        if source is not None:
            sources.setdefault((c.path, c.subject), []).append(source)
    wrong: dict[tuple[str, str], list[Diagnostic]] = {}
    for d in r.diagnostics():
        wrong.setdefault((str(d.file), d.extras["subject"]), []).append(d)
    for key in dict.fromkeys([*checked, *wrong]):
        path, subject = key
        case = Case(escape_path(path), escape_path(subject), out=sources.get(key, []))
        found = wrong.get(key, [])
        if found:
            case.failure = _failure(found)
        elif not checked[key]:
            case.failure = ("digest differs", "digest", [f"digest of {escape_path(subject)} differs"])
        yield case


# --- rows ------------------------------------------------------------------------------------------

def _rows(target: str, r: Any) -> Iterable[Case]:
    """A test case per read path and stage that ran (and the capture), then the table's values."""
    seconds: dict[tuple[str, str], float] = {}
    for s in r.stats:
        seconds[(s.mode, s.stage)] = seconds.get((s.mode, s.stage), 0.0) + s.seconds
    if r.capture is not None:
        seconds.setdefault(("capture", "capture"), 0.0)
    by_path: dict[tuple[str, str], list[Diagnostic]] = {}
    nonfinite: list[Diagnostic] = []
    for d in r.diagnostics():      # mismatches and short reads name their read path and stage
        if d.kind == "rows/nonfinite":
            nonfinite.append(d)
        else:
            by_path.setdefault((d.extras["mode"], d.extras["stage"]), []).append(d)
    classname = f"{escape_path(r.file)}: {escape(r.tensor)}"
    for key in dict.fromkeys([*seconds, *by_path]):
        mode, stage = key
        case = Case(classname, mode if mode == stage else f"{mode} ({stage})", seconds=seconds.get(key, 0.0))
        if key in by_path:
            case.failure = _failure(by_path[key])
        yield case
    yield Case(classname, "finite values", failure=_failure(nonfinite) if nonfinite else None)


# --- diff ------------------------------------------------------------------------------------------

def _diff(target: str, r: Any) -> Iterable[Case]:
    """The metadata and the structure (a case each), then a case per tensor: failing with its
    diagnostic, or passing (identical)."""
    classname = f"{escape_path(r.a)} vs {escape_path(r.b)}"
    by_kind: dict[str, list[Diagnostic]] = {}
    for d in r.diagnostics():
        by_kind.setdefault(_kind(d), []).append(d)
    metadata, structure = by_kind.pop("metadata", []), by_kind.pop("structure", [])
    yield Case(classname, "metadata", failure=(
        f"{plural(len(metadata), 'metadata key')} differ", "metadata",
        [d.message for d in metadata]) if metadata else None)
    n = r.structure_differences
    yield Case(classname, "structure", failure=(
        f"{plural(n, 'structure difference')}", "structure",
        [line.strip() for d in structure for line in d.lines]) if structure else None)
    for kind in ("only-in-a", "only-in-b", "layout", "data"):
        for d in by_kind.get(kind, []):
            yield Case(classname, escape(str(d.tensor)), failure=_failure([d], [line.strip() for line in d.lines]))
    for name in r.identical:
        yield Case(classname, escape(name))


# --- info and manifest: nothing to find ------------------------------------------------------------

def _info(target: str, r: ModelInfo) -> Iterable[Case]:
    return [Case(target, f"read {escape_path(f.path)}") for f in r.model.files]


def _manifest(target: str, r: ManifestWritten) -> Iterable[Case]:
    return [Case(target, f"manifest written to {escape_path(r.output)}")]


def _check(target: str, r: Any) -> Iterable[Case]:
    """A case per file and read path (failing when that path's bytes are wrong), then the verdict's case
    (failing, with every finding's line, when something is wrong)."""
    for f in r.files:
        for p in f.reads:
            wrong = p.stats.mode in f.decision.wrong
            yield Case(escape_path(f.path), p.stats.mode, failure=(
                f"{p.stats.mode} reads deliver other bytes", "check/read-path-differs", []) if wrong else None)
    lines = [d.message for d in r.diagnostics() if d.severity != "note"]
    yield Case(target, "verdict", failure=(r.verdict, r.verdict, lines) if not r.ok else None)


#: By the report type's name: naming a type imports nothing of its job.
_CASES: dict[str, Callable[[str, Any], Iterable[Case]]] = {
    "ScanReport": _scan, "VerifyReport": _verify, "RowsReport": _rows, "DiffReport": _diff, "ModelInfo": _info,
    "ManifestWritten": _manifest, "CheckReport": _check,
}

_SECONDS: dict[str, Callable[[Any], float]] = {
    "CheckReport": lambda r: r.seconds,
    "ScanReport": lambda r: r.stats.seconds, "VerifyReport": lambda r: r.stats.seconds,
    "DiffReport": lambda r: r.stats.seconds, "RowsReport": lambda r: sum(s.seconds for s in r.stats),
}
