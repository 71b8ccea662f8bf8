"""``ggaudit info``: text and JSON output, escaping, split sets and exit codes."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
from click.testing import CliRunner
from gguf import GGMLQuantizationType as T

import ggaudit
from ggaudit.format.build import TensorSpec, write_gguf
from ggaudit.cli import main

from ollama_support import ollama_store


def _model(path: Path, name: str = "blk.0.attn_q.weight") -> dict[str, int]:
    rng = np.random.default_rng(1)
    tensors = [
        TensorSpec(name, T.F32, (8, 3), rng.standard_normal(24).astype("<f4").tobytes()),
        TensorSpec("blk.0.ffn.weight", T.Q8_0, (64, 2), bytes(2 * 2 * 34)),
    ]
    return write_gguf(path, tensors, {"general.architecture": "llama", "general.name": "tiny",
                                      "tokenizer.ggml.tokens": ["'", "it's", "a\\b"]})


def test_info_text_lists_tensors_with_offsets(tmp_path: Path) -> None:
    path = tmp_path / "m.gguf"
    offsets = _model(path)
    result = CliRunner().invoke(main, ["info", str(path)])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert "architecture: llama" in lines
    assert "  general.name (string) = 'tiny'" in lines
    assert "  tokenizer.ggml.tokens (array) = [string x 3] ['\\'', 'it\\'s', 'a\\\\b']" in lines
    row = next(line for line in lines if line.startswith("  blk.0.attn_q.weight"))
    assert row.split() == ["blk.0.attn_q.weight", "F32", "8x3", str(offsets["blk.0.attn_q.weight"]), "96"]
    assert "  Q8_0                136" in lines


def test_info_json_has_documented_keys(tmp_path: Path) -> None:
    path = tmp_path / "m.gguf"
    offsets = _model(path)
    result = CliRunner().invoke(main, ["info", str(path), "--json"])
    assert result.exit_code == 0
    envelope = json.loads(result.output)
    assert (envelope["schema"], envelope["status"], len(envelope["models"])) == ("ggaudit/cli-output/1", "clean", 1)
    doc = envelope["models"][0]
    assert list(doc) == ["schema", "tool_version", "ok", "model", "architecture", "size", "tensor_count", "files",
                         "bytes_per_type", "tensors"]
    assert (doc["schema"], doc["tool_version"], doc["ok"]) == ("ggaudit/info/1", ggaudit.__version__, True)
    assert doc["tensors"][1] == {"name": "blk.0.ffn.weight", "type": "Q8_0", "shape": [64, 2],
                                 "offset": offsets["blk.0.ffn.weight"], "nbytes": 136, "row_bytes": 68,
                                 "rows": 2, "file": str(path)}
    assert doc["files"][0]["metadata"]["general.name"] == {"type": "string", "value": "tiny"}
    assert doc["bytes_per_type"] == {"Q8_0": 136, "F32": 96}


def test_info_escapes_hostile_names_in_text_but_keeps_them_in_json(tmp_path: Path) -> None:
    path = tmp_path / "evil.gguf"
    _model(path, name="\x1b[2J")
    text = CliRunner().invoke(main, ["info", str(path)])
    assert text.exit_code == 0
    assert "\x1b" not in text.output
    assert any(line.startswith("  \\x1b[2J ") for line in text.output.splitlines())
    doc = json.loads(CliRunner().invoke(main, ["info", str(path), "--json"]).output)["models"][0]
    assert doc["tensors"][0]["name"] == "\x1b[2J"


def test_info_summarises_long_arrays(tmp_path: Path) -> None:
    path = tmp_path / "vocab.gguf"
    write_gguf(path, [], {"tokenizer.ggml.tokens": [f"t{i}" for i in range(1000)]})
    result = CliRunner().invoke(main, ["info", str(path)])
    line = next(x for x in result.output.splitlines() if "tokenizer.ggml.tokens" in x)
    assert line.startswith("  tokenizer.ggml.tokens (array) = [string x 1000] ['t0', 't1',")
    assert line.endswith("'t15', ...]")


def test_info_bad_file_is_one_line_exit_2(tmp_path: Path) -> None:
    path = tmp_path / "bad.gguf"
    path.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 1 << 40, 0) + bytes(64))
    result = CliRunner().invoke(main, ["info", str(path)])
    assert result.exit_code == 2
    assert result.output == (f"ggaudit: error: {path}: offset 8: tensor_count: 1099511627776 tensors cannot fit "
                             "in 64 bytes\n")


def test_info_missing_file_and_directory(tmp_path: Path) -> None:
    missing = CliRunner().invoke(main, ["info", str(tmp_path / "nope.gguf")])
    assert missing.exit_code == 2
    assert missing.output == f"ggaudit: error: {tmp_path / 'nope.gguf'}: cannot open: No such file or directory\n"
    folder = CliRunner().invoke(main, ["info", str(tmp_path)])
    assert folder.exit_code == 2
    assert folder.output == f"ggaudit: error: {tmp_path}: is a directory\n"


def test_python_dash_m_runs(tmp_path: Path) -> None:
    import subprocess
    import sys

    path = tmp_path / "m.gguf"
    _model(path)
    proc = subprocess.run([sys.executable, "-m", "ggaudit", "info", str(path)], capture_output=True, text=True)
    assert proc.returncode == 0
    assert proc.stdout.startswith(f"model: {path}\n")


def test_info_of_an_ollama_model_shows_model_then_projector(tmp_path: Path) -> None:
    _model(tmp_path / "m.gguf")
    write_gguf(tmp_path / "p.gguf", [TensorSpec("mm.0.weight", T.F16, (4, 2), bytes(16))],
               {"general.architecture": "clip"})
    model_blob, projector_blob = ollama_store(tmp_path / "store", (tmp_path / "m.gguf").read_bytes(),
                                               (tmp_path / "p.gguf").read_bytes())
    result = CliRunner().invoke(main, ["info", "ollama:tiny", "--store", str(tmp_path / "store"), "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert doc["status"] == "clean"
    assert [(m["model"], m["ok"], m["architecture"]) for m in doc["models"]] == [
        (str(model_blob), True, "llama"), (str(projector_blob), True, "clip")]


def test_info_of_several_models_keeps_going_past_a_bad_one(tmp_path: Path) -> None:
    good = tmp_path / "m.gguf"
    _model(good)
    missing = tmp_path / "gone.gguf"
    result = CliRunner().invoke(main, ["info", str(missing), str(good)])
    assert result.exit_code == 2
    assert result.stderr == f"ggaudit: error: {missing}: cannot open: No such file or directory\n"
    assert f"model: {good}" in result.stdout.splitlines()
