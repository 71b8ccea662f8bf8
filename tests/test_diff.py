"""`diff A B`: tensors only in one, type/shape changes, and the exact first differing byte."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from gguf import GGMLQuantizationType as T

from ggaudit.build import TensorSpec, write_gguf
from ggaudit.cli import main
from ggaudit.diff import diff_models, diff_paths
from ggaudit.errors import ReadError
from ggaudit.layout import open_model

Q4K_ROW = 2 * 144           # 512 columns of Q4_K: 2 blocks of 144 bytes


def _specs() -> list[TensorSpec]:
    rng = np.random.default_rng(11)
    return [
        TensorSpec("token_embd.weight", T.Q4_K, (512, 30), rng.integers(0, 256, 30 * Q4K_ROW, np.uint8).tobytes()),
        TensorSpec("blk.0.attn_norm.weight", T.F32, (64,), rng.standard_normal(64).astype("<f4").tobytes()),
        TensorSpec("blk.0.ffn_up.weight", T.BF16, (32, 8), rng.integers(0, 256, 512, np.uint8).tobytes()),
    ]


def _flip(path: Path, offset: int, mask: int = 0x01) -> tuple[int, int]:
    with open(path, "r+b") as f:
        f.seek(offset)
        before = f.read(1)[0]
        f.seek(offset)
        f.write(bytes([before ^ mask]))
    return before, before ^ mask


@pytest.fixture
def pair(tmp_path: Path) -> tuple[Path, Path, dict[str, int], dict[str, int]]:
    a, b = tmp_path / "a.gguf", tmp_path / "b.gguf"
    offs_a = write_gguf(a, _specs(), {"general.architecture": "llama"})
    # B carries an extra metadata key, so its tensor data sits at other offsets than A's.
    offs_b = write_gguf(b, _specs(), {"general.architecture": "llama", "general.name": "b-copy-with-longer-header"})
    return a, b, offs_a, offs_b


def test_identical_data_is_same_even_at_other_offsets(pair: tuple[Path, Path, dict, dict]) -> None:
    a, b, offs_a, offs_b = pair
    assert offs_a["token_embd.weight"] != offs_b["token_embd.weight"]
    report = diff_paths(a, b)
    assert report.same
    assert report.identical == ("token_embd.weight", "blk.0.attn_norm.weight", "blk.0.ffn_up.weight")


def test_flipped_byte_reports_exact_position_and_raw_blocks(pair: tuple[Path, Path, dict, dict]) -> None:
    a, b, offs_a, offs_b = pair
    row, block, in_block = 17, 1, 5                 # byte 5 of block 1 of row 17: the dmin/scales area
    rel = row * Q4K_ROW + block * 144
    _flip(b, offs_b["token_embd.weight"] + rel + in_block, 0x40)
    _flip(b, offs_b["token_embd.weight"] + 25 * Q4K_ROW, 0x01)      # a second differing row
    report = diff_paths(a, b)
    assert not report.same
    (d,) = report.data_diffs
    assert (d.name, d.ggml_type, d.shape, d.rows_differing, d.n_rows) == ("token_embd.weight", "Q4_K", (512, 30), 2, 30)
    f = d.first
    assert (f.row, f.block, f.column, f.columns, f.byte_in_block) == (17, 1, 256, 256, 5)
    assert (f.offset_a, f.offset_b, f.block_bytes) == (offs_a["token_embd.weight"] + rel,
                                                       offs_b["token_embd.weight"] + rel, 144)
    raw = a.read_bytes()[offs_a["token_embd.weight"] + rel:][:144]
    assert f.raw_a == raw
    assert f.raw_b == raw[:5] + bytes([raw[5] ^ 0x40]) + raw[6:]


def test_float_tensor_difference_names_the_exact_column(pair: tuple[Path, Path, dict, dict]) -> None:
    a, b, _, offs_b = pair
    _flip(b, offs_b["blk.0.ffn_up.weight"] + 3 * 64 + 2 * 13 + 1)  # row 3, column 13, high byte of the bf16
    (d,) = diff_paths(a, b).data_diffs
    assert (d.first.row, d.first.block, d.first.column, d.first.columns, d.first.byte_in_block) == (3, 13, 13, 1, 1)
    assert len(d.first.raw_a) == 2 and d.rows_differing == 1


def test_rows_longer_than_a_chunk_are_counted_once(pair: tuple[Path, Path, dict, dict]) -> None:
    a, b, _, offs_b = pair
    for row in (4, 5, 29):
        _flip(b, offs_b["token_embd.weight"] + row * Q4K_ROW + 200)
        _flip(b, offs_b["token_embd.weight"] + row * Q4K_ROW + 7)
    report = diff_models(open_model(a), open_model(b), chunk_bytes=100)     # 100-byte chunks, 288-byte rows
    (d,) = report.data_diffs
    assert (d.rows_differing, d.first.row, d.first.byte_in_block) == (3, 4, 7)


def test_only_in_one_and_layout_changes(tmp_path: Path) -> None:
    specs = _specs()
    write_gguf(tmp_path / "a.gguf", specs)
    changed = [
        TensorSpec("token_embd.weight", T.Q8_0, (512, 30), bytes(30 * 16 * 34)),
        TensorSpec("blk.0.attn_norm.weight", T.F32, (32,), bytes(128)),
        TensorSpec("blk.1.new.weight", T.F32, (4,), bytes(16)),
    ]
    write_gguf(tmp_path / "b.gguf", changed)
    report = diff_paths(tmp_path / "a.gguf", tmp_path / "b.gguf")
    assert report.only_in_a == ("blk.0.ffn_up.weight",) and report.only_in_b == ("blk.1.new.weight",)
    assert [(c.name, c.what, c.type_a, c.type_b, c.shape_a, c.shape_b) for c in report.layout_changes] == [
        ("token_embd.weight", "type", "Q4_K", "Q8_0", (512, 30), (512, 30)),
        ("blk.0.attn_norm.weight", "shape", "F32", "F32", (64,), (32,))]
    assert report.data_diffs == ()
    lines = CliRunner().invoke(main, ["diff", str(tmp_path / "a.gguf"), str(tmp_path / "b.gguf")]).output.splitlines()
    assert lines[2:] == [
        "ONLY-IN-A tensor blk.0.ffn_up.weight",
        "ONLY-IN-B tensor blk.1.new.weight",
        "CHANGED tensor token_embd.weight: type: Q4_K [512, 30] -> Q8_0 [512, 30]",
        "CHANGED tensor blk.0.attn_norm.weight: shape: F32 [64] -> F32 [32]",
        "summary: 0 identical, 0 differ, 2 changed type or shape, 1 only in a, 1 only in b",
    ]


def test_cli_text_json_and_exit_codes(pair: tuple[Path, Path, dict, dict]) -> None:
    a, b, offs_a, offs_b = pair
    runner = CliRunner()
    same = runner.invoke(main, ["diff", str(a), str(b)])
    assert same.exit_code == 0 and same.output.splitlines()[-1].startswith("summary: 3 identical, 0 differ")
    off_b = offs_b["blk.0.attn_norm.weight"] + 4 * 9 + 3
    before, after = _flip(b, off_b, 0xFF)
    res = runner.invoke(main, ["diff", str(a), str(b)])
    assert res.exit_code == 1
    lines = res.output.splitlines()
    raw_a = a.read_bytes()[offs_a["blk.0.attn_norm.weight"] + 36:][:4]
    raw_b = raw_a[:3] + bytes([after])
    assert lines[2:8] == [
        "DIFFER tensor blk.0.attn_norm.weight (F32 [64]): 1 of 1 rows differ",
        "  first at row 0, block 9, column 9, byte 3 of the 4-byte block",
        f"  a: file {a}, offset {offs_a['blk.0.attn_norm.weight'] + 36}, length 4",
        f"  b: file {b}, offset {offs_b['blk.0.attn_norm.weight'] + 36}, length 4",
        f"  expected (a): {raw_a.hex()}",
        f"  actual   (b): {raw_b.hex()}",
    ]
    assert raw_a[3] == before
    doc = json.loads(runner.invoke(main, ["diff", str(a), str(b), "--json"]).output)
    assert doc["same"] is False
    assert doc["data_diffs"][0]["first"]["raw_b"] == raw_b.hex()


def test_unreadable_input_is_exit_2(tmp_path: Path, pair: tuple[Path, Path, dict, dict]) -> None:
    a, _, _, _ = pair
    res = CliRunner().invoke(main, ["diff", str(a), str(tmp_path / "missing.gguf")])
    assert res.exit_code == 2 and res.stderr.startswith("ggaudit: error: ")
    assert "missing.gguf" in res.stderr


def test_file_rewritten_after_opening_is_a_read_error(pair: tuple[Path, Path, dict, dict]) -> None:
    a, b, _, offs_b = pair
    model_b = open_model(b)
    _flip(b, offs_b["token_embd.weight"])
    os.utime(b, ns=(0, 0))                          # a rewrite in place: same size, new mtime
    with pytest.raises(ReadError, match="file changed"):
        diff_models(open_model(a), model_b)


def test_file_cut_short_after_opening_names_the_offset(pair: tuple[Path, Path, dict, dict]) -> None:
    a, b, _, offs_b = pair
    model_b = open_model(b)
    cut = offs_b["token_embd.weight"] + 10 * Q4K_ROW + 3
    os.truncate(b, cut)
    with pytest.raises(ReadError) as err:
        diff_models(open_model(a), model_b)
    assert (err.value.path, err.value.offset) == (str(b), cut)
    assert "file ended early" in err.value.message and "shrank or was replaced" in err.value.message
