"""The JUnit XML reporter (the Jenkins/pytest schema), for CI dashboards that count tests and failures.

    <testsuites name="ggaudit" tests failures errors time>
      <testsuite name=TARGET tests failures errors skipped time>    one per target, in the order given
        <testcase classname name time> [<failure message type>lines</failure> | <error> | <skipped>]

What a test case is, per command: for ``scan`` a tensor (failing when it holds findings; its listed
findings are the failure's lines) and each file's structure; for ``verify`` a checked file or subject
(failing with each of its mismatches); for ``rows`` a read path and stage (failing with its mismatches and
short reads) and the table's values (failing when rows hold NaN or Inf); for ``diff`` the metadata and each
tensor (failing when it differs). A target that failed is a suite of one test case holding ``<error>``.
Each suite's ``<system-out>`` is the target's text report, so what is counted but not listed is said too.

Text is the text report's, escaped for a terminal; whatever reaches the XML goes through
:func:`ggaudit.text.escape_message` once more, so no control character (invalid in XML 1.0) gets in.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ...batch import Outcome, Report
from ...format.info import ModelInfo
from ...rows.replay import RowsReport
from ...scan.report import CHECK_NONE, KINDS, ScanReport, TensorScan
from ...text import escape, escape_message, escape_path
from ...verify.diff import DiffReport
from ...verify.run import VerifyReport
from ..common import ManifestWritten
from . import DEFAULT, Rendering
from . import text

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
        return Suite(target, [Case(target, "audit", error=(message, type(outcome.error).__name__))])
    result = outcome.result
    assert result is not None     # an outcome holds a result or an error
    cases = _CASES.get(type(result))
    if cases is None:     # a new report type needs its test cases here
        raise TypeError(f"no JUnit rendering of {type(result).__name__}")
    return Suite(target, list(cases(target, result)), _SECONDS.get(type(result), _no_time)(result),
                 list(text.lines(result, rendering)))


def _no_time(result: Any) -> float:
    return 0.0


# --- scan ------------------------------------------------------------------------------------------

def _scan(target: str, r: ScanReport) -> Iterable[Case]:
    for path in r.files:
        found = [s for s in r.structure if s.path == path]
        failure = None
        if found:
            kinds = ",".join(dict.fromkeys(s.kind for s in found))
            failure = (text.describe_structure(found[0]), kinds, [text.describe_structure(s) for s in found])
        yield Case(target, f"structure of {escape_path(path)}", failure=failure)
    for t in r.tensors:
        yield _tensor_case(target, t, r.max_abs)


def _tensor_case(target: str, t: TensorScan, max_abs: float | None) -> Case:
    case = Case(target, escape(t.name))
    if t.check == CHECK_NONE:
        case.skipped = "not applicable (integer data)"
    elif t.total:
        shown = ", ".join(str(n) for n in t.shape)
        # The text report's lines (its tensor line has no function of its own: it is built as scan_lines does).
        headline = (f"tensor {escape(t.name)} ({t.type} [{shown}]): {text.counts_text(t.counts)}; "
                    f"max finite |x| {text.format_value(t.max_abs, text.tensor_encoding(t))}")
        lines = [text.describe_finding(f, max_abs, ggml_type=t.type) for f in t.findings]
        if t.truncated:
            lines.append(f"... {t.total - len(t.findings)} more not listed (--limit)")
        lines.extend(line.strip() for line in text.expert_lines(t))
        case.failure = (headline, ",".join(k for k in KINDS if t.counts.get(k)), lines)
    return case


# --- verify ----------------------------------------------------------------------------------------

def _verify(target: str, r: VerifyReport) -> Iterable[Case]:
    """A test case per (file, subject) checked or found wrong, in the order first met; every mismatch of
    it is a line of its failure."""
    checked: dict[tuple[str, str], bool] = {}
    sources: dict[tuple[str, str], list[str]] = {}
    for c in r.checked:
        checked[(c.path, c.subject)] = checked.get((c.path, c.subject), True) and c.ok
        source = text.digest_source(c)
        if source is not None:
            sources.setdefault((c.path, c.subject), []).append(source)
    wrong: dict[tuple[str, str], list[Any]] = {}
    for m in r.mismatches:
        wrong.setdefault((m.path, m.subject), []).append(m)
    for key in dict.fromkeys([*checked, *wrong]):
        path, subject = key
        case = Case(escape_path(path), escape_path(subject), out=sources.get(key, []))
        found = wrong.get(key, [])
        if found:
            lines = [line for m in found for line in text.describe_mismatch(m)]
            case.failure = (text.describe_mismatch(found[0])[0], ",".join(dict.fromkeys(m.kind for m in found)), lines)
        elif not checked[key]:
            case.failure = ("digest differs", "digest", [f"digest of {escape_path(subject)} differs"])
        yield case


# --- rows ------------------------------------------------------------------------------------------

def _rows(target: str, r: RowsReport) -> Iterable[Case]:
    """A test case per read path and stage that ran (and the capture), then the table's values."""
    seconds: dict[tuple[str, str], float] = {}
    for s in r.stats:
        seconds[(s.mode, s.stage)] = seconds.get((s.mode, s.stage), 0.0) + s.seconds
    if r.capture is not None:
        seconds.setdefault(("capture", "capture"), 0.0)
    lines: dict[tuple[str, str], list[str]] = {}
    kinds: dict[tuple[str, str], list[str]] = {}
    elements = text.is_elements(r.ggml_type)     # as the text report words them
    for m in r.mismatches:
        lines.setdefault((m.mode, m.stage), []).extend(text.describe_row_mismatch(m, elements=elements))
        kinds.setdefault((m.mode, m.stage), []).append(m.kind)
    for short in r.short_reads:
        lines.setdefault((short.mode, short.stage), []).append(text.describe_short_read(short))
        kinds.setdefault((short.mode, short.stage), []).append("incomplete-read")
    classname = f"{escape_path(r.file)}: {escape(r.tensor)}"
    for key in dict.fromkeys([*seconds, *lines]):
        mode, stage = key
        case = Case(classname, mode if mode == stage else f"{mode} ({stage})", seconds=seconds.get(key, 0.0))
        if key in lines:
            case.failure = (lines[key][0], ",".join(dict.fromkeys(kinds[key])), lines[key])
        yield case
    values = Case(classname, "finite values")
    if r.nonfinite_rows:
        found = text.nonfinite_text(r)
        values.failure = (found, "nonfinite", [found])
    yield values


# --- diff ------------------------------------------------------------------------------------------

def _diff(target: str, r: DiffReport) -> Iterable[Case]:
    classname = f"{escape_path(r.a)} vs {escape_path(r.b)}"
    metadata = Case(classname, "metadata")
    if r.metadata:
        lines = [text.describe_metadata_change(c) for c in r.metadata]
        metadata.failure = (f"{len(r.metadata)} metadata key{'' if len(r.metadata) == 1 else 's'} differ",
                            "metadata", lines)
    yield metadata
    structure = Case(classname, "structure")
    if r.structure_differences:
        lines = [line.strip() for s in r.structure for found in text.describe_structure_diff(s) for line in found]
        n = r.structure_differences
        structure.failure = (f"{n} structure difference{'' if n == 1 else 's'}", "structure", lines)
    yield structure
    for side, names in (("a", r.only_in_a), ("b", r.only_in_b)):
        for name in names:
            line = text.describe_only(side, name)
            yield Case(classname, escape(name), failure=(line, f"only-in-{side}", [line]))
    for c in r.layout_changes:
        line = text.describe_layout_change(c)
        yield Case(classname, escape(c.name), failure=(line, "layout", [line]))
    for d in r.data_diffs:
        lines = text.describe_data_diff(d)
        yield Case(classname, escape(d.name), failure=(lines[0], "data", [line.strip() for line in lines]))
    for name in r.identical:
        yield Case(classname, escape(name))


# --- info and manifest: nothing to find ------------------------------------------------------------

def _info(target: str, r: ModelInfo) -> Iterable[Case]:
    return [Case(target, f"read {escape_path(f.path)}") for f in r.model.files]


def _manifest(target: str, r: ManifestWritten) -> Iterable[Case]:
    return [Case(target, f"manifest written to {escape_path(r.output)}")]


_CASES: dict[type[Any], Callable[[str, Any], Iterable[Case]]] = {
    ScanReport: _scan, VerifyReport: _verify, RowsReport: _rows, DiffReport: _diff, ModelInfo: _info,
    ManifestWritten: _manifest,
}

_SECONDS: dict[type[Any], Callable[[Any], float]] = {
    ScanReport: lambda r: r.stats.seconds, VerifyReport: lambda r: r.stats.seconds,
    DiffReport: lambda r: r.stats.seconds, RowsReport: lambda r: sum(s.seconds for s in r.stats),
}
