"""Engine captures (--against): raw rows compare exactly, decoded rows against ggaudit's own decode;
a corrupted row is pinned to its row, block and column with expected and actual bits."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import numpy as np
import pytest
from gguf import GGMLQuantizationType as T
from gguf import quants

from ggaudit.rows import replay as R
from ggaudit.errors import UsageError
from ggaudit.rows.classify import RowPlace
from ggaudit.rows.wording import describe_row_mismatch
from ggaudit.rows.select import MAX_NPZ_BYTES
from rows_support import Table, make_table

IDS = [5, 77, 4162, 4163, 4999]


@pytest.fixture
def ple(tmp_path: Path) -> Table:
    return make_table(tmp_path, T.IQ4_NL, n_rows=5000)


def raw_rows(table: Table, ids: list[int]) -> np.ndarray:
    return np.stack([np.frombuffer(table.row(r), np.uint8) for r in ids])


def decoded_rows(table: Table, ids: list[int], dtype: type) -> np.ndarray:
    return quants.dequantize(raw_rows(table, ids), T.IQ4_NL).astype(dtype)


def test_clean_raw_and_decoded_captures(ple: Table, tmp_path: Path) -> None:
    for name, data in (("raw.npz", raw_rows(ple, IDS)), ("f16.npz", decoded_rows(ple, IDS, np.float16)),
                       ("f32.npz", decoded_rows(ple, IDS, np.float32))):
        np.savez(tmp_path / name, ids=np.array(IDS), rows=data)
        report = R.check_rows(ple.path, against=str(tmp_path / name), modes=())
        assert report.ok and report.capture.rows == 5 and report.capture.mismatched_rows == 0
        assert report.rows_checked == 5 and report.selection == "capture IDs"
        assert report.capture.kind == ("raw" if name == "raw.npz" else "decoded")
        if name != "raw.npz":
            assert report.capture.max_abs_diff == 0.0


def test_raw_capture_with_one_corrupted_row(ple: Table, tmp_path: Path) -> None:
    data = raw_rows(ple, IDS)
    data[2, 18 * 3 + 7] ^= 0x40  # row 4162, block 3, a quant byte
    np.savez(tmp_path / "cap.npz", ids=np.array(IDS), rows=data)
    report = R.check_rows(ple.path, against=str(tmp_path / "cap.npz"), modes=())
    (m,) = report.mismatches
    good = quants.dequantize(np.frombuffer(ple.row(4162), np.uint8), T.IQ4_NL)
    bad = quants.dequantize(data[2], T.IQ4_NL)
    column = int(np.flatnonzero(good != bad)[0])
    assert (m.mode, m.row, m.block, m.column, m.byte) == ("capture", 4162, 3, column, 61)
    assert m.offset == ple.offset(4162) + 61 and m.row_offset == ple.offset(4162)
    assert m.expected.split()[0] == f"{ple.row(4162)[61]:02x}" and m.actual.split()[0] == f"{data[2, 61]:02x}"
    assert (m.kind, m.differing, m.expected_finite, m.actual_finite) == ("garbage", 1, True, True)
    assert report.capture.mismatched_rows == 1


def test_raw_capture_stale_misplaced_and_zero_tail(ple: Table, tmp_path: Path) -> None:
    data = raw_rows(ple, IDS)
    data[3] = data[2]                                          # 4163 holds 4162: the previous gather
    data[1] = np.frombuffer(ple.row(80), np.uint8)             # 77 holds row 80
    data[4, 50:] = 0                                           # 4999 stops at byte 50
    np.savez(tmp_path / "cap.npz", ids=np.array(IDS), rows=data)
    report = R.check_rows(ple.path, against=str(tmp_path / "cap.npz"), modes=())
    got = {m.row: m for m in report.mismatches}
    assert (got[4163].kind, got[77].kind, got[4999].kind) == ("stale", "misplaced", "short-read")
    assert got[77].other_row == 80
    assert got[4999].offset >= ple.offset(4999) + 50 and got[4999].detail.startswith("zeros from offset")


def test_decoded_capture_with_a_nan(ple: Table, tmp_path: Path) -> None:
    data = decoded_rows(ple, IDS, np.float16)
    expected_bits = int(data[2, 97:98].view(np.uint16)[0])
    data[2, 97] = np.nan
    np.savez(tmp_path / "cap.npz", ids=np.array(IDS), emb=data)
    report = R.check_rows(ple.path, against=str(tmp_path / "cap.npz"), modes=())
    (m,) = report.mismatches
    assert (m.row, m.block, m.column, m.byte, m.offset) == (4162, 3, 97, 54, ple.offset(4162) + 54)
    assert (m.expected, m.actual) == (f"{expected_bits:04x}", "7e00")
    assert (m.expected_finite, m.actual_finite, m.unit, m.differing) == (True, False, "values", 1)
    assert f"stored block: {ple.row(4162)[54:72].hex(' ')}" in m.detail
    # NaN beside equal numbers is an unbounded difference, never "max abs diff 0"; the NaN's place is named.
    assert (report.capture.max_abs_diff, m.max_abs_diff, m.actual_nonfinite) == (None, None, RowPlace(3, 97))
    assert describe_row_mismatch(m)[5] == ("  1 value differs; decoded row finite: expected yes, actual no "
                                           "(first NaN/Inf at block 3, column 97)")
    capture_line = next(line for line in report.summary().lines if line.startswith("capture "))
    assert capture_line.endswith(": 5 decoded rows (float16), 1 differs, max abs diff unbounded (a NaN or Inf differs)")


def test_decoded_capture_stale_misplaced_and_zero_tail(ple: Table, tmp_path: Path) -> None:
    data = decoded_rows(ple, IDS, np.float32)
    data[3] = data[2]                                  # 4163 holds the values of 4162, gathered just before
    data[0] = decoded_rows(ple, [9], np.float32)[0]    # 5 holds the values of row 9
    data[4, 40:] = 0                                   # 4999 stops at column 40
    np.savez(tmp_path / "cap.npz", ids=np.array(IDS), rows=data)
    report = R.check_rows(ple.path, against=str(tmp_path / "cap.npz"), modes=())
    got = {m.row: m for m in report.mismatches}
    assert (got[4163].kind, got[5].kind, got[4999].kind) == ("stale", "misplaced", "short-read")
    assert (got[5].other_row, got[5].other_offset) == (9, ple.offset(9))
    assert got[4999].column == 40 and got[4999].block == 1 and got[4999].actual == "00000000"
    # The bytes' words, said of values: one vocabulary for both forms.
    assert [got[r].detail.split("; stored block: ")[0] for r in (4163, 5, 4999)] == [
        "the values of the previous row gathered into the same buffer", "the values of row 9",
        "zeros from column 40 on: the read stopped there"]


def test_decoded_and_raw_captures_look_as_far_for_where_a_row_came_from(ple: Table, tmp_path: Path) -> None:
    """Row 5 holds row 600's content (600 rows, 53 KB away: within 64 KiB) and row 77 holds values found
    nowhere: raw and decoded captures name the same source and say the same kinds."""
    def f32_rows(table: Table, ids: list[int]) -> np.ndarray:
        return decoded_rows(table, ids, np.float32)

    for name, rows_of in (("raw", raw_rows), ("decoded", f32_rows)):
        rows = rows_of(ple, IDS)
        rows[0] = rows_of(ple, [600])[0]
        rows[1, 1::2] = rows[1, ::2][:rows.shape[1] // 2]   # every odd byte or value copied from the even one
        np.savez(tmp_path / f"{name}.npz", ids=np.array(IDS), rows=rows)
        report = R.check_rows(ple.path, against=str(tmp_path / f"{name}.npz"), modes=())
        got = {m.row: m for m in report.mismatches}
        unit = "bytes" if name == "raw" else "values"
        assert (got[5].kind, got[5].other_row, got[5].other_offset) == ("misplaced", 600, ple.offset(600)), name
        assert got[5].detail.startswith(f"the {unit} of row 600") and got[5].unit == unit
        assert (got[77].kind, got[77].other_row, got[77].unit) == ("garbage", None, unit)
        assert got[77].detail.startswith(f"{unit} found nowhere near the row")
        assert report.by_kind == (("misplaced", 1), ("garbage", 1))


def test_decoded_capture_off_by_a_little_reports_max_abs_diff(ple: Table, tmp_path: Path) -> None:
    data = decoded_rows(ple, IDS, np.float32)
    data[0, 3] += 0.5
    np.savez(tmp_path / "cap.npz", ids=np.array(IDS), rows=data)
    report = R.check_rows(ple.path, against=str(tmp_path / "cap.npz"), modes=())
    (m,) = report.mismatches
    assert (m.row, m.column, m.block) == (5, 3, 0)
    assert report.capture.max_abs_diff == pytest.approx(0.5)


def test_structured_npy_capture_and_capture_with_modes(ple: Table, tmp_path: Path) -> None:
    rows = raw_rows(ple, IDS)
    arr = np.zeros(len(IDS), dtype=[("ids", "<i8"), ("rows", "u1", (90,))])
    arr["ids"], arr["rows"] = IDS, rows
    np.save(tmp_path / "cap.npy", arr)
    report = R.check_rows(ple.path, against=str(tmp_path / "cap.npy"), modes=["mmap"])
    assert report.ok and report.capture.rows == 5 and report.stats[0].rows == 5


def test_fp8_i8_table_finiteness(tmp_path: Path) -> None:
    table = make_table(tmp_path, T.I8, ne0=160, n_rows=50, name="per_layer_token_embd.weight")
    data = raw_rows(table, [3, 4])
    data[1, 17] = 0x7F  # FP8 E4M3 NaN
    np.savez(tmp_path / "cap.npz", ids=np.array([3, 4]), rows=data)
    plain = R.check_rows(table.path, against=str(tmp_path / "cap.npz"), modes=())
    fp8 = R.check_rows(table.path, against=str(tmp_path / "cap.npz"), modes=(), options=R.RowsOptions(fp8=True))
    assert (plain.mismatches[0].actual_finite, fp8.mismatches[0].actual_finite) == (True, False)
    assert (fp8.mismatches[0].row, fp8.mismatches[0].column, fp8.mismatches[0].expected_finite) == (4, 17, True)


@pytest.mark.parametrize("ids,rows,message", [
    ([1, 2], np.zeros((2, 91), np.uint8), "expected uint8[2, 90] (raw) or float16/float32[2, 160]"),
    ([1, 5000], np.zeros((2, 90), np.uint8), "ids must lie in 0..4999"),
    ([[1, 2]], np.zeros((2, 90), np.uint8), "ids must be a 1-D integer array"),
    ([1, 2], np.zeros((2, 160), np.float64), "rows are float64[2, 160]"),
])
def test_bad_captures(ple: Table, tmp_path: Path, ids: list, rows: np.ndarray, message: str) -> None:
    np.savez(tmp_path / "cap.npz", ids=np.array(ids), rows=rows)
    with pytest.raises(UsageError) as info:
        R.check_rows(ple.path, against=str(tmp_path / "cap.npz"), modes=())
    assert message in str(info.value) and str(tmp_path / "cap.npz") in str(info.value)


def test_unreadable_and_ambiguous_captures(ple: Table, tmp_path: Path) -> None:
    (tmp_path / "junk.npz").write_bytes(b"not a zip")
    with pytest.raises(UsageError, match="cannot load the capture"):
        R.check_rows(ple.path, against=str(tmp_path / "junk.npz"), modes=())
    np.savez(tmp_path / "two.npz", ids=np.array([1]), a=np.zeros((1, 90), np.uint8), b=np.zeros((1, 90), np.uint8))
    with pytest.raises(UsageError, match="exactly one rows array"):
        R.check_rows(ple.path, against=str(tmp_path / "two.npz"), modes=())
    np.save(tmp_path / "plain.npy", np.zeros((1, 90), np.uint8))
    with pytest.raises(UsageError, match="structured array"):
        R.check_rows(ple.path, against=str(tmp_path / "plain.npy"), modes=())


def test_an_npz_capture_too_big_for_memory_is_refused_from_its_header(ple, tmp_path: Path) -> None:
    """A .npz member is read whole, and a few compressed bytes may inflate to gigabytes: its header says
    how big it is before numpy reads it. This one claims 2^40 rows and holds none."""
    path = tmp_path / "bomb.npz"
    with zipfile.ZipFile(path, "w") as z:
        for name, shape in (("ids", (3,)), ("rows", (1 << 40, ple.tensor.row_bytes))):
            header = io.BytesIO()
            np.lib.format.write_array_header_1_0(header, {"descr": "|u1" if name == "rows" else "<i8",
                                                          "fortran_order": False, "shape": shape})
            z.writestr(f"{name}.npy", header.getvalue() + (bytes(24) if name == "ids" else b""))
    with pytest.raises(UsageError) as err:
        R.check_rows(ple.path, against=str(path))
    assert err.value.field == "rows"
    assert str(err.value) == (f"{path}: rows: `rows` would take {(1 << 40) * ple.tensor.row_bytes} bytes in memory "
                              f"(more than {MAX_NPZ_BYTES}); save the capture as a structured .npy, which is read "
                              "memory-mapped")
