"""Wording of the text report: floats as the shortest text of their stored width, elements of float
tensors said by column (never block or field), and diff showing the differing bytes marked within the
block with the values they change, decoded."""

from __future__ import annotations

import json
import math
from importlib import resources
from pathlib import Path

import numpy as np
import pytest
from gguf import GGMLQuantizationType as T
from jsonschema import Draft202012Validator

from ggaudit.wording import format_value
from ggaudit.format.build import TensorSpec, write_gguf
from ggaudit.verify.diff import diff_paths

from support import run_cli

VALIDATOR = Draft202012Validator(json.loads(
    resources.files("ggaudit").joinpath("schema/cli-output.schema.json").read_text("utf-8")))


@pytest.mark.parametrize(("value", "encoding", "shown"), [
    (float(np.float32(1e-6)), "f32", "1e-06"),              # not 9.999999974752427e-07
    (float(np.float32(1.1)), "f32", "1.1"),
    (float(np.float32(7.92e6)), "f32", "7.92e+06"),
    (float(np.float16(0.1)), "f16", "0.1"),                 # 0.0999755859375 as f16
    (float(np.float16(65504)), "f16", "65504"),             # integer digits in full below a million
    (-30.0, "f32", "-30"), (float(np.float32(123456.7)), "f32", "123456.7"), (999999.0, None, "999999"),
    (1e6, None, "1e+06"), (float(np.float32(0.001)), "f32", "0.001"),
    (float(np.float32(0.1)), None, "0.10000000149011612"),  # no width given: exact as float64
    (0.5, None, "0.5"),
    (math.nan, "f32", "nan"), (math.inf, "f16", "+inf"), (-math.inf, None, "-inf"), (None, "f32", "-"),
])
def test_floats_are_the_shortest_text_of_their_width(value: float | None, encoding: str | None, shown: str) -> None:
    assert format_value(value, encoding) == shown


def test_bfloat16_reads_back_exactly() -> None:
    stored = float(np.uint32(0x3DCD0000).view(np.float32))     # bf16 0x3dcd: nearest to 0.1
    assert format_value(stored, "bf16") == "0.1"
    assert format_value(stored) == "0.10009765625"


def test_a_value_not_of_the_width_given_is_shown_exactly() -> None:
    assert format_value(0.1, "f16") == "0.1" and format_value(0.1 + 2 ** -40, "f32") == repr(0.1 + 2 ** -40)


def test_outlier_in_an_f32_tensor_names_its_column_and_shortest_value(tmp_path: Path) -> None:
    values = np.zeros(8, "<f4")
    values[3] = np.float32(1.1)
    model = tmp_path / "m.gguf"
    offsets = write_gguf(model, [TensorSpec("norm.weight", T.F32, (8,), values.tobytes())])
    result = run_cli(["scan", model, "--max-abs", "0.5"])
    assert result.exit_code == 1
    assert result.stdout.splitlines()[1:3] == [
        "tensor norm.weight (F32 [8]): nan 0, +inf 0, -inf 0, outlier 1; max finite |x| 1.1",
        f"  outlier at file {model} offset {offsets['norm.weight'] + 12}, length 4: tensor norm.weight, row 0, "
        "column 3: expected |x| <= 0.5, got 0x3f8ccccd (1.1)"]


def test_a_finding_in_a_quantized_block_keeps_block_and_field(tmp_path: Path) -> None:
    block = bytearray(34)                       # Q8_0: f16 d, then 32 int8
    block[0:2] = (0x7E00).to_bytes(2, "little")
    model = tmp_path / "q.gguf"
    offsets = write_gguf(model, [TensorSpec("q.weight", T.Q8_0, (64,), bytes(34) + bytes(block))])
    lines = run_cli(["scan", model]).stdout.splitlines()
    assert lines[2] == (f"  nan at file {model} offset {offsets['q.weight'] + 34}, length 2: tensor q.weight, row 0, "
                        "block 1, columns 32..63, field d: expected finite, got 0x7e00 (nan)")
    assert lines[-1] == "result: findings in 1 of 1 tensor: nan 1, +inf 0, -inf 0, outlier 0"


# --- diff ------------------------------------------------------------------------------------------

Q6K = 210


def _q6k_block(d: int = 0x3C00) -> bytearray:
    """A Q6_K block: ql and qh zero (every q is -32), the 16 int8 scales 1, f16 d at byte 208 (1.0)."""
    block = bytearray(Q6K)
    block[192:208] = bytes([1] * 16)
    block[208:210] = d.to_bytes(2, "little")
    return block


def _q6k_pair(tmp_path: Path, change: dict[int, int]) -> tuple[Path, Path, int]:
    """Two models of one Q6_K tensor of 2 rows; in B, row 1's block has ``change`` (byte: value)."""
    a_rows = bytes(_q6k_block()) * 2
    b_row = _q6k_block()
    for at, value in change.items():
        b_row[at] = value
    a, b = tmp_path / "a.gguf", tmp_path / "b.gguf"
    offsets = write_gguf(a, [TensorSpec("output.weight", T.Q6_K, (256, 2), a_rows)])
    write_gguf(b, [TensorSpec("output.weight", T.Q6_K, (256, 2), bytes(_q6k_block()) + bytes(b_row))])
    return a, b, offsets["output.weight"] + Q6K


def test_q6k_scale_change_is_marked_and_decoded(tmp_path: Path) -> None:
    a, b, at = _q6k_pair(tmp_path, {209: 0x40})          # d: 1.0 -> 2.0
    result = run_cli(["diff", a, b])
    assert result.exit_code == 1
    assert result.stdout.splitlines()[2:] == [
        "DIFFER tensor output.weight (Q6_K [256, 2]): 1 of 2 rows differs",
        "  first at row 1, block 0, columns 0..255, byte 209 of the 210-byte block",
        f"  a: file {a}, offset {at}, length 210",
        f"  b: file {b}, offset {at}, length 210",
        "  expected (a) +208: 00 3c",
        "  actual   (b) +208: 00 40",
        "                        ^^",
        "  field d (scales columns 0..255, f16): 1 -> 2",
        "summary: 0 identical, 1 differs, 0 changed type or shape, 0 only in a, 0 only in b, 0 metadata keys differ, "
        "0 structure differences"]
    (change,) = diff_paths(a, b).data_diffs[0].first.changes
    assert (change.what, change.name, change.column, change.columns, change.encoding, change.a, change.b) == (
        "field", "d", 0, 256, "f16", 1.0, 2.0)


def test_q6k_quant_bytes_show_the_dequantized_elements(tmp_path: Path) -> None:
    # ql byte 0 holds element 0 (low nibble) and 64 (high); byte 100, of the second half, 164 and 228.
    a, b, _ = _q6k_pair(tmp_path, {0: 0x01, 100: 0x20})
    lines = run_cli(["diff", a, b]).stdout.splitlines()
    zeros = " ".join(["00"] * 16)
    assert lines[6:] == [
        f"  expected (a) +0 : {zeros}",
        f"  actual   (b) +0 : 01 {' '.join(['00'] * 15)}",
        "                    ^^",
        "  ...",
        f"  expected (a) +96: {zeros}",
        f"  actual   (b) +96: 00 00 00 00 20 {' '.join(['00'] * 11)}",
        "                                ^^",
        "  dequantized: 2 of 256 columns differ",
        "    column 0: -32 -> -31",
        "    column 228: -32 -> -30",
        "summary: 0 identical, 1 differs, 0 changed type or shape, 0 only in a, 0 only in b, 0 metadata keys differ, "
        "0 structure differences"]
    first = diff_paths(a, b).data_diffs[0].first
    assert first.decoded_differing == 2
    assert [(c.what, c.column, c.encoding, c.a, c.b) for c in first.changes] == [
        ("decoded", 0, "f32", -32.0, -31.0), ("decoded", 228, "f32", -32.0, -30.0)]


def test_many_differing_bytes_show_four_lines_then_a_count(tmp_path: Path) -> None:
    a, b, _ = _q6k_pair(tmp_path, {i: 0x11 for i in range(0, 128, 8)})     # 16 bytes, one every 8
    lines = run_cli(["diff", a, b]).stdout.splitlines()
    assert [line[:20] for line in lines if line.startswith("  expected (a)")] == [
        "  expected (a) +0 : ", "  expected (a) +16: ", "  expected (a) +32: ", "  expected (a) +48: "]
    assert "  ... and 8 more differing bytes, up to byte 120 (--json has the whole block)" in lines
    # Each byte 0x11 holds two elements (low and high nibble, 64 columns apart): 32 of them change.
    assert lines[-7:-1] == ["  dequantized: 32 of 256 columns differ", "    column 0: -32 -> -31",
                            "    column 8: -32 -> -31", "    column 16: -32 -> -31", "    column 24: -32 -> -31",
                            "    ... and 28 more (--json lists the first 4 too; dequantize the block for all)"]


def test_nan_in_a_float_element_is_in_json_as_text(tmp_path: Path) -> None:
    a, b = tmp_path / "a.gguf", tmp_path / "b.gguf"
    values = np.arange(4, dtype="<f2")
    write_gguf(a, [TensorSpec("t", T.F16, (4,), values.tobytes())])
    values[2] = np.float16("nan")
    write_gguf(b, [TensorSpec("t", T.F16, (4,), values.tobytes())])
    result = run_cli(["diff", a, b])
    assert result.stdout.splitlines()[2:4] == ["DIFFER tensor t (F16 [4]): 1 of 1 row differs",
                                               "  first at row 0, column 2, byte 1 of the 2-byte element"]
    assert "  value at column 2 (f16): 2 -> nan" in result.stdout.splitlines()
    doc = json.loads(run_cli(["diff", a, b, "--json"]).stdout)
    assert VALIDATOR.is_valid(doc), list(VALIDATOR.iter_errors(doc))[:1]
    assert doc["models"][0]["data_diffs"][0]["first"]["changes"] == [
        {"what": "element", "name": "value", "column": 2, "columns": 1, "encoding": "f16", "a": 2.0, "b": "nan"}]
