"""The text reporter: each report as lines for a terminal (fio style: where, then expected before actual).

The lines are each report's own (``report.summary().lines``): every job words its report where its data is,
so this reporter names no report type. Every name, path and value read from a file is escaped there
(ggaudit.escaping); offsets are decimal, raw bits hex, floats the shortest text that reads back as the stored
value. A target that failed prints nothing here: its one-line error goes to stderr (see ``emit_outcomes``).
With several targets the report ends with one line counting them; ``-q`` shows each report as its one-line
summary (:func:`summary_line`).
"""

from __future__ import annotations

from collections.abc import Sequence

from ...diagnostic import Report
from ...outcomes import Outcome
from ...wording import plural
from . import DEFAULT, Rendering

NAME = "text"


def report(outcomes: Sequence[Outcome[Report]], rendering: Rendering = DEFAULT) -> str:
    """Each report in turn, in the order the targets were given (with ``quiet``, each as its one-line
    summary); then, with several targets, how many had findings, were clean or failed."""
    shown: list[str] = []
    for o in outcomes:
        if o.result is not None:
            said = o.result.summary(rendering.limit)
            shown.extend(said.quiet_lines if rendering.quiet else said.lines)
    if len(outcomes) > 1:
        shown.append(run_summary(outcomes))
    return "".join(line + "\n" for line in shown)


def run_summary(outcomes: Sequence[Outcome[Report]]) -> str:
    """The last line of a run of several targets: ``3 models: 1 with findings, 1 clean, 1 error``; a store
    searched as a whole (``verify ollama:*``: its orphan blobs) is counted apart from its models
    (``1 model and 1 store: ...``)."""
    errors = sum(1 for o in outcomes if o.error is not None)
    findings = sum(1 for o in outcomes if o.result is not None and not o.result.ok)
    clean = len(outcomes) - errors - findings
    stores = sum(1 for o in outcomes if o.result is not None and o.result.summary().noun == "store")
    counted = plural(len(outcomes) - stores, "model") + (f" and {plural(stores, 'store')}" if stores else "")
    return f"{counted}: {findings} with findings, {clean} clean, {plural(errors, 'error')}"


def summary_line(result: Report) -> str:
    """One line saying what a report found: ``model a.gguf: 2 findings (nan 1, +inf 1)``, ``... clean``."""
    return result.summary().headline
