"""What ``rows`` checks and what its verdict says: repeated selectors and modes add up, a selection or a
mode list that is empty is exit 2 (nothing was checked), rows whose bytes were delivered but hold NaN or
Inf are exit 1 with both facts, and a capture compared without read paths says so."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from gguf import GGMLQuantizationType as T

from ggaudit.errors import UsageError
from ggaudit.format.build import TensorSpec, write_gguf
from ggaudit.format.layout import open_model
from ggaudit.rows.replay import RowSelection, check_rows
from support import assert_one_line_error, run_cli, write_small_model

ROW = 68            # write_small_model: Q8_0, 64 columns = 2 blocks of 34 bytes
EMB = "token_embd.weight"


# --- repeated options add up; an empty selection is an error --------------------------------------

def _nan_rows(path: Path, rows: list[int]) -> Path:
    """Block 1's f16 scale of each row set to NaN (0x7e00)."""
    offset = open_model(path).tensor(EMB).offset
    with open(path, "r+b") as f:
        for row in rows:
            f.seek(offset + row * ROW + 34)
            f.write(b"\x00\x7e")
    return path


def test_repeated_ids_ids_files_and_modes_are_joined(tmp_path: Path) -> None:
    # NaN planted in rows each selector names (and one no selector names): the count proves which rows ran.
    model = _nan_rows(write_small_model(tmp_path / "m.gguf"), [1, 6, 30, 40, 50])
    (tmp_path / "a").write_text("30\n# a comment\n")
    (tmp_path / "b").write_text("40, 41\n")
    result = run_cli(["rows", model, "--ids", "1", "--ids", "5-6", "--ids-file", tmp_path / "a",
                      "--ids-file", tmp_path / "b", "--modes", "mmap", "--modes", "buffered", "--json"])
    assert result.exit_code == 1, result.output
    doc = json.loads(result.stdout)["models"][0]
    assert doc["selection"] == "rows 1,5-6,30,40-41"
    assert doc["rows_checked"] == 6
    assert doc["modes"] == ["mmap", "buffered"]
    assert [(s["mode"], s["rows"]) for s in doc["stats"]] == [("mmap", 6), ("buffered", 6)]
    assert (doc["nonfinite_rows"], doc["delivered"], doc["ok"]) == (4, True, False)
    assert doc["compared"] == ["mmap", "buffered"]


@pytest.mark.parametrize("args, shown", [
    (["--ids", ""], "--ids ''"),
    (["--ids", " , "], "--ids  , "),
    (["--ids-file", "{comments}"], "--ids-file {comments}"),
    (["--ids", "", "--ids-file", "{comments}"], "--ids '' + --ids-file {comments}"),
])
def test_empty_selection_is_exit_2_nothing_checked(tmp_path: Path, args: list[str], shown: str) -> None:
    model = write_small_model(tmp_path / "m.gguf")
    comments = tmp_path / "ids.txt"
    comments.write_text("# nothing here\n\n   \n# still nothing\n")
    args = [a.format(comments=comments) for a in args]
    result = run_cli(["rows", model, *args, "--modes", "buffered"])
    assert assert_one_line_error(result) == (f"ggaudit: error: no rows selected by {shown.format(comments=comments)}; "
                                             "nothing was checked")
    assert result.stdout == ""


def test_empty_modes_is_exit_2(tmp_path: Path) -> None:
    model = write_small_model(tmp_path / "m.gguf")
    for args in (["--modes", ""], ["--modes", ",", "--modes", ""]):
        result = run_cli(["rows", model, "--ids", "1", *args])
        assert assert_one_line_error(result) == "ggaudit: error: --modes needs at least one of buffered,mmap,direct"


def test_library_refuses_what_would_check_nothing(tmp_path: Path) -> None:
    model = write_small_model(tmp_path / "m.gguf")
    with pytest.raises(UsageError, match=r"^rows \[\] selected no rows; nothing was checked$"):
        check_rows(model, [], modes=["buffered"])
    with pytest.raises(UsageError, match=r"^modes: no read path, and no capture to compare \(against\): nothing to "):
        check_rows(model, [1], modes=())
    with pytest.raises(UsageError, match=r"^rows: none given and none selected: pass row IDs, or select="):
        check_rows(model, select=RowSelection(seed=3), modes=["buffered"])
    report = check_rows(model, [1], modes=["buffered"])
    assert report.rows_checked == 1 and report.ok


# --- bytes delivered, values non-finite; a capture-only run says so --------------------------------

def test_nan_scale_in_a_selected_row_is_exit_1_with_both_facts(tmp_path: Path) -> None:
    model = _nan_rows(write_small_model(tmp_path / "m.gguf"), [5, 9])
    offset = open_model(model).tensor(EMB).offset
    result = run_cli(["rows", model, "--ids", "0-20", "--modes", "buffered,mmap"])
    assert result.exit_code == 1, result.output
    assert result.stdout.splitlines()[-1] == (
        "result: every path delivered the file's bytes; 2 selected rows hold non-finite values "
        f"(first: row 5, block 1, column 32, field d = 0x7e00 nan, offset {offset + 5 * ROW + 34})")
    one = run_cli(["rows", model, "--ids", "9", "--modes", "buffered", "--json"])
    doc = json.loads(one.stdout)["models"][0]
    assert one.exit_code == 1
    assert doc["first_nonfinite"] == {"kind": "nan", "row": 9, "block": 1, "column": 32, "field": "d",
                                      "offset": offset + 9 * ROW + 34, "bits": "0x7e00", "cause": "field"}
    assert (doc["nonfinite_rows"], doc["delivered"], doc["ok"], doc["mismatch_count"]) == (1, True, False, 0)
    # Rows around them are fine: exit 0, and the verdict says the 8 rows were tested and are finite.
    clean = run_cli(["rows", model, "--ids", "0-4,6-8", "--modes", "buffered"])
    assert clean.exit_code == 0 and clean.stdout.splitlines()[-1] == \
        "result: clean: every path delivered the file's bytes; the 8 selected rows are finite in the file"


def test_inf_element_of_a_float_table_names_its_column(tmp_path: Path) -> None:
    values = np.ones((4, 8), dtype="<f4")
    values[2, 3] = np.inf
    path = tmp_path / "f.gguf"
    offsets = write_gguf(path, [TensorSpec(EMB, T.F32, (8, 4), values.tobytes())], {"general.architecture": "llama"})
    result = run_cli(["rows", path, "--all", "--modes", "buffered"])
    assert result.exit_code == 1, result.output
    assert result.stdout.splitlines()[-1] == (
        "result: every path delivered the file's bytes; 1 selected row holds non-finite values "
        f"(first: row 2, column 3 = 0x7f800000 +inf, offset {offsets[EMB] + 2 * 32 + 12})")


def test_capture_without_read_paths_says_what_was_compared(tmp_path: Path) -> None:
    model = write_small_model(tmp_path / "m.gguf")
    t = open_model(model).tensor(EMB)
    data = model.read_bytes()
    ids = np.array([3, 7, 11])
    rows = np.stack([np.frombuffer(data[t.row_offset(r):t.row_offset(r) + ROW], np.uint8) for r in ids])
    np.savez(tmp_path / "cap.npz", ids=ids, rows=rows)
    alone = run_cli(["rows", model, "--against", tmp_path / "cap.npz"])
    assert alone.exit_code == 0, alone.output
    assert alone.stdout.splitlines()[-1] == ("result: clean: the capture matched the file in all 3 rows "
                                             "(no read path run); the 3 selected rows are finite in the file")
    doc = json.loads(run_cli(["rows", model, "--against", tmp_path / "cap.npz", "--json"]).stdout)
    doc = doc["models"][0]
    assert (doc["compared"], doc["stats"], doc["delivered"], doc["ok"]) == (["capture"], [], True, True)
    both = run_cli(["rows", model, "--against", tmp_path / "cap.npz", "--modes", "buffered"])
    assert both.exit_code == 0, both.output
    assert both.stdout.splitlines()[-1] == ("result: clean: every path and the capture delivered the file's bytes; "
                                            "the 3 selected rows are finite in the file")
    _nan_rows(model, [7])
    nan = run_cli(["rows", model, "--against", tmp_path / "cap.npz"])
    assert nan.exit_code == 1
    assert nan.stdout.splitlines()[-1].startswith(
        "result: 1 mismatch (garbage 1), 0 short reads; mismatched rows crossing: ")
    assert nan.stdout.splitlines()[-1].endswith(
        f"; 1 selected row holds non-finite values (first: row 7, block 1, column 32, field d = 0x7e00 nan, "
        f"offset {t.row_offset(7) + 34})")
