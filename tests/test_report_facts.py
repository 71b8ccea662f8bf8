"""Reports carry their facts: a scan finding its field's encoding (from the block table), a rows report how
its rows were chosen (as data, the words derived from it) and which of its table's rows cross a page; the
reporters read those facts rather than working them out again from text or geometry."""

from __future__ import annotations

import dataclasses
import json
import xml.etree.ElementTree as ET
from importlib import resources
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator
from gguf import GGMLQuantizationType as T

import ggaudit
from ggaudit.outcomes import Outcome
from ggaudit.cli.reporters import html as html_reporter
from ggaudit.cli.reporters._svg import MAP_WIDTH, STRIP_LABEL
from ggaudit.format.blocks import FP8_E4M3_ELEMENTS
from ggaudit.format.build import TensorSpec, write_gguf
from ggaudit.wording import format_value
from ggaudit.rows import replay as R
from ggaudit.evidence.readers import PAGE, SECTOR
from ggaudit.scan.report import describe_finding
from rows_support import Table, crossing, make_table
from scan_support import finite_tensor

# --- a scan finding's encoding -------------------------------------------------------------------

#: The encoding of each type's float fields, as ggml's structs store them (ggml-common.h: block_q4_0's
#: ggml_half d, block_q8_K's float d, block_mxfp4's uint8_t e (E8M0), block_nvfp4's UE4M3 d, block_iq1_m's
#: f16 scale split over its scales words); float tensors store their elements.
ENCODINGS = [(T.F16, "f16"), (T.BF16, "bf16"), (T.F32, "f32"), (T.F64, "f64"), (T.Q4_0, "f16"), (T.Q4_1, "f16"),
             (T.Q8_K, "f32"), (T.MXFP4, "e8m0"), (T.NVFP4, "ue4m3"), (T.IQ1_M, "iq1m_f16")]


@pytest.fixture(scope="module")
def outlier_scan(tmp_path_factory: pytest.TempPathFactory) -> ggaudit.ScanReport:
    """One tensor per type, and an I8 tensor holding FP8 E4M3, scanned with --max-abs 0: every nonzero
    float field (or element) is an outlier, so every encoding yields findings, finite ones included
    (UE4M3 has no non-finite value at all)."""
    shape = (256, 2)
    specs = [TensorSpec(f"t.{t.name.lower()}", t, shape, bytes(finite_tensor(t, shape, seed=i)))
             for i, (t, _) in enumerate(ENCODINGS)]
    specs.append(TensorSpec("t.fp8", T.I8, shape, bytes(finite_tensor(T.I8, shape, seed=99,
                                                                      layout=FP8_E4M3_ELEMENTS))))
    path = tmp_path_factory.mktemp("facts") / "encodings.gguf"
    write_gguf(path, specs)
    report: ggaudit.ScanReport = ggaudit.scan(path, max_abs=0.0, as_fp8=["t.fp8"], workers=0)
    return report


@pytest.mark.parametrize("ggml_type, encoding", [*ENCODINGS, (T.I8, "e4m3")],
                         ids=[t.name for t, _ in ENCODINGS] + ["I8-as-fp8"])
def test_a_finding_carries_its_fields_encoding(outlier_scan: ggaudit.ScanReport, ggml_type: T, encoding: str) -> None:
    name = "t.fp8" if ggml_type == T.I8 else f"t.{ggml_type.name.lower()}"
    (tensor,) = [t for t in outlier_scan.tensors if t.name == name]
    assert tensor.findings and {f.encoding for f in tensor.findings} == {encoding}
    # The text line shows the value as the shortest text that reads back at that encoding's width.
    first = tensor.findings[0]
    line = next(line for line in outlier_scan.summary().lines if f"offset {first.offset}," in line)
    assert f"got {first.bits} ({format_value(first.value, encoding)})" in line


def test_the_line_follows_the_findings_encoding_not_its_hex_width(outlier_scan: ggaudit.ScanReport) -> None:
    """A bf16 and an f16 have four hex digits each: only the encoding the finding carries tells them
    apart. bf16 0x3f8f is 1.1171875: ``1.12`` at bf16 width, ``1.117`` at f16's, exact as a float64."""
    (bf16,) = [t for t in outlier_scan.tensors if t.type == "BF16"]
    finding = dataclasses.replace(bf16.findings[0], bits="0x3f8f", value=1.1171875)
    assert "got 0x3f8f (1.12)" in describe_finding(finding)
    assert "got 0x3f8f (1.117)" in describe_finding(dataclasses.replace(finding, encoding="f16"))


# --- a rows report's selection -------------------------------------------------------------------

@pytest.fixture
def table(tmp_path: Path) -> Table:
    return make_table(tmp_path, T.IQ4_NL, n_rows=300)


def _lane(page: str, css: str) -> list[tuple[float, float]]:
    start = page.index('<svg class="strip"')
    svg = ET.fromstring(page[start:page.index("</svg>", start) + len("</svg>")])
    return [(float(r.get("x", 0)), float(r.get("width", 0))) for r in svg.iter("rect") if r.get("class") == css]


def _html(report: R.RowsReport) -> str:
    return html_reporter.report([Outcome(model=report.file, result=report)])


def test_the_choice_is_data_and_the_words_derive_from_it(table: Table) -> None:
    listed = list(range(0, 80, 2))      # 40 runs of one row: more than the 60 characters the words show
    report = R.check_rows(table.path, listed, modes=["buffered"])
    assert report.choice == R.RowChoice(n_rows=300, listed=tuple((r, r) for r in listed))
    assert report.selection == "rows 0,2,4,6,8,10,12,14,16,18,20,22,24,26,28,30,32,34,36,38,40..."
    both = R.check_rows(table.path, [7, 8, 9], modes=["buffered"], select=R.RowSelection(random=3, seed=5,
                                                                                       page_crossing=True))
    assert (both.choice.listed, both.choice.random, both.choice.seed, both.choice.page_crossing) == (
        ((7, 9),), 3, 5, True)
    assert both.selection == "rows 7-9 + random 3 seed 5 + page-crossing" and both.checked_ranges is None


def test_the_html_draws_the_rows_the_choice_lists_whatever_the_words_say(table: Table) -> None:
    """The checked lane comes from the report's choice: a list the words cut with "..." is still drawn
    row by row, and another choice draws other rows."""
    listed = list(range(0, 80, 2))
    report = R.check_rows(table.path, listed, modes=["buffered"])
    unit = MAP_WIDTH / 300
    page = _html(report)
    assert "checked (not located)" not in page
    assert [round((x - STRIP_LABEL) / unit) for x, _ in _lane(page, "checked")] == listed
    moved = dataclasses.replace(report, choice=R.RowChoice(n_rows=300, listed=((200, 209),)))
    assert moved.selection == "rows 200-209"
    assert _lane(_html(moved), "checked") == [(pytest.approx(STRIP_LABEL + 200 * unit, abs=0.01),
                                               pytest.approx(10 * unit, abs=0.01))]
    cut = dataclasses.replace(report, choice=dataclasses.replace(report.choice, listed_complete=False))
    assert cut.checked_ranges is None and "checked (not located)" in _html(cut)


def test_the_crossing_rows_are_the_reports(table: Table) -> None:
    """The rows of the table straddling a page and a sector, counted by the bytes each row spans."""
    report = R.check_rows(table.path, [0], modes=["buffered"])
    rb = table.tensor.row_bytes
    for boundary in (PAGE, SECTOR):
        want = [r for r in range(300) if table.offset(r) // boundary != (table.offset(r) + rb - 1) // boundary]
        got = [int(r) for piece in report.crossing_rows(boundary) for r in piece]
        assert got == want and want
    assert [int(r) for piece in report.crossing_rows(PAGE) for r in piece] == crossing(table)
    unit = MAP_WIDTH / 300
    assert [round((x - STRIP_LABEL) / unit) for x, _ in _lane(_html(report), "page")] == crossing(table)


def test_the_choice_is_in_the_json(table: Table) -> None:
    listed = R.check_rows(table.path, [4, 100, 101, 102], modes=["buffered"]).to_json()
    assert listed["choice"] == {"all_rows": False, "listed": [[4, 4], [100, 102]], "listed_complete": True,
                                "random": None, "seed": None, "page_crossing": False, "capture_ids": False}
    assert listed["selection"] == "rows 4,100-102"
    swept = R.check_rows(table.path, modes=["buffered"], select=R.RowSelection(all_rows=True)).to_json()
    assert (swept["choice"]["all_rows"], swept["choice"]["listed"], swept["selection"]) == (True, None,
                                                                                            "all 300 rows")
    schema = json.loads(resources.files("ggaudit").joinpath("schema/cli-output.schema.json").read_text("utf-8"))
    rows_report = Draft202012Validator({"$ref": "#/$defs/rows_report", "$defs": schema["$defs"]})
    rows_report.validate(json.loads(json.dumps(listed)))
    assert not rows_report.is_valid({**listed, "choice": {**listed["choice"], "listed": [[4]]}})
