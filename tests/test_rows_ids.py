"""Row IDs as the library takes them (a sequence, range or integer array, each a row of the table) and as
the command line does (`--ids "4162,4170-4200"`, `--ids-file`), and the options of a rows check: every
refusal names the parameter (the library) or the option (the command line), exactly."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from gguf import GGMLQuantizationType as T

from ggaudit.cli.ids import given_ids, parse_ids, read_ids_file
from ggaudit.errors import UsageError
from ggaudit.rows.replay import RowSelection, RowsOptions, check_rows
from ggaudit.rows.select import sample_rows
from platforms import needs_fifo
from rows_support import Table, make_table


@pytest.fixture
def table(tmp_path: Path) -> Table:
    return make_table(tmp_path, T.IQ4_NL, n_rows=200)


# --- the library: rows ---------------------------------------------------------------------------

@pytest.mark.parametrize("rows, described", [
    ([4, 100, 101, 102], "rows 4,100-102"),
    ((102, 101, 100, 4), "rows 102,101,100,4"),
    (range(100, 103), "rows 100-102"),
    (range(102, 99, -1), "rows 102,101,100"),
    (np.array([4, 100, 101, 102], dtype=np.int32), "rows 4,100-102"),
    (np.array([4, 100, 101, 102], dtype=np.uint64), "rows 4,100-102"),
    ([np.int64(4), np.uint16(100)], "rows 4,100"),
], ids=["list", "tuple", "range", "descending-range", "int32", "uint64", "numpy-scalars"])
def test_rows_as_a_sequence_range_or_array(table: Table, rows: Any, described: str) -> None:
    report = check_rows(table.path, rows, modes=["buffered"])
    want = [int(r) for r in rows]
    assert (report.ok, report.rows_checked, report.selection) == (True, len(want), described)
    assert [(s.mode, s.rows) for s in report.stats] == [("buffered", len(want))]


def test_rows_and_a_selection_add_up_each_row_once(table: Table) -> None:
    report = check_rows(table.path, [3, 2, 3], modes=["buffered"], select=RowSelection(random=4, seed=11))
    assert report.selection == "rows 3,2-3 + random 4 seed 11" and report.seed == 11
    sample = sample_rows(np.random.default_rng(11), 200, 4).tolist()
    assert report.rows_checked == len({3, 2, *sample})


@pytest.mark.parametrize("rows, message", [
    (5, "rows: must be a sequence, range or numpy array of row IDs, not int; for one row, pass a list of one"),
    (np.int64(5), "rows: must be a sequence, range or numpy array of row IDs, not int64; for one row, pass a list "
                  "of one"),
    (True, "rows: must be a sequence, range or numpy array of row IDs, not bool"),
    ("4162,4170-4200", "rows: must be a sequence, range or numpy array of row IDs, not str"),
    (b"\x01\x02", "rows: must be a sequence, range or numpy array of row IDs, not bytes"),
    ({1, 2}, "rows: must be a sequence, range or numpy array of row IDs, not set"),
    (np.array([True, False]), "rows: must hold integers, not bool"),
    (np.array([1.0, 2.0]), "rows: must hold integers, not float64"),
    (np.array([[1, 2]]), "rows: must be a 1-D array of row IDs, not one of shape (1, 2)"),
    ([1.5], "rows: must hold integers, not float (rows[0])"),
    ([1, 2, True], "rows: must hold integers, not bool (rows[2])"),
    ([1, np.bool_(True)], "rows: must hold integers, not bool (rows[1])"),
    ([1, "2"], "rows: must hold integers, not str (rows[1])"),
    ([-1], "rows: row -1 is outside the table (rows 0..199)"),
    ([3, 200, -1], "rows: row 200 is outside the table (rows 0..199)"),
    ([1 << 70], "rows: row an integer of 71 bits is outside the table (rows 0..199)"),
    (range(198, 202), "rows: row 200 is outside the table (rows 0..199)"),
    (range(1, -3, -1), "rows: row -1 is outside the table (rows 0..199)"),
    (range(-5, 5), "rows: row -5 is outside the table (rows 0..199)"),
    (np.array([7, 250], dtype=np.int32), "rows: row 250 is outside the table (rows 0..199)"),
    (np.array([7, -2], dtype=np.int8), "rows: row -2 is outside the table (rows 0..199)"),
    (np.array([(1 << 64) - 1], dtype=np.uint64), "rows: row 18446744073709551615 is outside the table "
                                                 "(rows 0..199)"),
    ([], "rows [] selected no rows; nothing was checked"),
    (range(0), "rows [] selected no rows; nothing was checked"),
], ids=lambda v: repr(v)[:40] if not isinstance(v, str) else None)
def test_rows_refused_name_the_parameter(table: Table, rows: Any, message: str) -> None:
    with pytest.raises(UsageError) as err:
        check_rows(table.path, rows, modes=["buffered"])
    assert str(err.value) == message


def test_a_range_longer_than_a_selection_may_be_is_refused_before_it_is_made(tmp_path: Path) -> None:
    from ggaudit.rows.select import MAX_SELECTED, row_ids
    with pytest.raises(UsageError) as err:
        row_ids(range(MAX_SELECTED + 1), MAX_SELECTED + 1)
    assert str(err.value) == (f"rows: {MAX_SELECTED + 1} row IDs, more than {MAX_SELECTED}; sweep the table with "
                              "RowSelection(all_rows=True)")


# --- the library: selection and options -------------------------------------------------------------

@pytest.mark.parametrize("kwargs, message", [
    ({"all_rows": 1}, "all_rows: must be True or False, not int"),
    ({"page_crossing": "yes"}, "page_crossing: must be True or False, not str"),
    ({"random": 2.0}, "random: must be an integer or None, not float"),
    ({"random": 0}, "random: must be at least 1, not 0"),
    ({"random": -(1 << 80)}, "random: must be at least 1, not an integer of 81 bits"),
    ({"seed": "7"}, "seed: must be an integer or None, not str"),
    ({"seed": -1}, "seed: must be an integer in 0..4294967295"),
    ({"seed": 1 << 32}, "seed: must be an integer in 0..4294967295"),
    ({"all_rows": True, "random": 3, "page_crossing": True}, "all_rows: sweeps the whole table; drop random, "
                                                             "page_crossing"),
])
def test_row_selection_refusals_name_the_field(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(UsageError) as err:
        RowSelection(**kwargs)
    assert str(err.value) == message


@pytest.mark.parametrize("kwargs, message", [
    ({"workers": 0}, "workers: must be at least 1, not 0"),
    ({"workers": 2.0}, "workers: must be an integer, not float"),
    ({"workers": True}, "workers: must be an integer, not bool"),
    ({"batch": 0}, "batch: must be at least 1, not 0"),
    ({"batch": None}, "batch: must be an integer, not NoneType"),
    ({"cache_rows": -1}, "cache_rows: must be at least 0, not -1"),
    ({"prefetch": 1}, "prefetch: must be True or False, not int"),
    ({"fp8": None}, "fp8: must be True or False, not NoneType"),
    ({"fail_fast": "no"}, "fail_fast: must be True or False, not str"),
    ({"reader_factory": "direct"}, "reader_factory: must be callable or None, not str"),
    ({"cache_factory": None}, "cache_factory: must be callable, not NoneType"),
    ({"pool_factory": 3}, "pool_factory: must be callable, not int"),
    ({"progress": True}, "progress: must be callable or None, not bool"),
])
def test_rows_options_refusals_name_the_field(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(UsageError) as err:
        RowsOptions(**kwargs)
    assert str(err.value) == message


def test_options_and_selection_are_frozen_and_keyword_only() -> None:
    with pytest.raises(TypeError):
        RowsOptions(4)  # type: ignore[misc]
    with pytest.raises(TypeError):
        RowSelection(True)  # type: ignore[misc]
    options = RowsOptions(workers=2)
    with pytest.raises(AttributeError):
        options.workers = 3  # type: ignore[misc]
    assert (options.workers, options.batch, options.cache_rows) == (2, 256, 0)


# --- the command line's IDs -----------------------------------------------------------------------

def test_parse_ids() -> None:
    assert parse_ids("4162,4170-4175", 5000).tolist() == [4162, 4170, 4171, 4172, 4173, 4174, 4175]
    assert parse_ids("1 2\n# three\n3-4 # four\n", 10, "ids.txt").tolist() == [1, 2, 3, 4]
    for text, message in (("12x", "'12x' is not a row ID or a range like 4170-4200"),
                          ("9-3", "'9-3' is not a valid range of row IDs"),
                          ("5000", "row 5000 is outside the table (rows 0..4999)"),
                          ("-4", "'-4' is not a row ID or a range like 4170-4200")):
        with pytest.raises(UsageError) as info:
            parse_ids(text, 5000)
        assert str(info.value) == f"--ids: {message}"


@pytest.mark.parametrize("token", ["7" * 100_000 + "x", "1-" + "9" * 100_000, "5-" + "3" * 60 + "x"])
def test_a_huge_bad_token_is_quoted_cut(token: str) -> None:
    """A megabyte-long token in --ids is quoted by its first 40 characters and its length, not whole."""
    with pytest.raises(UsageError) as info:
        parse_ids(token, 5000)
    assert str(info.value) == (f"--ids: {token[:40]!r}... ({len(token)} chars) is not a row ID or a range like "
                               "4170-4200")


def test_a_huge_row_number_is_quoted_cut() -> None:
    with pytest.raises(UsageError) as info:
        parse_ids("1-" + "9" * 4000, 5000)
    assert str(info.value) == f"--ids: row {'9' * 40}... (4000 chars) is outside the table (rows 0..4999)"


def test_given_ids_join_every_ids_then_every_file(tmp_path: Path) -> None:
    (tmp_path / "a").write_text("7\n4170-4172\n")
    ids, said = given_ids(("4162", "7"), (str(tmp_path / "a"),), 5000)
    assert ids.dtype == np.int64 and ids.tolist() == [4162, 7, 7, 4170, 4171, 4172]
    assert said == ["--ids 4162,7", f"--ids-file {tmp_path / 'a'}"]
    none, said = given_ids(("",), (), 5000)
    assert none.tolist() == [] and said == ["--ids ''"]
    with pytest.raises(UsageError) as err:
        given_ids((), (str(tmp_path / "a"),), 4171)
    assert str(err.value) == f"{tmp_path / 'a'} line 2: row 4172 is outside the table (rows 0..4170)"


@pytest.mark.parametrize("text", [
    "4162,4170\n4200\n",                                   # several IDs a line, no header
    "token_id\r\n4162\r\n4170\r\n4200\r\n",                 # a spreadsheet's one column, CRLF
    "\ufeff# gathered\n\"row\"\n4162,4170\n4200",             # a BOM, a comment, a quoted header, no last newline
], ids=["rows-of-ids", "header-crlf", "bom-comment-quoted-header"])
def test_a_csv_of_ids_selects_every_field_as_a_row(tmp_path: Path, text: str) -> None:
    (tmp_path / "ids.csv").write_bytes(text.encode("utf-8"))
    ids, _ = given_ids((), (str(tmp_path / "ids.csv"),), 5000)
    assert ids.tolist() == [4162, 4170, 4200]


def test_a_csv_header_naming_several_columns_is_refused_where_it_is(tmp_path: Path) -> None:
    """Its second column would be read as row IDs (a count of 3 as row 3): refused, not guessed."""
    (tmp_path / "ids.csv").write_text("# from the engine\ntoken_id,count\n4162,3\n")
    with pytest.raises(UsageError) as err:
        given_ids((), (str(tmp_path / "ids.csv"),), 5000)
    assert str(err.value) == (f"{tmp_path / 'ids.csv'} line 2: a header naming 2 columns ('token_id', 'count'); "
                              "every field of an ID file is a row ID: keep only the IDs' column")
    (tmp_path / "late.csv").write_text("4162\ntoken_id\n")     # a name after the first ID is no header
    with pytest.raises(UsageError) as late:
        given_ids((), (str(tmp_path / "late.csv"),), 5000)
    assert str(late.value) == f"{tmp_path / 'late.csv'} line 2: 'token_id' is not a row ID or a range like 4170-4200"


def test_ids_files_that_cannot_be_read(tmp_path: Path) -> None:
    (tmp_path / "binary").write_bytes(b"1,2\xff")
    for name, message in (("missing", "cannot read ID file: "), ("", "cannot read ID file: is a directory"),
                          ("binary", "offset 3: ID file is not text")):
        with pytest.raises(UsageError) as err:
            read_ids_file(str(tmp_path / name))
        assert str(err.value).startswith(f"{tmp_path / name}: {message}")


@needs_fifo
def test_an_ids_file_that_is_a_fifo_is_refused_without_waiting(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "ids")     # no writer: reading it would wait forever
    with pytest.raises(UsageError) as err:
        read_ids_file(str(tmp_path / "ids"))
    assert str(err.value) == f"{tmp_path / 'ids'}: cannot read ID file: not a regular file"
