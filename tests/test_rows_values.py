"""Words about values in ``rows``: the first NaN of a row a read path delivered is named by block and
column, the verdict says when the selected rows were tested and are finite (and says nothing when no row
was tested), and the HTML summary counts the rows holding NaN or Inf out of the rows tested."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf import quants

from ggaudit.outcomes import Outcome
from ggaudit.cli.reporters import html as html_reporter
from ggaudit.format.build import TensorSpec, write_gguf
from ggaudit.format.layout import open_model
from ggaudit.rows import replay as R
from ggaudit.rows.classify import RowPlace
from ggaudit.evidence.readers import Reader, open_reader
from rows_support import Wrapped
from support import run_cli, write_small_model

ROW = 68            # write_small_model: Q8_0, 64 columns = 2 blocks of 34 bytes (f16 scale d, then 32 int8)
EMB = "token_embd.weight"
NAN_F16 = b"\x00\x7e"


class _NanScale(Wrapped):
    """The mmap path delivering a NaN (0x7e00) over the f16 scale of block 1 of one row."""

    def __init__(self, inner: Reader, at: int) -> None:
        super().__init__(inner)
        self.at = at

    def read_into(self, view: memoryview, offset: int) -> int:
        n = self.inner.read_into(view, offset)
        if offset <= self.at and self.at + 2 <= offset + n:
            view[self.at - offset:self.at - offset + 2] = NAN_F16
        return n


def _facts(page: str) -> dict[str, str]:
    return dict(re.findall(r"<tr><td>([^<]*)</td><td[^>]*>([^<]*)</td></tr>", page))


def test_a_delivered_nan_is_named_by_block_and_column(tmp_path: Path) -> None:
    model = write_small_model(tmp_path / "m.gguf")
    at = open_model(model).tensor(EMB).offset + 7 * ROW + 34     # row 7, block 1's scale

    def factory(path: str, mode: str) -> Reader:
        inner = open_reader(path, mode)
        return _NanScale(inner, at) if mode == "mmap" else inner

    report = R.check_rows(model, range(0, 10), modes=("buffered", "mmap"),
                          options=R.RowsOptions(reader_factory=factory))
    (m,) = report.mismatches
    # The scale's low byte is 0x00 in the file already: the first difference is its high byte.
    assert (m.mode, m.row, m.block, m.column, m.offset, m.actual[:2]) == ("mmap", 7, 1, 32, at + 1, "7e")
    assert (m.expected_finite, m.actual_finite, m.actual_nonfinite) == (True, False, RowPlace(1, 32))
    assert m.to_json()["actual_nonfinite"] == {"block": 1, "column": 32}
    (line,) = [x for d in report.diagnostics() for x in d.lines if "decoded row finite" in x]
    assert line == "  1 byte differs; decoded row finite: expected yes, actual no (first NaN/Inf at block 1, column 32)"
    # The file itself is finite: the delivered NaN is the read path's, and the verdict says both.
    assert (report.nonfinite_rows, report.finite_tested) == (0, 10)


def test_verdict_and_html_say_how_many_rows_were_tested(tmp_path: Path) -> None:
    model = write_small_model(tmp_path / "m.gguf")
    with open(model, "r+b") as f:
        f.seek(open_model(model).tensor(EMB).offset + 3 * ROW + 34)
        f.write(NAN_F16)
    clean = run_cli(["rows", model, "--ids", "0-2,4", "--modes", "buffered"])
    assert clean.exit_code == 0 and clean.stdout.splitlines()[-1] == \
        "result: clean: every path delivered the file's bytes; the 4 selected rows are finite in the file"
    one = run_cli(["rows", model, "--ids", "4", "--modes", "buffered", "--json"])
    assert json.loads(one.stdout)["models"][0]["finite_tested"] == 1
    assert run_cli(["rows", model, "--ids", "4", "--modes", "buffered"]).stdout.splitlines()[-1] == \
        "result: clean: every path delivered the file's bytes; the selected row is finite in the file"
    report = R.check_rows(model, range(0, 6), modes=("buffered",))
    page = html_reporter.report([Outcome(model=str(model), result=report)])
    assert _facts(page)["rows holding NaN/Inf"] == "1 of 6 tested"


def test_integer_rows_are_not_called_finite(tmp_path: Path) -> None:
    path = tmp_path / "i8.gguf"
    values = np.arange(32, dtype=np.int8).reshape(4, 8)
    write_gguf(path, [TensorSpec(EMB, T.I8, (8, 4), values.tobytes())], {"general.architecture": "llama"})
    result = run_cli(["rows", path, "--all", "--modes", "buffered"])
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[-1] == "result: clean: every path delivered the file's bytes"
    report = R.check_rows(path, modes=("buffered",), select=R.RowSelection(all_rows=True))
    assert (report.finite_tested, report.nonfinite_rows) == (0, 0)
    page = html_reporter.report([Outcome(model=str(path), result=report)])
    assert _facts(page)["rows holding NaN/Inf"] == "not tested"


def test_a_capture_holding_the_files_nan_matches_it(tmp_path: Path) -> None:
    model = write_small_model(tmp_path / "m.gguf")
    offset = open_model(model).tensor(EMB).offset
    with open(model, "r+b") as f:
        f.seek(offset + 3 * ROW + 34)
        f.write(NAN_F16)
    raw = model.read_bytes()[offset + 2 * ROW:offset + 4 * ROW]
    values = quants.dequantize(np.frombuffer(raw, np.uint8).reshape(2, ROW), T.Q8_0).astype(np.float32)
    assert np.isnan(values[1, 32:64]).all() and np.isfinite(values[1, :32]).all()
    np.savez(tmp_path / "cap.npz", ids=np.array([2, 3]), rows=values)
    same = R.check_rows(model, against=str(tmp_path / "cap.npz"), modes=())
    # The file's NaN captured as NaN is no mismatch; the file's own NaN is still reported.
    assert (same.mismatch_count, same.capture.max_abs_diff, same.nonfinite_rows) == (0, 0.0, 1)
    values[1, 40] = 0.0
    np.savez(tmp_path / "cap.npz", ids=np.array([2, 3]), rows=values)
    differs = R.check_rows(model, against=str(tmp_path / "cap.npz"), modes=())
    (m,) = differs.mismatches
    assert (m.row, m.column, m.expected, m.actual, m.differing) == (3, 40, "7fc00000", "00000000", 1)
    assert (m.max_abs_diff, differs.capture.max_abs_diff) == (None, None)
