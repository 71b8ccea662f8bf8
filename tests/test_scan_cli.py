"""``ggaudit scan`` on the command line: exit codes, exact text lines, the JSON shape, escaping."""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from gguf import GGMLQuantizationType as T

from ggaudit.format.blocks import LAYOUTS
from ggaudit.format.build import TensorSpec, write_gguf
from ggaudit.cli import main

from scan_support import finite_tensor, poke


def _model(path: Path, *, fault: bool = True, name: str = "blk.0.ffn_down.weight") -> dict[str, int]:
    q4k = LAYOUTS[T.Q4_K]
    data = finite_tensor(T.Q4_K, (512, 3), 1)
    if fault:
        poke(data, q4k, 1 * 2 + 1, q4k.fields[0], 0x7C00)     # row 1, block 1: d = +inf
    return write_gguf(path, [
        TensorSpec("token_embd.weight", T.F32, (8, 2), bytes(finite_tensor(T.F32, (8, 2), 2))),
        TensorSpec(name, T.Q4_K, (512, 3), bytes(data)),
        TensorSpec("ids", T.I32, (4, 1), bytes(16)),
        TensorSpec("q8k", T.Q8_K, (256, 1), bytes(finite_tensor(T.Q8_K, (256, 1), 3))),
    ])


def _run(*args: str) -> tuple[int, list[str], str]:
    result = CliRunner().invoke(main, ["scan", *args])
    return result.exit_code, result.stdout.splitlines(), result.stderr


def test_clean_model_exits_0(tmp_path: Path) -> None:
    path = tmp_path / "m.gguf"
    _model(path, fault=False)
    code, lines, err = _run(str(path))
    assert code == 0 and err == ""
    scanned = 8 * 2 * 4 + 3 * 2 * 144 + 292        # F32 + Q4_K + Q8_K; the I32 tensor is not scanned
    assert lines == [f"model {path}: 4 tensors, {scanned} bytes of tensor data scanned in 1 file",
                     "not applicable (integer data): ids",
                     "result: clean: no non-finite values"]


def test_findings_exit_1_with_a_fio_like_line(tmp_path: Path) -> None:
    path = tmp_path / "m.gguf"
    offsets = _model(path)
    code, lines, err = _run(str(path))
    assert code == 1 and err == ""
    offset = offsets["blk.0.ffn_down.weight"] + 3 * 144
    assert lines[1].startswith("tensor blk.0.ffn_down.weight (Q4_K [512, 3]): nan 0, +inf 1, -inf 0, outlier 0; "
                               "max finite |x| ")
    assert lines[2] == (f"  +inf at file {path} offset {offset}, length 2: tensor blk.0.ffn_down.weight, row 1, "
                        "block 1, columns 256..511, field d: expected finite, got 0x7c00 (+inf)")
    assert lines[-1] == "result: findings in 1 of 4 tensors: nan 0, +inf 1, -inf 0, outlier 0"


def test_json_has_the_documented_shape(tmp_path: Path) -> None:
    path = tmp_path / "m.gguf"
    offsets = _model(path)
    code, lines, err = _run(str(path), "--json", "--deep")
    # A warning says less was checked than asked: on stderr even when it is not a terminal.
    assert code == 1 and err == ("ggaudit: warning: deep: gguf.quants cannot decode Q8_K; 1 tensor of that "
                                 "type checked by block fields only\n")
    envelope = json.loads("\n".join(lines))
    assert (envelope["schema"], envelope["status"], len(envelope["models"])) == ("ggaudit/cli-output/1", "findings", 1)
    doc = envelope["models"][0]
    assert (doc["schema"], doc["ok"], doc["model"]) == ("ggaudit/scan-report/1", False, str(path))
    assert doc["warnings"] == ["deep: gguf.quants cannot decode Q8_K; 1 tensor of that type checked by "
                               "block fields only"]
    names = [t["name"] for t in doc["tensors"]]
    assert names == ["token_embd.weight", "blk.0.ffn_down.weight", "ids", "q8k"]
    t = doc["tensors"][1]
    assert {"name", "type", "counts", "max_abs", "findings"} <= set(t)
    assert t["type"] == "Q4_K" and t["counts"] == {"nan": 0, "+inf": 1, "-inf": 0, "outlier": 0}
    assert isinstance(t["max_abs"], float)
    (finding,) = t["findings"]
    assert {k: finding[k] for k in ("kind", "row", "column", "block", "field", "offset", "bits")} == {
        "kind": "+inf", "row": 1, "column": 256, "block": 1, "field": "d",
        "offset": offsets["blk.0.ffn_down.weight"] + 3 * 144, "bits": "0x7c00"}
    assert finding["value"] is None and finding["width"] == 256
    assert doc["tensors"][2]["check"] == "not applicable" and doc["tensors"][2]["max_abs"] is None


def test_clean_json_status_clean(tmp_path: Path) -> None:
    path = tmp_path / "m.gguf"
    _model(path, fault=False)
    code, lines, _ = _run(str(path), "--json")
    doc = json.loads("\n".join(lines))
    assert code == 0 and (doc["status"], doc["models"][0]["ok"]) == ("clean", True)


def test_names_are_escaped_in_text_and_exact_in_json(tmp_path: Path) -> None:
    path = tmp_path / "m.gguf"
    name = "evil\x1b[2J.weight"
    _model(path, name=name)
    code, lines, _ = _run(str(path))
    assert code == 1
    assert any(line.startswith("tensor evil\\x1b[2J.weight (Q4_K") for line in lines)
    assert not any("\x1b" in line for line in lines)
    code, lines, _ = _run(str(path), "--json")
    assert json.loads("\n".join(lines))["models"][0]["tensors"][1]["name"] == name


def test_limit_fail_fast_tensor_and_max_abs(tmp_path: Path) -> None:
    path = tmp_path / "m.gguf"
    _model(path)
    code, lines, _ = _run(str(path), "--max-abs", "0.5", "--limit", "1", "--tensor", "token_embd.*")
    assert code == 1
    assert lines[1].startswith("tensor token_embd.weight (F32 [8, 2]): nan 0, +inf 0, -inf 0, outlier ")
    assert lines[2].startswith("  outlier at file ") and ": expected |x| <= 0.5, got 0x" in lines[2]
    assert lines[3].startswith("  ... ") and lines[3].endswith(" more not listed (--limit)")
    code, lines, _ = _run(str(path), "--fail-fast")
    assert code == 1 and "incomplete: stopped at the first finding (--fail-fast)" in lines


@pytest.mark.parametrize("args,message", [
    (["--as", "ids"], "--as: --as takes NAME=fp8_e4m3, not 'ids'"),
    (["--as", "ids=fp16"], "--as: --as takes NAME=fp8_e4m3, not 'ids=fp16'"),
    (["--as", "ids=fp8_e4m3"], "--as: ids is I32: only an I8 tensor can hold FP8 E4M3 bytes"),
    (["--tensor", "nothing*"], "--tensor: no tensor matches 'nothing*'"),
])
def test_usage_errors_exit_2_with_one_line(tmp_path: Path, args: list[str], message: str) -> None:
    path = tmp_path / "m.gguf"
    _model(path)
    code, lines, err = _run(str(path), *args)
    assert code == 2 and lines == []
    assert err == f"ggaudit: error: {path}: {message}\n"


def test_a_name_in_a_usage_error_is_escaped(tmp_path: Path) -> None:
    path = tmp_path / "m.gguf"
    name = "evil\x1b[2J.weight"
    _model(path, name=name)
    code, lines, err = _run(str(path), "--as", f"{name}=fp8_e4m3")
    assert code == 2 and lines == []
    assert err == (f"ggaudit: error: {path}: --as: evil\\x1b[2J.weight is Q4_K: only an I8 tensor can hold "
                   "FP8 E4M3 bytes\n")


def test_unreadable_input_exits_2(tmp_path: Path) -> None:
    missing = tmp_path / "missing.gguf"
    code, lines, err = _run(str(missing))
    assert code == 2 and lines == [] and err.startswith("ggaudit: error: ") and len(err.splitlines()) == 1
    garbage = tmp_path / "garbage.gguf"
    garbage.write_bytes(b"NOPE" + bytes(60))
    code, _, err = _run(str(garbage))
    assert code == 2 and err == (f"ggaudit: error: {garbage}: offset 0: magic: not a GGUF file (its first bytes are "
                                 "b'NOPE" + "\\x00" * 12 + "'...; a GGUF starts with b'GGUF')\n")


def test_fp8_override_on_the_command_line(tmp_path: Path) -> None:
    path = tmp_path / "m.gguf"
    data = bytearray(range(0x10, 0x30))
    data[9] = 0x7F
    offsets = write_gguf(path, [TensorSpec("per_layer_token_embd.weight", T.I8, (16, 2), bytes(data))])
    code, lines, _ = _run(str(path), "--as", "per_layer_token_embd.weight=fp8_e4m3")
    assert code == 1
    assert lines[2] == (f"  nan at file {path} offset {offsets['per_layer_token_embd.weight'] + 9}, length 1: "
                        "tensor per_layer_token_embd.weight, row 0, column 9: "
                        "expected finite, got 0x7f (nan)")
    assert _run(str(path))[0] == 0


def test_progress_only_on_a_terminal_warnings_always(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "m.gguf"
    _model(path)
    warning = ("ggaudit: warning: deep: gguf.quants cannot decode Q8_K; 1 tensor of that type checked by "
               "block fields only\n")
    code, _, err = _run(str(path), "--deep")
    assert (code, err) == (1, warning)                  # not a terminal: the warning, no progress
    progress = importlib.import_module("ggaudit.cli.progress")
    monkeypatch.setattr(progress, "stderr_is_tty", lambda: True)
    monkeypatch.setattr(progress, "REDRAW_SECONDS", 0.0)     # a frame at every step of this tiny scan
    code, _, err = _run(str(path), "--deep")
    assert code == 1
    frames, _, rest = err.rpartition("\r")
    assert frames.startswith("\rscan  ") and " / " in frames
    assert "ETA" not in err                     # a few KiB in no time: no rate, so no time left is made up
    assert rest == warning and err.count("ggaudit: warning:") == 1      # the line wiped before the warning


def test_ollama_model_scans_the_model_blob_and_the_projector(tmp_path: Path) -> None:
    from ollama_support import ollama_store

    offsets = _model(tmp_path / "m.gguf")
    write_gguf(tmp_path / "p.gguf", [TensorSpec("mm.0.weight", T.F32, (8, 2),
                                                bytes(finite_tensor(T.F32, (8, 2), 4)))])
    model_blob, projector_blob = ollama_store(tmp_path / "store", (tmp_path / "m.gguf").read_bytes(),
                                              (tmp_path / "p.gguf").read_bytes())
    result = CliRunner().invoke(main, ["scan", "ollama:tiny", "--store", str(tmp_path / "store"), "--json"])
    assert result.exit_code == 1, result.output
    doc = json.loads(result.stdout)
    assert doc["status"] == "findings"
    assert [(m["model"], m["ok"]) for m in doc["models"]] == [(str(model_blob), False), (str(projector_blob), True)]
    finding = doc["models"][0]["tensors"][1]["findings"][0]
    q4k = LAYOUTS[T.Q4_K]
    assert (finding["kind"], finding["row"], finding["block"], finding["field"], finding["offset"]) == (
        "+inf", 1, 1, "d", offsets["blk.0.ffn_down.weight"] + 3 * q4k.block_bytes)
