"""One diagnostic shape (issue 24): every job's report yields ``Diagnostic``s located exactly (file, offset,
length, tensor, row, column, block, field; raw bits in ``extras``), whose message is the text report's line,
and whose kind is registered in ``ggaudit.kinds`` with a title, a meaning and what to do."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from gguf import GGMLQuantizationType as T

import ggaudit
from ggaudit.diagnostic import Diagnostic, Place
from ggaudit.format.blocks import LAYOUTS
from ggaudit.format.build import TensorSpec, write_gguf
from ggaudit.format.layout import open_model
from ggaudit.check.report import DIAGNOSTIC_KINDS as CHECK_KINDS
from ggaudit.kinds import KINDS, SEVERITIES
from ggaudit.rows import replay as R
from ggaudit.evidence.readers import Reader, open_reader
from ggaudit.rows.report import DIAGNOSTIC_KINDS as ROWS_KINDS
from ggaudit.scan.report import DIAGNOSTIC_KINDS as SCAN_KINDS
from ggaudit.verify.diff import DIAGNOSTIC_KINDS as DIFF_KINDS
from ggaudit.verify.report import DIAGNOSTIC_KINDS as VERIFY_KINDS
from rows_support import make_table
from scan_support import finite_tensor, poke
from test_report_sarif import _Shifted

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
Q8_0 = LAYOUTS[T.Q8_0]


def test_a_scan_nan_is_one_diagnostic_at_its_element() -> None:
    # fixtures/README.md: types.f32.weight row 3, column 100 holds 0000c07f (f32 NaN) at offset 9744.
    path = str(FIXTURES / "all_types-f32-nan.gguf")
    report = ggaudit.scan(path)
    (found,) = report.diagnostics()
    line = (f"nan at file {path} offset 9744, length 4: tensor types.f32.weight, row 3, column 100: "
            "expected finite, got 0x7fc00000 (nan)")
    assert found == Diagnostic(
        kind="nan", severity="error", message=line, file=path, offset=9744, length=4, tensor="types.f32.weight",
        row=3, column=100, block=None, field="value", expert=None,
        extras={"tensor": "types.f32.weight", "file": path, "kind": "nan", "row": 3, "column": 100, "block": 100,
                "field": "value", "offset": 9744, "bits": "0x7fc00000", "width": 1, "size": 4, "value": None,
                "cause": "field", "expert": None})
    assert "  " + line in report.summary().lines      # the text report's line, exactly


def test_a_verify_sha256_mismatch_spans_the_file(tmp_path: Path) -> None:
    model = write_gguf(tmp_path / "m.gguf", [TensorSpec("w", T.F32, (4,), bytes(16))])
    path, size = str(tmp_path / "m.gguf"), (tmp_path / "m.gguf").stat().st_size
    assert model["w"] > 0
    actual = hashlib.sha256((tmp_path / "m.gguf").read_bytes()).hexdigest()
    report = ggaudit.verify(path, sha256="0" * 64)
    (found,) = report.diagnostics()
    assert found == Diagnostic(
        kind="verify/sha256", severity="error", file=path, offset=0, length=size,
        message=f"MISMATCH sha256: file {path}, offset 0, length {size} (--sha256): sha256 differs\n"
                f"  expected: {'0' * 64}\n  actual:   {actual}",
        extras={"kind": "sha256", "path": path, "subject": "--sha256", "expected": "0" * 64, "actual": actual,
                "offset": 0, "length": size, "tensor": None, "rows": None, "detail": "sha256 differs"})
    assert found.lines == list(report.summary().lines[1:4])


def test_a_misplaced_row_is_one_diagnostic_at_the_row(tmp_path: Path) -> None:
    table = make_table(tmp_path, T.IQ4_NL, ne0=160, n_rows=64)
    rb = table.tensor.row_bytes                 # 5 blocks of 18 bytes

    def shifted(path: str, mode: str) -> Reader:
        return _Shifted(open_reader(path, mode), rb)    # reads row r + 1 for row r

    report = R.check_rows(table.path, [3], modes=["buffered"], options=R.RowsOptions(reader_factory=shifted))
    (found,) = report.diagnostics()
    byte = next(i for i, (x, y) in enumerate(zip(table.row(3), table.row(4), strict=True)) if x != y)
    assert (found.kind, found.severity, found.file, found.offset, found.length) == (
        "rows/misplaced", "error", table.path, table.offset(3), rb)
    assert (found.tensor, found.row, found.column, found.block, found.field, found.expert) == (
        table.tensor.name, 3, byte // 18 * 32, byte // 18, None, None)
    assert (found.extras["byte"], found.extras["offset"]) == (byte, table.offset(3) + byte)
    assert found.extras["expected"].startswith(table.row(3)[byte:byte + 4].hex(" "))
    assert found.extras["actual"].startswith(table.row(4)[byte:byte + 4].hex(" "))
    assert (found.extras["other_row"], found.extras["other_offset"]) == (4, table.offset(4))
    assert found.message.split("\n") == list(report.summary().lines[4:4 + len(found.lines)])
    assert found.lines[0] == "mismatch: buffered row 3 [misplaced (row 4)] (gather)"


def _q8_pair(tmp_path: Path) -> tuple[str, str, dict[str, int]]:
    """Two Q8_0 [64, 2] models alike but for block 1 of row 1 (block 3 of the tensor), whose d is 1.0 in B."""
    data = finite_tensor(T.Q8_0, (64, 2), 4)
    other = bytearray(data)
    poke(other, Q8_0, 3, Q8_0.fields[0], 0x3C00)
    a = str(tmp_path / "a.gguf")
    write_gguf(a, [TensorSpec("q.weight", T.Q8_0, (64, 2), bytes(data))])
    offsets = write_gguf(tmp_path / "b.gguf", [TensorSpec("q.weight", T.Q8_0, (64, 2), bytes(other))])
    return a, str(tmp_path / "b.gguf"), offsets


def test_a_diff_data_difference_is_at_b_with_a_related(tmp_path: Path) -> None:
    a, b, offsets = _q8_pair(tmp_path)
    report = ggaudit.diff(a, b)
    (found,) = report.diagnostics()
    block_b = offsets["q.weight"] + 3 * 34
    block_a = open_model(a).tensor("q.weight").offset + 3 * 34
    assert (found.kind, found.severity, found.file, found.offset, found.length) == ("diff/data", "warning", b,
                                                                                    block_b, 34)
    assert (found.tensor, found.row, found.column, found.block, found.field) == ("q.weight", 1, 32, 1, "d")
    assert found.related == (Place(what="the same block in a (expected)", file=a, offset=block_a, length=34,
                                   tensor="q.weight"),)
    first = found.extras["first"]
    assert (first["raw_b"][:4], first["offset_a"], first["offset_b"]) == ("003c", block_a, block_b)
    assert first["raw_a"][4:] == first["raw_b"][4:] and first["raw_a"][:4] != "003c"
    assert found.lines == list(report.summary().lines[2:2 + len(found.lines)])


def test_a_diff_structure_difference_is_at_the_bytes_only_b_has(tmp_path: Path) -> None:
    a = str(tmp_path / "a.gguf")
    write_gguf(a, [TensorSpec("w", T.F32, (8,), bytes(32))])
    b = tmp_path / "b.gguf"
    b.write_bytes(Path(a).read_bytes() + b"PAYLOAD!")
    size_a = Path(a).stat().st_size
    report = ggaudit.diff(a, str(b))
    facts, region = report.diagnostics()
    assert (facts.kind, facts.file, facts.offset, facts.extras["size_a"], facts.extras["size_b"]) == (
        "diff/structure", str(b), None, size_a, size_a + 8)
    assert region == Diagnostic(
        kind="diff/structure", severity="error", file=str(b), offset=size_a, length=8,
        message=f"ONLY-IN-B structure trailing after tensor w: file {b}, offset {size_a}, length 8: "
                f"{b'PAYLOAD!'.hex()}",
        extras={"path_a": a, "path_b": str(b), "kind": "trailing", "what": "only-in-b", "after": "w",
                "before": None, "offset_a": None, "length_a": None, "offset_b": size_a, "length_b": 8, "byte": 0,
                "first_a": None, "first_b": size_a, "head_a": "", "head_b": b"PAYLOAD!".hex()})


def test_every_kind_a_report_yields_is_registered_and_says_what_to_do() -> None:
    yielded = [*SCAN_KINDS, *VERIFY_KINDS, *ROWS_KINDS, *DIFF_KINDS, *CHECK_KINDS]
    assert [k for k in yielded if k not in KINDS] == []
    assert [k for k in KINDS if k not in yielded] == []          # no kind is left that nothing yields
    for kind in KINDS.values():
        assert kind.severity in SEVERITIES, kind
        assert kind.title and kind.meaning and kind.action, kind


def test_an_unregistered_kind_is_refused_where_it_is_made() -> None:
    with pytest.raises(KeyError, match=r"'scan/new-kind' is not in ggaudit\.kinds\.KINDS"):
        Diagnostic(kind="scan/new-kind", message="x")


def test_extras_are_read_only() -> None:
    found = Diagnostic(kind="nan", message="x", extras={"bits": "0x7fc00000"})
    with pytest.raises(TypeError):
        found.extras["bits"] = "0x0"        # type: ignore[index]
