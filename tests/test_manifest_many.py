"""Issue 35, section 3: ``ggaudit manifest`` over many models, as ``scan`` takes them: a split set once however
many of its shards are named, one manifest per model (``-o`` holding ``{name}``), a bad model not stopping
the others, ``--require-clean`` naming the finding that blocked each, one exit for the run (0 every manifest
written, 1 some refused by --require-clean, 2 a model unreadable or a bad command line)."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np
import pytest
from gguf import GGUFReader

from ggaudit.cli.manifest import model_name
from ggaudit.format.blocks import GGMLQuantizationType as T
from ggaudit.format.build import TensorSpec, write_gguf
from ollama_support import ollama_store
from support import assert_one_line_error, run_cli, write_small_model, write_split_set, write_trailing_model


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _nan_model(path: Path) -> Path:
    """One F32 tensor ``a.weight`` of 8 values: element 3 is a NaN, element 5 +Inf."""
    values = np.arange(8, dtype=np.float32)
    values[3], values[5] = np.float32("nan"), np.float32("inf")
    write_gguf(path, [TensorSpec("a.weight", T.F32, (8,), values.tobytes())], {"general.architecture": "llama"})
    return path



def _wrote(out: Path, counts: str, *files: Path) -> list[str]:
    """The text report of one manifest written: what it holds (``counts``), then each file's size and sha256."""
    return [f"wrote {out}: {counts}", *(f"  {f.name}: {f.stat().st_size} bytes, sha256 {_sha256(f)}" for f in files)]


ONE = "1 file, 1 tensor, 1 row group"
#: write_split_set: two shards, six tensors of one row group each.
SPLIT = "2 files, 6 tensors, 6 row groups"


def test_several_models_write_one_manifest_each_and_a_split_set_once(tmp_path: Path) -> None:
    a = write_small_model(tmp_path / "a.gguf")
    b = write_small_model(tmp_path / "b.gguf", rows=8)
    first, second = write_split_set(tmp_path)
    (tmp_path / "out").mkdir()
    pattern = tmp_path / "out" / "{name}.json"
    result = run_cli(["manifest", a, first, second, b, "-o", pattern])
    assert (result.exit_code, result.stderr) == (0, ""), result.output
    out = tmp_path / "out"
    assert result.stdout.splitlines() == [
        *_wrote(out / "a.json", ONE, a), *_wrote(out / "split.json", SPLIT, first, second),
        *_wrote(out / "b.json", ONE, b), "3 models: 0 with findings, 3 clean, 0 errors"]
    assert sorted(os.listdir(out)) == ["a.json", "b.json", "split.json"]
    # Each is the manifest the one-model form writes, byte for byte, and verifies its model.
    for model, name in ((a, "a"), (first, "split"), (b, "b")):
        alone = tmp_path / f"alone-{name}.json"
        assert run_cli(["manifest", model, "-o", alone]).exit_code == 0
        assert (out / f"{name}.json").read_bytes() == alone.read_bytes()
        assert run_cli(["verify", model, "--manifest", out / f"{name}.json"]).exit_code == 0
    assert [f["name"] for f in json.loads((out / "split.json").read_text())["files"]] == [first.name, second.name]


def test_a_bad_model_does_not_stop_the_others(tmp_path: Path) -> None:
    a = write_small_model(tmp_path / "a.gguf")
    missing = tmp_path / "gone.gguf"
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(b"GGUF\x03\x00")
    b = write_small_model(tmp_path / "b.gguf", rows=8)
    result = run_cli(["manifest", a, missing, cut, b, "-o", tmp_path / "{name}.json"])
    assert result.exit_code == 2
    errors = result.stderr.splitlines()
    assert len(errors) == 2 and errors[0].startswith(f"ggaudit: error: {missing}: ") and \
        errors[1].startswith(f"ggaudit: error: {cut}: "), result.stderr
    assert result.stdout.splitlines() == [*_wrote(tmp_path / "a.json", ONE, a), *_wrote(tmp_path / "b.json", ONE, b),
                                          "4 models: 0 with findings, 2 clean, 2 errors"]
    assert sorted(p.name for p in tmp_path.glob("*.json")) == ["a.json", "b.json"]


def test_require_clean_names_the_finding_that_blocked_each_model(tmp_path: Path) -> None:
    nan = _nan_model(tmp_path / "nan.gguf")
    trailing = write_trailing_model(tmp_path / "t.gguf")
    clean = write_small_model(tmp_path / "ok.gguf")
    result = run_cli(["manifest", nan, clean, trailing, "-o", tmp_path / "{name}.json", "--require-clean"])
    assert result.exit_code == 1, result.output
    nan_at = GGUFReader(nan).tensors[0].data_offset + 3 * 4        # gguf's own reader: where element 3 is
    end = trailing.stat().st_size - 4
    refused = "no manifest written (--require-clean): the scan found what a good file never holds"
    assert result.stderr.splitlines() == [
        f"ggaudit: {nan}: {refused}: nan at file {nan} offset {nan_at}, length 4: tensor a.weight, row 0, column 3: "
        "expected finite, got 0x7fc00000 (nan) (the first of 2)",
        f"ggaudit: {trailing}: {refused}: structure trailing at file {trailing} offset {end}, length 4: after tensor "
        f"token_embd.weight: expected the end of the file, got 4 more bytes (01020304), first non-zero at offset {end}",
    ]
    assert sorted(p.name for p in tmp_path.glob("*.json")) == ["ok.json"]
    assert result.stdout.splitlines()[-1] == "3 models: 2 with findings, 1 clean, 0 errors"


def test_several_models_need_a_name_for_each_manifest(tmp_path: Path) -> None:
    a = write_small_model(tmp_path / "a.gguf")
    b = write_small_model(tmp_path / "b.gguf", rows=8)
    for out in (tmp_path / "one.json", "-"):
        result = run_cli(["manifest", a, b, "-o", out])
        assert assert_one_line_error(result) == (
            "ggaudit: error: -o: 2 models make 2 manifests: give -o a name holding {name}, which becomes each "
            "model's name (-o 'manifests/{name}.json')")
        assert result.stdout == ""
    # Both shards of one split set are one model: one manifest, -o as for one model.
    first, second = write_split_set(tmp_path)
    assert run_cli(["manifest", first, second, "-o", tmp_path / "one.json"]).exit_code == 0
    assert sorted(p.name for p in tmp_path.glob("*.json")) == ["one.json"]


def test_two_models_of_one_name_are_refused_before_any_read(tmp_path: Path) -> None:
    (tmp_path / "x").mkdir()
    (tmp_path / "y").mkdir()
    a = write_small_model(tmp_path / "x" / "m.gguf")
    b = write_small_model(tmp_path / "y" / "m.gguf", rows=8)
    out = tmp_path / "{name}.json"
    result = run_cli(["manifest", a, b, "-o", out])
    assert assert_one_line_error(result) == (
        f"ggaudit: error: {tmp_path / 'm.json'}: -o: would be the manifest of both {a} and {b} (both named m): "
        "make their manifests in separate runs")
    assert not (tmp_path / "m.json").exists()


def test_a_report_is_none_of_the_manifests_written(tmp_path: Path) -> None:
    a = write_small_model(tmp_path / "a.gguf")
    b = write_small_model(tmp_path / "b.gguf", rows=8)
    result = run_cli(["manifest", a, b, "-o", tmp_path / "{name}.json", "--report", tmp_path / "b.json"])
    assert assert_one_line_error(result) == (f"ggaudit: error: {tmp_path / 'b.json'}: is the manifest this run writes "
                                             "(-o); a report never replaces it")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.gguf", "b.gguf"]


def test_no_model_s_manifest_replaces_another_model_s_file(tmp_path: Path) -> None:
    """``{name}`` of ``b.gguf.gguf`` is ``b.gguf``: with ``-o '{name}'`` its manifest would be the other model.
    That model is refused (exit 2), the other's manifest is written."""
    b = write_small_model(tmp_path / "b.gguf")
    bb = write_small_model(tmp_path / "b.gguf.gguf", rows=8)
    before = b.read_bytes()
    result = run_cli(["manifest", b, bb, "-o", tmp_path / "{name}", "--force"])
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [f"ggaudit: error: {b}: is an input of this run (b.gguf); an output "
                                          "never replaces an input"]
    assert b.read_bytes() == before
    assert json.loads((tmp_path / "b").read_text())["files"][0]["name"] == "b.gguf"


def test_store_names_and_files_together(tmp_path: Path) -> None:
    model = write_small_model(tmp_path / "m.gguf")
    projector = write_small_model(tmp_path / "p.gguf", rows=8)
    store = tmp_path / "store"
    ollama_store(store, model.read_bytes(), projector.read_bytes(), name="gemma3")
    result = run_cli(["manifest", "ollama:gemma3:latest", model, "--store", store, "-o", tmp_path / "{name}.json"])
    assert result.exit_code == 0, result.output
    assert [len(json.loads((tmp_path / n).read_text())["files"]) for n in ("gemma3-latest.json", "m.json")] == [2, 1]


@pytest.mark.parametrize("target, name", [
    ("models/m.gguf", "m"), ("M.GGUF", "M"), ("m-00002-of-00003.gguf", "m"), ("dir/My Model.gguf", "My-Model"),
    ("ollama:gemma3:4b", "gemma3-4b"), ("ollama:hf.co/unsloth/Qwen3-GGUF:Q8_0", "hf.co-unsloth-Qwen3-GGUF-Q8_0"),
    ("hf:org/tiny", "org-tiny"), ("hf:org/tiny:sub/x.gguf", "org-tiny-sub-x"), ("lmstudio:pub/model", "pub-model"),
    ("gpt4all:file.gguf", "file"), ("gpt4all:", "gpt4all"), ("hf-local:/data/dl", "data-dl"),
    ("..gguf", "model"), ("../..", "model"), ("a\u202eb\u200b.gguf", "a-b"),
])
def test_name_of_each_model_is_one_safe_file_name(target: str, name: str) -> None:
    assert model_name(target) == name


def test_the_run_s_json_holds_each_model_and_validates(tmp_path: Path) -> None:
    """With --json: one document for the run, each model's manifest, refusing scan or error in the order given,
    valid against the shipped schema; its status is the exit's."""
    from importlib import resources

    from jsonschema import Draft202012Validator

    a = write_small_model(tmp_path / "a.gguf")
    nan = _nan_model(tmp_path / "nan.gguf")
    result = run_cli(["manifest", a, nan, tmp_path / "gone.gguf", "-o", tmp_path / "{name}.json", "--require-clean",
                      "--json"])
    assert result.exit_code == 2
    doc = json.loads(result.stdout)
    schema = json.loads(resources.files("ggaudit").joinpath("schema/cli-output.schema.json").read_text("utf-8"))
    assert list(Draft202012Validator(schema).iter_errors(doc)) == []
    assert doc["status"] == "error"
    assert [m.get("format", m.get("schema", "error" in m and "failed")) for m in doc["models"]] == [
        "ggaudit-tensor-manifest", "ggaudit/scan-report/1", "failed"]
    assert doc["models"][0] == json.loads((tmp_path / "a.json").read_text())
