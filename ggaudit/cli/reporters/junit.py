"""The JUnit XML reporter (the Jenkins/pytest schema), for CI dashboards that count tests and failures.

    <testsuites name="ggaudit" tests failures errors time>
      <testsuite name=TARGET tests failures errors skipped time>    one per target, in the order given
        <testcase classname name time> [<failure message type>lines</failure> | <error> | <skipped>]

What a test case is, each report says (``report.cases()``): for ``scan`` each file's structure and each
tensor group (a layer's tensors, ``blk.N``, then the others: a model of 1,500 tensors is some 40 cases),
failing when a tensor of it holds findings, with each failing tensor's line and its listed findings as the
failure's lines; for ``verify`` a checked file or subject (failing with each of its mismatches); for
``rows`` a read path and stage (failing with its mismatches and short reads) and the table's values (failing
when rows hold NaN or Inf); for ``diff`` the metadata and each tensor (failing when it differs). A target
that failed is a suite of one test case holding ``<error>``. Each suite's ``<system-out>`` is the target's
text report, so what is counted but not listed is said too.

Text is the text report's, escaped for a terminal; whatever reaches the XML goes through
:func:`ggaudit.escaping.escape_message` once more, so no control character (invalid in XML 1.0) gets in.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import dataclass, field

from ...diagnostic import Report
from ...outcomes import Outcome
from ...diagnostic import Case as Checked
from ...escaping import escape_message, escape_path
from . import DEFAULT, Rendering
from .json import public_kind

NAME = "junit"


def xml_text(line: str) -> str:
    """A line made safe for XML 1.0: control (and invisible, bidi) characters escaped as the terminal
    sees them; text already escaped is unchanged (escape_message is idempotent)."""
    return escape_message(line)


@dataclass
class XmlCase:
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
    cases: list[XmlCase] = field(default_factory=list)
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
    """The target's suite: a case per thing its report checked (``report.cases()``). Every mismatch is a
    failure's line whatever ``rendering.limit`` says (CI counts them); the limit applies to the text report in
    ``<system-out>``."""
    target = escape_path(outcome.model)
    if outcome.error is not None:
        message = str(outcome.error)
        return Suite(target, [XmlCase(target, "audit", error=(message, public_kind(outcome.error)))])
    result = outcome.result
    assert result is not None     # an outcome holds a result or an error
    said = result.summary(rendering.limit)
    return Suite(target, [_case(target, c) for c in result.cases()], said.seconds, list(said.lines))


def _case(target: str, checked: Checked) -> XmlCase:
    failed = checked.failure
    return XmlCase(target if checked.group is None else checked.group, checked.name, checked.seconds,
                failure=None if failed is None else (failed.message, failed.kinds, list(failed.lines)),
                skipped=checked.skipped, out=list(checked.out))
