"""A report type no reporter knows (issue 34): it implements ggaudit.diagnostic.Report, and every format shows it, its
finding and what it says of itself, with no reporter edit."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from ggaudit.diagnostic import Report
from ggaudit.outcomes import Outcome
from ggaudit.cli.reporters import NAMES, Rendering, reporter
from ggaudit.diagnostic import Artifact, Case, Diagnostic, Failure, Summary
from ggaudit.page import Block, Cell, Heading, Table

WHERE = "padding at file new.gguf offset 8, length 4"


@dataclass(frozen=True, kw_only=True)
class NewReport:
    """A job that finds nonzero padding, reported as every report is."""

    @property
    def ok(self) -> bool:
        return False

    def to_json(self) -> dict[str, Any]:
        return {"schema": "new-report/1", "tool_version": "0", "ok": False}

    def diagnostics(self) -> Iterator[Diagnostic]:
        yield Diagnostic(kind="padding", message=WHERE, file="new.gguf", offset=8, length=4)

    def summary(self, limit: int | None = None) -> Summary:
        return Summary(headline="new new.gguf: 1 finding", lines=("new new.gguf", WHERE),
                       files=(Artifact(path="new.gguf", length=12),), counted={"padding": 1}, seconds=0.5)

    def cases(self) -> Iterator[Case]:
        yield Case(name="padding", failure=Failure.of(list(self.diagnostics())))

    def page(self, limit: int | None = None) -> list[Block]:
        return [Heading(text="Padding"), Table(head=("offset",), rows=((Cell.number(8),),), total=1, what="places")]


def _shown(fmt: str) -> str:
    report: Report = NewReport()
    return reporter(fmt)([Outcome(model="new.gguf", result=report)], Rendering(fmt=fmt))


def test_every_format_shows_a_report_type_it_does_not_know() -> None:
    assert set(NAMES) == {"html", "json", "junit", "sarif", "text"}
    assert _shown("text") == f"new new.gguf\n{WHERE}\n"
    assert json.loads(_shown("json"))["models"] == [NewReport().to_json()]
    run = json.loads(_shown("sarif"))["runs"][0]
    assert [r["ruleId"] for r in run["results"]] == ["padding"]
    assert run["artifacts"] == [{"location": {"uri": "new.gguf"}, "length": 12}]
    assert run["properties"]["targets"] == [{"target": "new.gguf", "ok": False, "padding": 1}]
    junit = _shown("junit")
    assert f'<failure message="{WHERE}" type="padding">' in junit and 'time="0.500"' in junit
    page = _shown("html")
    assert "<h3>Padding</h3>" in page and '<td class="num">8</td>' in page and "new new.gguf: 1 finding" in page
