"""`diff A B`: tensors only in one, type/shape changes, and the exact first differing byte."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from gguf import GGMLQuantizationType as T, GGUFValueType as V

from ggaudit.format.build import TensorSpec, Typed, write_gguf
from ggaudit.cli import main
from ggaudit.verify.diff import diff_models, diff_paths
from ggaudit.verify.diff_meta import diff_metadata
from ggaudit.errors import ReadError
from ggaudit.format.layout import open_gguf, open_model

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
    # B holds the same tensors in the other order, so their data sits at other offsets than in A.
    offs_b = write_gguf(b, _specs()[::-1], {"general.architecture": "llama"})
    return a, b, offs_a, offs_b


def test_identical_data_is_same_even_at_other_offsets(pair: tuple[Path, Path, dict, dict]) -> None:
    a, b, offs_a, offs_b = pair
    assert offs_a["token_embd.weight"] != offs_b["token_embd.weight"]
    report = diff_paths(a, b)
    assert report.ok
    assert report.identical == ("token_embd.weight", "blk.0.attn_norm.weight", "blk.0.ffn_up.weight")


def test_flipped_byte_reports_exact_position_and_raw_blocks(pair: tuple[Path, Path, dict, dict]) -> None:
    a, b, offs_a, offs_b = pair
    row, block, in_block = 17, 1, 5                 # byte 5 of block 1 of row 17: the dmin/scales area
    rel = row * Q4K_ROW + block * 144
    _flip(b, offs_b["token_embd.weight"] + rel + in_block, 0x40)
    _flip(b, offs_b["token_embd.weight"] + 25 * Q4K_ROW, 0x01)      # a second differing row
    report = diff_paths(a, b)
    assert not report.ok
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
    offs_a = write_gguf(tmp_path / "a.gguf", specs)
    changed = [
        TensorSpec("token_embd.weight", T.Q8_0, (512, 30), bytes(30 * 16 * 34)),
        TensorSpec("blk.0.attn_norm.weight", T.F32, (32,), bytes(128)),
        TensorSpec("blk.1.new.weight", T.F32, (4,), bytes(16)),
    ]
    offs_b = write_gguf(tmp_path / "b.gguf", changed)
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
        # Other tensors make another header and another data section: said, not hidden.
        f"CHANGED structure file: data offset {offs_a['token_embd.weight']} -> {offs_b['token_embd.weight']}, "
        f"size {(tmp_path / 'a.gguf').stat().st_size} -> {(tmp_path / 'b.gguf').stat().st_size}",
        f"  a: file {tmp_path / 'a.gguf'}",
        f"  b: file {tmp_path / 'b.gguf'}",
        "summary: 0 identical, 0 differ, 2 changed type or shape, 1 only in a, 1 only in b, 0 metadata keys differ, "
        "1 structure difference",
    ]


def test_cli_text_json_and_exit_codes(pair: tuple[Path, Path, dict, dict]) -> None:
    a, b, offs_a, offs_b = pair
    runner = CliRunner()
    same = runner.invoke(main, ["diff", str(a), str(b)])
    assert same.exit_code == 0 and same.output.splitlines()[-1] == (
        "summary: 3 identical, 0 differ, 0 changed type or shape, 0 only in a, 0 only in b, 0 metadata keys differ, "
        "0 structure differences")
    off_b = offs_b["blk.0.attn_norm.weight"] + 4 * 9 + 3
    before, after = _flip(b, off_b, 0xFF)
    res = runner.invoke(main, ["diff", str(a), str(b)])
    assert res.exit_code == 1
    lines = res.output.splitlines()
    raw_a = a.read_bytes()[offs_a["blk.0.attn_norm.weight"] + 36:][:4]
    raw_b = raw_a[:3] + bytes([after])
    assert lines[2:] == [
        "DIFFER tensor blk.0.attn_norm.weight (F32 [64]): 1 of 1 row differs",
        "  first at row 0, column 9, byte 3 of the 4-byte element",
        f"  a: file {a}, offset {offs_a['blk.0.attn_norm.weight'] + 36}, length 4",
        f"  b: file {b}, offset {offs_b['blk.0.attn_norm.weight'] + 36}, length 4",
        f"  expected (a) +0: {raw_a.hex(' ')}",
        f"  actual   (b) +0: {raw_b.hex(' ')}",
        "                            ^^",
        "  value at column 9 (f32): -0.34152195 -> 21.857405",
        "summary: 2 identical, 1 differs, 0 changed type or shape, 0 only in a, 0 only in b, 0 metadata keys differ, "
        "0 structure differences",
    ]
    # The values shown are the stored float32s, each the shortest text that reads back as it.
    assert (np.frombuffer(raw_a, "<f4")[0], np.frombuffer(raw_b, "<f4")[0]) == (np.float32("-0.34152195"),
                                                                                np.float32("21.857405"))
    assert raw_a[3] == before
    envelope = json.loads(runner.invoke(main, ["diff", str(a), str(b), "--json"]).output)
    assert envelope["status"] == "findings" and len(envelope["models"]) == 1
    doc = envelope["models"][0]
    assert (doc["schema"], doc["ok"], doc["a"], doc["b"]) == ("ggaudit/diff-report/1", False, str(a), str(b))
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


# --- metadata ---------------------------------------------------------------------------------------

class _WholeFileReads:
    """diff's read function, served from one read of each whole file: the 7-byte walk below is of the chunked
    comparison, and a file opened per read (12k of them) cost 36 s under Wine."""

    def __init__(self) -> None:
        self.held: dict[str, bytes] = {}

    def __call__(self, path: str, offset: int, length: int) -> bytes:
        if path not in self.held:
            self.held[path] = Path(path).read_bytes()
        return self.held[path][offset:offset + length]


def _meta_pair(tmp_path: Path, meta_a: dict, meta_b: dict) -> tuple[Path, Path]:
    a, b = tmp_path / "a.gguf", tmp_path / "b.gguf"
    tensor = [TensorSpec("output_norm.weight", T.F32, (4,), bytes(16))]
    write_gguf(a, tensor, meta_a)
    write_gguf(b, tensor, meta_b)
    return a, b


TOKENS = [f"t{i}" for i in range(5000)]


def test_metadata_differences_key_by_key_with_the_first_differing_element(tmp_path: Path) -> None:
    tokens_b = list(TOKENS)
    tokens_b[1234] = "T1234!"
    scores = [float(i) for i in range(300)]
    scores_b = [*scores[:77], -1.5, *scores[78:]]
    a, b = _meta_pair(tmp_path, {
        "general.architecture": "llama", "general.name": "tiny", "only.a": "x",
        "tokenizer.ggml.tokens": Typed(V.STRING, TOKENS, is_array=True),
        "tokenizer.ggml.scores": Typed(V.FLOAT32, scores, is_array=True), "retyped": 7,
    }, {
        "general.architecture": "llama", "general.name": "small",
        "tokenizer.ggml.tokens": Typed(V.STRING, tokens_b, is_array=True),
        "tokenizer.ggml.scores": Typed(V.FLOAT32, scores_b, is_array=True), "retyped": Typed(V.INT32, 7),
        "only.b": True,
    })
    report = diff_paths(a, b)
    assert not report.ok and not report.data_diffs and report.identical == ("output_norm.weight",)
    got = [(c.key, c.what, c.type_a, c.type_b, c.element, c.element_a, c.element_b) for c in report.metadata]
    assert got == [
        ("general.name", "value", "string", "string", None, None, None),
        ("only.a", "only-in-a", "string", None, None, None, None),
        ("tokenizer.ggml.tokens", "value", "array of string", "array of string", 1234, "t1234", "T1234!"),
        ("tokenizer.ggml.scores", "value", "array of float32", "array of float32", 77, 77.0, -1.5),
        ("retyped", "type", "uint32", "int32", None, None, None),
        ("only.b", "only-in-b", None, "bool", None, None, None),
    ]
    name = report.metadata[0]
    meta_a, meta_b = open_model(a).metadata, open_model(b).metadata
    assert (name.value_a, name.value_b) == ("tiny", "small")
    assert (name.offset_a, name.offset_b) == (meta_a["general.name"].offset, meta_b["general.name"].offset)
    # Walking the strings in 7-byte reads finds the same element as in 1 MiB ones.
    assert diff_metadata(open_gguf(a), open_gguf(b), _WholeFileReads(), chunk_bytes=7) == report.metadata

    res = CliRunner().invoke(main, ["diff", str(a), str(b)])
    assert res.exit_code == 1
    assert res.output.splitlines()[2:8] == [
        "CHANGED metadata general.name: value: 'tiny' -> 'small'",
        "ONLY-IN-A metadata only.a (string) = 'x'",
        "CHANGED metadata tokenizer.ggml.tokens: value: [string x 5000] ['t0', 't1', 't2', 't3', 't4', 't5', 't6', "
        "'t7', 't8', 't9', 't10', 't11', 't12', 't13', 't14', 't15', ...] -> [string x 5000] ['t0', 't1', 't2', "
        "'t3', 't4', 't5', 't6', 't7', 't8', 't9', 't10', 't11', 't12', 't13', 't14', 't15', ...], "
        "first at element 1234: 't1234' -> 'T1234!'",
        "CHANGED metadata tokenizer.ggml.scores: value: [float32 x 300] [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, "
        "8.0, 9.0, 10.0, 11.0, 12.0, 13.0, 14.0, 15.0, ...] -> [float32 x 300] [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, "
        "7.0, 8.0, 9.0, 10.0, 11.0, 12.0, 13.0, 14.0, 15.0, ...], first at element 77: 77.0 -> -1.5",
        "CHANGED metadata retyped: type: uint32 -> int32",
        "ONLY-IN-B metadata only.b (bool) = True",
    ]
    assert res.output.splitlines()[-1].endswith(", 6 metadata keys differ, 0 structure differences")
    doc = json.loads(CliRunner().invoke(main, ["diff", str(a), str(b), "--json"]).output)["models"][0]
    assert doc["metadata"][2]["element"] == 1234 and doc["metadata"][2]["value_a"]["count"] == 5000
    assert (doc["metadata"][3]["element_a"], doc["metadata"][3]["element_b"]) == (77.0, -1.5)


def test_arrays_equal_as_far_as_both_go_differ_at_the_shorter_count(tmp_path: Path) -> None:
    a, b = _meta_pair(tmp_path, {"tokens": Typed(V.STRING, TOKENS[:100], is_array=True),
                                 "ids": Typed(V.UINT32, list(range(10)), is_array=True)},
                      {"tokens": Typed(V.STRING, TOKENS[:101], is_array=True),
                       "ids": Typed(V.UINT32, list(range(9)), is_array=True)})
    report = diff_paths(a, b)
    assert [(c.key, c.element, c.element_a, c.element_b) for c in report.metadata] == [
        ("tokens", 100, None, "t100"), ("ids", 9, 9, None)]
    lines = CliRunner().invoke(main, ["diff", str(a), str(b)]).output.splitlines()
    assert lines[2].endswith(", first at element 100: (none) -> 't100'")
    assert lines[3].endswith(", first at element 9: 9 -> (none)")


def test_same_metadata_in_another_order_of_keys_is_same(tmp_path: Path) -> None:
    a, b = _meta_pair(tmp_path, {"general.architecture": "llama", "general.name": "tiny"},
                      {"general.name": "tiny", "general.architecture": "llama"})
    assert diff_paths(a, b).ok
