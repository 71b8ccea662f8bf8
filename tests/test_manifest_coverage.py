"""A manifest that covers less than the model (issue 23, item 4): every file of the target that the
manifest does not name is a mismatch (``file-extra``), for both manifest formats (ggaudit's tensor
manifest, llama-gguf-hash's lines) and both target forms that have more than one file (a split set,
``ollama:NAME`` with a projector); a manifest that names nothing of the target is exit 2, one line
naming the manifest and the target."""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from gguf import GGMLQuantizationType as T
from jsonschema import Draft202012Validator

import ggaudit
from ggaudit.errors import NothingChecked, UsageError
from ggaudit.format.build import TensorSpec, gguf_bytes, write_gguf
from ggaudit.format.layout import open_model
from ggaudit.verify.manifests.llama_hash import build_llama_hash
from ggaudit.verify.manifests.tensor import build_tensor_manifest, tensor_manifest_to_json, write_tensor_manifest
from ggaudit.verify.report import Mismatch

from ollama_support import ollama_store
from support import assert_one_line_error, run_cli
from test_json_schema import SCHEMA

NAN_F32 = struct.pack("<I", 0x7FC00000)
UNLISTED = "file of the model, not in the manifest: not checked"
UNLINED = "file of the model, no line of the manifest names it or its tensors: not checked"


def _tensor(name: str, seed: int) -> TensorSpec:
    return TensorSpec(name, T.F32, (8, 4), np.random.default_rng(seed).standard_normal(32).astype("<f4").tobytes())


def _split_set(folder: Path) -> tuple[list[Path], dict[str, int]]:
    """m-00001-of-00002.gguf (blk.0.w) and m-00002-of-00002.gguf (blk.1.w); the tensors' offsets."""
    shards = [folder / f"m-0000{k}-of-00002.gguf" for k in (1, 2)]
    offsets: dict[str, int] = {}
    for no, shard in enumerate(shards):
        meta = {"general.architecture": "llama", "split.no": no, "split.count": 2, "split.tensors.count": 2}
        offsets.update(write_gguf(shard, [_tensor(f"blk.{no}.w", no)], meta))
    return shards, offsets


def _tensor_manifest_of(files: list[Path], model: Path, out: Path) -> Path:
    """The tensor manifest of ``model`` (every file of it), cut down to ``files``: what a manifest made of
    part of the model (or edited by hand) holds."""
    doc = tensor_manifest_to_json(build_tensor_manifest(open_model(model)))
    names = {f.name for f in files}
    doc["files"] = [f for f in doc["files"] if f["name"] in names]
    doc["tensors"] = [t for t in doc["tensors"] if t["file"] in names]
    out.write_text(json.dumps(doc))
    return out


def _llama_manifest_of(files: list[Path], model: Path | str, out: Path, store: Path | None = None) -> Path:
    """The llama-gguf-hash lines of ``model``, only those of ``files``' blocks."""
    made = build_llama_hash(str(model), ("sha256",), store=store)
    out.write_text("".join(line.text() for line in made.lines if Path(line.path) in files))
    return out


def _poison(path: Path, offset: int) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(NAN_F32)


def _extra(path: Path, detail: str = UNLISTED) -> Mismatch:
    return Mismatch(kind="file-extra", path=str(path), subject=path.name, offset=0, length=path.stat().st_size,
                    detail=detail)


def test_a_tensor_manifest_of_shard_1_does_not_pass_a_set_whose_shard_2_holds_nan(tmp_path: Path) -> None:
    """The issue's case: it said "1 file checked, 0 mismatches", exit 0."""
    shards, offsets = _split_set(tmp_path)
    manifest = _tensor_manifest_of(shards[:1], shards[0], tmp_path / "shard1.json")
    _poison(shards[1], offsets["blk.1.w"])
    assert ggaudit.scan(shards[0]).counts["nan"] == 1         # the damage the manifest cannot see
    for target in shards:       # any shard names the set
        report = ggaudit.verify(target, manifest=manifest)
        assert [c.path for c in report.checked] == [str(shards[0])] and report.checked[0].ok
        assert report.mismatches == (_extra(shards[1]),)
        assert not report.ok
    result = run_cli(["verify", shards[0], "--manifest", manifest])
    assert result.exit_code == 1, (result.stdout, result.stderr)
    size = shards[1].stat().st_size
    lines = result.stdout.splitlines()
    assert lines[2] == f"MISMATCH file-extra: file {shards[1]}, offset 0, length {size} ({shards[1].name}): {UNLISTED}"
    assert lines[3].startswith("summary: 1 file checked, ") and lines[3].endswith(" 1 mismatch") and len(lines) == 4


def test_a_shard_the_set_s_names_promise_absent_and_unlisted_is_missing(tmp_path: Path) -> None:
    shards, _ = _split_set(tmp_path)
    manifest = _tensor_manifest_of(shards[:1], shards[0], tmp_path / "shard1.json")
    shards[1].unlink()
    report = ggaudit.verify(shards[0], manifest=manifest)
    assert report.mismatches == (Mismatch(kind="missing", path=str(shards[1]), subject=shards[1].name,
                                          detail="shard of the model's split set not found (and not in the "
                                                 "manifest)"),)


def test_a_llama_hash_manifest_of_shard_1_reports_shard_2_as_a_file_extra(tmp_path: Path) -> None:
    shards, offsets = _split_set(tmp_path)
    manifest = _llama_manifest_of(shards[:1], shards[0], tmp_path / "shard1.hash")
    assert manifest.read_text().count("\n") == 2             # blk.0.w and shard 1's model line
    _poison(shards[1], offsets["blk.1.w"])
    report = ggaudit.verify(shards[1], manifest=manifest)
    assert report.mismatches == (_extra(shards[1], UNLINED),)
    assert [(c.path, c.ok) for c in report.checked] == [(str(shards[0]), True)]
    assert run_cli(["verify", shards[1], "--manifest", manifest]).exit_code == 1


def _ollama_with_projector(root: Path) -> tuple[Path, Path]:
    model, _ = gguf_bytes([_tensor("token_embd.weight", 1)], {"general.architecture": "llama"})
    projector, _ = gguf_bytes([_tensor("mm.0.weight", 2)], {"general.architecture": "clip"})
    return ollama_store(root, model, projector)


@pytest.mark.parametrize("fmt", ["tensor", "llama-gguf-hash"])
def test_a_manifest_of_an_ollama_model_s_weights_alone_does_not_pass_its_projector(tmp_path: Path,
                                                                                   fmt: str) -> None:
    root = tmp_path / "store"
    model, projector = _ollama_with_projector(root)
    if fmt == "tensor":
        manifest = tmp_path / "weights.json"
        write_tensor_manifest(build_tensor_manifest(open_model(model)), manifest)
        detail = UNLISTED
    else:
        manifest = _llama_manifest_of([model], "ollama:tiny", tmp_path / "weights.hash", store=root)
        detail = UNLINED
    with open(projector, "r+b") as f:      # the projector damaged: nothing of the manifest can see it
        f.seek(-4, 2)
        f.write(NAN_F32)
    report = ggaudit.verify("ollama:tiny", manifest=manifest, store=root)
    assert report.mismatches == (_extra(projector, detail),)
    assert [(c.path, c.ok) for c in report.checked] == [(str(model), True)]
    result = run_cli(["verify", "ollama:tiny", "--store", root, "--manifest", manifest, "--format", "sarif"])
    assert result.exit_code == 1
    sarif = json.loads(result.stdout)["runs"][0]
    assert [r["ruleId"] for r in sarif["results"]] == ["verify/file-extra"]
    assert [r["id"] for r in sarif["tool"]["driver"]["rules"]] == ["verify/file-extra"]


def test_a_manifest_of_the_weights_before_the_pull_checks_the_blob_in_its_place_and_not_the_projector(
        tmp_path: Path) -> None:
    """A single-file manifest made of model.gguf checks the model blob (a renamed copy), and the projector,
    which it does not name, is a file-extra."""
    root = tmp_path / "store"
    model, projector = _ollama_with_projector(root)
    local = tmp_path / "model.gguf"
    local.write_bytes(model.read_bytes())
    manifest = tmp_path / "local.json"
    write_tensor_manifest(build_tensor_manifest(local), manifest)
    report = ggaudit.verify("ollama:tiny", manifest=manifest, store=root)
    assert [(c.path, c.ok) for c in report.checked] == [(str(model), True)]
    assert report.mismatches == (_extra(projector),)
    assert report.warnings == (f"manifest describes model.gguf, checking {model.name} in its place",)


def test_a_manifest_of_the_whole_ollama_model_still_passes(tmp_path: Path) -> None:
    """The other side of the rule: a manifest made of ollama:NAME names both files, and nothing is extra."""
    root = tmp_path / "store"
    _ollama_with_projector(root)
    manifest = tmp_path / "whole.json"
    write_tensor_manifest(build_tensor_manifest("ollama:tiny", store=root), manifest)
    report = ggaudit.verify("ollama:tiny", manifest=manifest, store=root)
    assert report.ok and len(report.checked) == 2 and report.stats.tensors == 2


def test_file_extra_is_in_the_json_and_validates(tmp_path: Path) -> None:
    shards, _ = _split_set(tmp_path)
    manifest = _tensor_manifest_of(shards[:1], shards[0], tmp_path / "shard1.json")
    result = run_cli(["verify", shards[0], "--manifest", manifest, "--json"])
    doc = json.loads(result.stdout)
    assert list(Draft202012Validator(SCHEMA).iter_errors(doc)) == []
    mismatches = doc["models"][0]["mismatches"]
    assert [(m["kind"], m["path"], m["offset"], m["length"]) for m in mismatches] == [
        ("file-extra", str(shards[1]), 0, shards[1].stat().st_size)]


# --- a manifest naming nothing of the target: exit 2 -----------------------------------------------------

def _another_split_set(tmp_path: Path) -> list[Path]:
    other = tmp_path / "other"
    other.mkdir()
    return _split_set(other)[0]


def _names_no_file(tmp_path: Path) -> tuple[Path, Path, str]:
    """A tensor manifest of another split set."""
    shards, _ = _split_set(tmp_path)
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    for k, shard in enumerate(shards):
        shard.rename(theirs / f"x-0000{k + 1}-of-00002.gguf")
    manifest = _tensor_manifest_of(sorted(theirs.iterdir()), theirs / "x-00001-of-00002.gguf", tmp_path / "x.json")
    target = _split_set(tmp_path)[0][0]
    return manifest, target, (f"names no file of {target} (the manifest's files: x-00001-of-00002.gguf, "
                              "x-00002-of-00002.gguf); nothing was checked")


def _names_no_file_at_all(tmp_path: Path) -> tuple[Path, Path, str]:
    """A tensor manifest of no file (a valid document, files and tensors empty)."""
    manifest = tmp_path / "empty.json"
    doc = tensor_manifest_to_json(build_tensor_manifest(_split_set(tmp_path)[0][0]))
    manifest.write_text(json.dumps({**doc, "files": [], "tensors": []}))
    target = tmp_path / "m-00001-of-00002.gguf"
    return manifest, target, f"names no file of {target} (the manifest's files: none); nothing was checked"


def _names_no_tensor_of_a_renamed_copy(tmp_path: Path) -> tuple[Path, Path, str]:
    """A single-file manifest checks a file of another name in its place (an Ollama blob's copy) only when
    they share a tensor."""
    write_gguf(tmp_path / "m.gguf", [_tensor("token_embd.weight", 1)])
    manifest = tmp_path / "m.json"
    write_tensor_manifest(build_tensor_manifest(tmp_path / "m.gguf"), manifest)
    target = tmp_path / "copy.gguf"
    write_gguf(target, [_tensor("output.weight", 1)])
    return manifest, target, (f"names no tensor of {target}, which would be checked in place of m.gguf; nothing "
                              "was checked")


def _llama_names_nothing(tmp_path: Path) -> tuple[Path, Path, str]:
    """llama-gguf-hash lines of another model: no line's tensor, nor its path's file name, is the set's."""
    other = tmp_path / "other.gguf"
    write_gguf(other, [_tensor("output.weight", 5)])
    manifest = _llama_manifest_of([other], other, tmp_path / "other.hash")
    target = _split_set(tmp_path)[0][0]
    return manifest, target, f"names nothing of {target}: no line names a tensor or a file of it; nothing was checked"


@pytest.mark.parametrize("case", [_names_no_file, _names_no_file_at_all, _names_no_tensor_of_a_renamed_copy,
                                  _llama_names_nothing])
def test_a_manifest_naming_nothing_of_the_target_is_exit_2(tmp_path: Path,
                                                           case: Callable[[Path], tuple[Path, Path, str]]) -> None:
    manifest, target, said = case(tmp_path)
    with pytest.raises(NothingChecked) as caught:
        ggaudit.verify(target, manifest=manifest)
    assert isinstance(caught.value, UsageError)
    assert (caught.value.path, caught.value.message) == (str(manifest), said)
    result = run_cli(["verify", target, "--manifest", manifest])
    assert assert_one_line_error(result) == f"ggaudit: error: {manifest}: {said}"
    assert result.stdout == ""
