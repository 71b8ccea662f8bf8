"""The JSON reporter: one document for the whole run, whatever the command and however many targets.

    {"schema": "ggaudit/cli-output/1", "status": "clean" | "findings" | "error", "models": [...]}

Each element of ``models`` is a report's ``to_json()`` (which names its own ``schema``), or for a target
that failed ``{"target": ..., "error": {...}}``. ggaudit/schema/cli-output.schema.json describes it all;
docs/json.md says what each key means.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from ...diagnostic import Report
from ...outcomes import STATUS_CLEAN, STATUS_ERROR, STATUS_FINDINGS, Outcome, overall_status
from ...errors import FormatError, GGAuditError, ManifestError, NothingChecked, ReadError, UsageError
from . import DEFAULT, Rendering

NAME = "json"
SCHEMA = "ggaudit/cli-output/1"
#: ``status`` for each overall status (the exit status, 0, 1 or 2).
STATUS_WORDS = {STATUS_CLEAN: "clean", STATUS_FINDINGS: "findings", STATUS_ERROR: "error"}


def report(outcomes: Sequence[Outcome[Report]], rendering: Rendering = DEFAULT) -> str:
    doc = {"schema": SCHEMA, "status": STATUS_WORDS[overall_status(outcomes)],
           "models": [element(o) for o in outcomes]}
    return json.dumps(doc, indent=2) + "\n"


def element(outcome: Outcome[Report]) -> dict[str, Any]:
    if outcome.error is not None:
        return {"target": outcome.model, "error": error_to_json(outcome.error)}
    assert outcome.result is not None     # an outcome holds a result or an error
    return outcome.result.to_json()


#: The error classes JSON names (the schema's ``kind`` enum). Every error ggaudit raises is one of them or a
#: subclass kept inside ggaudit (a read path's ``FailedRead`` and ``DirectIOUnavailable`` are ReadErrors).
PUBLIC_ERRORS: tuple[type[GGAuditError], ...] = (FormatError, ManifestError, ReadError, UsageError, NothingChecked)


def public_kind(err: GGAuditError) -> str:
    """The name of the nearest public class of ``err`` (its first in :data:`PUBLIC_ERRORS` up its MRO): a
    ``FailedRead`` is a "ReadError", a ``NothingChecked`` stays "NothingChecked"."""
    return next((c.__name__ for c in type(err).__mro__ if c in PUBLIC_ERRORS), type(err).__name__)


def error_to_json(err: GGAuditError) -> dict[str, Any]:
    """An error as JSON: its one-line text, its parts exact, and its public kind."""
    return {"message": str(err), "path": err.path, "offset": err.offset, "field": err.field,
            "kind": public_kind(err)}
