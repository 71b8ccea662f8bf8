"""Write the ``$defs`` of ggaudit's JSON Schema that the report records describe (:mod:`ggaudit.json_shape`)
into the shipped schema, ``ggaudit/schema/cli-output.schema.json``.

Run ``python scripts/derive_schema.py`` after changing such a record; ``--check`` says whether the shipped
schema is what the records give (tests/test_json_schema.py runs it) without writing. The rest of the schema
(the document around the reports, the records that still write their JSON by hand) stays as written.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ggaudit.json_shape import schema_defs
from ggaudit.rows.classify import RowMismatch
from ggaudit.rows.finite import NonFiniteValue
from ggaudit.rows.select import RowChoice
from ggaudit.scan.report import ScanReport
from ggaudit.verify.diff import DiffReport
from ggaudit.verify.report import VerifyReport

SCHEMA_FILE = Path(__file__).resolve().parent.parent / "ggaudit" / "schema" / "cli-output.schema.json"
#: The reports whose records give their part of the schema (with every record they hold).
ROOTS = (ScanReport, VerifyReport, DiffReport, RowMismatch, NonFiniteValue, RowChoice)


def derived(shipped: dict[str, Any]) -> dict[str, Any]:
    """``shipped`` with each described record's ``$defs`` entry as the record gives it, in place."""
    defs = dict(shipped["$defs"])
    defs.update(schema_defs(ROOTS))
    return {**shipped, "$defs": defs}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="only say whether the shipped schema is derived")
    shipped = json.loads(SCHEMA_FILE.read_text("utf-8"))
    want = derived(shipped)
    if parser.parse_args(argv).check:
        stale = sorted(name for name, schema in want["$defs"].items() if shipped["$defs"].get(name) != schema)
        print("the shipped schema is derived" if not stale else f"stale in the shipped schema: {', '.join(stale)}")
        return 1 if stale else 0
    SCHEMA_FILE.write_text(json.dumps(want, indent=2, ensure_ascii=False) + "\n", "utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
