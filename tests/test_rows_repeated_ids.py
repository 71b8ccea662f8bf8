"""Row IDs given more than once (issue 36, item 5): ``check_rows`` replays each row once, and said nothing of the
IDs it dropped (11 IDs given, ``rows_checked`` 10). The report says how many IDs were given, how many distinct rows
they are and which repeated (the first 20, all counted): in the library's result, the text and the JSON. A report
where no ID repeats says nothing new, byte for byte."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from jsonschema import Draft202012Validator

import ggaudit
from ggaudit.format.layout import open_model
from ggaudit.rows.select import GivenIds

from support import run_cli
from test_json_schema import SCHEMA

PLE = str(Path(__file__).resolve().parent.parent / "fixtures" / "ple_q8_0.gguf")
ELEVEN = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 3]


def _rows_line(output: str) -> list[str]:
    """The lines from ``rows:`` up to the first read path's."""
    lines = output.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("rows: "))
    end = next(i for i, line in enumerate(lines) if line.startswith("buffered ("))
    return lines[start:end]


def test_a_repeated_id_is_said_in_the_library_result() -> None:
    report = ggaudit.check_rows(PLE, ELEVEN, modes=("buffered",))
    assert report.ok and report.rows_checked == 10
    assert report.given_ids == GivenIds(count=11, distinct=10, repeated_count=1, repeated=(3,))
    assert report.repeated


def test_a_repeated_id_is_said_in_the_text_and_the_json() -> None:
    text = run_cli(["rows", PLE, "--ids", "1-10,3", "--modes", "buffered"])
    assert text.exit_code == 0, text.output
    assert _rows_line(text.output) == [
        "rows: 10 (rows 1-10,3); crossing: 4096-byte page 1, 512-byte sector 3, 64 KiB 0",
        "ids: 11 given, 10 distinct; given more than once: 3 (each row is checked once)"]
    result = run_cli(["rows", PLE, "--ids", "1-10,3", "--modes", "buffered", "--json"])
    doc = json.loads(result.stdout)
    assert list(Draft202012Validator(SCHEMA).iter_errors(doc)) == []
    [model] = doc["models"]
    assert {k: model[k] for k in ("rows_checked", "ids_given", "ids_distinct", "repeated_count", "repeated_ids")} == {
        "rows_checked": 10, "ids_given": 11, "ids_distinct": 10, "repeated_count": 1, "repeated_ids": [3]}


def test_without_a_repeat_the_report_is_as_it_was() -> None:
    report = ggaudit.check_rows(PLE, range(1, 11), modes=("buffered",))
    assert report.given_ids == GivenIds(count=10, distinct=10) and not report.repeated
    assert not {"ids_given", "ids_distinct", "repeated_count", "repeated_ids"} & set(report.to_json())
    text = run_cli(["rows", PLE, "--ids", "1-10", "--modes", "buffered"])
    assert _rows_line(text.output) == ["rows: 10 (rows 1-10); crossing: 4096-byte page 1, 512-byte sector 3, 64 KiB 0"]


def test_the_repeated_ids_named_are_bounded_and_all_are_counted() -> None:
    ids = np.array([*range(29, -1, -1), *range(30)], dtype=np.int64)     # 0..29 each twice, descending first
    report = ggaudit.check_rows(PLE, ids, modes=("buffered",))
    assert report.rows_checked == 30
    assert report.given_ids == GivenIds(count=60, distinct=30, repeated_count=30, repeated=tuple(range(20)))
    line = next(line for line in report.summary().lines if line.startswith("ids: "))
    assert line == ("ids: 60 given, 30 distinct; given more than once: 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, "
                    "14, 15, 16, 17, 18, 19 and 10 more (each row is checked once)")


def test_random_rows_beside_listed_ones_are_not_ids_given() -> None:
    """Only the IDs listed were given: random rows that land on one of them are chosen, not repeated."""
    every = ggaudit.RowSelection(random=1024, seed=1)      # every row of the table, row 7 among them
    report = ggaudit.check_rows(PLE, [7, 7], modes=("buffered",), select=every)
    assert report.given_ids == GivenIds(count=2, distinct=1, repeated_count=1, repeated=(7,))
    assert (report.rows_checked, report.selection) == (1024, "rows 7,7 + random 1024 seed 1")


def test_a_captures_repeated_ids_are_said_and_each_captured_row_is_compared() -> None:
    """An engine gathers a token twice: its capture holds the row twice, both compared; the replay reads it once."""
    table = open_model(PLE).tensor("per_layer_token_embd.weight")
    with open(PLE, "rb") as f:
        f.seek(table.offset)
        rows = np.frombuffer(f.read(table.nbytes), np.uint8).reshape(table.n_rows, table.row_bytes)
    ids = np.array([5, 9, 5], dtype=np.int64)
    report = ggaudit.check_rows(PLE, against=(ids, rows[ids]), modes=("buffered",))
    assert report.ok and report.capture is not None and report.capture.rows == 3
    assert (report.rows_checked, report.given_ids) == (2, GivenIds(count=3, distinct=2, repeated_count=1,
                                                                   repeated=(5,)))


def test_the_html_page_says_the_repeated_ids_beside_the_rows_checked() -> None:
    from ggaudit.page import FactTable

    report = ggaudit.check_rows(PLE, ELEVEN, modes=("buffered",))
    facts = dict(next(b for b in report.page() if isinstance(b, FactTable)).rows)
    assert facts["rows checked"] == "10 (rows 1-10,3); IDs 11 given, 10 distinct; given more than once: 3"
    once = ggaudit.check_rows(PLE, range(1, 11), modes=("buffered",))
    assert dict(next(b for b in once.page() if isinstance(b, FactTable)).rows)["rows checked"] == "10 (rows 1-10)"
