"""One rule matching a model's files to a tensor manifest's entries, for verify and check (issue 32): by
name, else a copy by content identity, else a single file's manifest in the model's file's place. A shard
left out of the manifest is extra, another model's manifest names nothing, a copy with a renamed tensor is
checked in place (its differences are findings)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from gguf import GGMLQuantizationType as T

import ggaudit
from ggaudit.errors import NothingChecked
from ggaudit.format.build import TensorSpec, write_gguf
from ggaudit.format.layout import open_gguf, open_model
from ggaudit.verify.manifests.tensor import (build_tensor_manifest, read_tensor_manifest, tensor_manifest_to_json,
                                             write_tensor_manifest)
from ggaudit.verify.walk.tensor_match import BY_CONTENT, BY_NAME, IN_PLACE, match_manifest

from ollama_support import ollama_store


def _tensor(name: str, seed: int) -> TensorSpec:
    return TensorSpec(name, T.F32, (8, 4), np.random.default_rng(seed).standard_normal(32).astype("<f4").tobytes())


def _split_set(folder: Path) -> list[Path]:
    shards = [folder / f"m-0000{k}-of-00002.gguf" for k in (1, 2)]
    for no, shard in enumerate(shards):
        meta = {"general.architecture": "llama", "split.no": no, "split.count": 2, "split.tensors.count": 2}
        write_gguf(shard, [_tensor(f"blk.{no}.w", no)], meta)
    return shards


def _manifest(model: Path, out: Path, keep: set[str] | None = None) -> Path:
    doc = tensor_manifest_to_json(build_tensor_manifest(open_model(model)))
    if keep is not None:
        doc["files"] = [f for f in doc["files"] if f["name"] in keep]
        doc["tensors"] = [t for t in doc["tensors"] if t["file"] in keep]
    out.write_text(json.dumps(doc))
    return out


def test_a_shard_left_out_of_the_manifest_is_extra(tmp_path: Path) -> None:
    shards = _split_set(tmp_path)
    manifest = read_tensor_manifest(_manifest(shards[0], tmp_path / "one.json", {shards[0].name}))
    match = match_manifest(manifest, [str(shards[0])])
    assert match.files == {str(shards[0]): manifest.files[0], str(shards[1]): None}
    assert (dict(match.how), match.extra, match.renamed) == ({str(shards[0]): BY_NAME}, (str(shards[1]),), [])
    assert match.located == ((manifest.files[0], str(shards[0])),)
    # Opened files, as check gives them, match alike.
    assert match_manifest(manifest, [open_gguf(s) for s in shards]) == match
    assert ggaudit.verify(shards[0], manifest=tmp_path / "one.json").mismatches[0].kind == "file-extra"


def test_another_models_manifest_names_nothing(tmp_path: Path) -> None:
    write_gguf(tmp_path / "other.gguf", [_tensor("output.weight", 9)])
    manifest_path = _manifest(tmp_path / "other.gguf", tmp_path / "other.json")
    write_gguf(tmp_path / "m.gguf", [_tensor("token_embd.weight", 1)])
    target = str(tmp_path / "m.gguf")
    with pytest.raises(NothingChecked) as caught:
        match_manifest(read_tensor_manifest(manifest_path), [target], manifest_path=manifest_path)
    assert (caught.value.path, caught.value.message) == (str(manifest_path), (
        f"names no tensor of {target}, which would be checked in place of other.gguf; nothing was checked"))
    other_set = tmp_path / "set"
    other_set.mkdir()
    set_manifest = _manifest(_split_set(other_set)[0], tmp_path / "set.json")
    with pytest.raises(NothingChecked, match=r"names no file of .*m\.gguf \(the manifest's files: m-00001-of-00002"
                                             r"\.gguf, m-00002-of-00002\.gguf\); nothing was checked"):
        match_manifest(read_tensor_manifest(set_manifest), [target], manifest_path=set_manifest)


def test_a_copy_under_another_name_with_a_renamed_tensor_is_checked_in_its_place(tmp_path: Path) -> None:
    """What verify did before the one rule, and does still: the copy shares a tensor, so it is checked in the
    place of the manifest's one file, and its renamed tensor is a finding (check ignored it: exit 0)."""
    write_gguf(tmp_path / "m.gguf", [_tensor("token_embd.weight", 1), _tensor("output.weight", 2)])
    manifest_path = _manifest(tmp_path / "m.gguf", tmp_path / "m.json")
    copy = tmp_path / "sha256-copy"
    write_gguf(copy, [_tensor("token_embd.weight", 1), _tensor("output.weight.renamed", 2)])
    manifest = read_tensor_manifest(manifest_path)
    match = match_manifest(manifest, [str(copy)])
    assert (dict(match.how), match.extra, match.renamed) == ({str(copy): IN_PLACE}, (), [(manifest.files[0],
                                                                                            str(copy))])
    report = ggaudit.verify(copy, manifest=manifest_path)
    assert report.warnings == ("manifest describes m.gguf, checking sha256-copy in its place",)
    assert [m.kind for m in report.mismatches] == ["sha256", "tensor-missing", "tensor-extra"]


def test_an_exact_copy_matches_by_content_even_in_a_manifest_of_several_files(tmp_path: Path) -> None:
    """An Ollama model and its projector against a manifest made of the two files before the pull: each blob
    is its entry's by content identity (verify said the manifest named nothing of the model)."""
    write_gguf(tmp_path / "model.gguf", [_tensor("token_embd.weight", 1)])
    write_gguf(tmp_path / "mmproj.gguf", [_tensor("v.patch_embd.weight", 2)])
    manifest_path = tmp_path / "both.json"
    write_tensor_manifest(build_tensor_manifest([tmp_path / "model.gguf", tmp_path / "mmproj.gguf"]), manifest_path)
    model, projector = ollama_store(tmp_path / "store", (tmp_path / "model.gguf").read_bytes(),
                                    (tmp_path / "mmproj.gguf").read_bytes())
    manifest = read_tensor_manifest(manifest_path)
    match = match_manifest(manifest, [open_gguf(model), open_gguf(projector)])
    assert dict(match.how) == {str(model): BY_CONTENT, str(projector): BY_CONTENT}
    assert match.files == {str(model): manifest.files[0], str(projector): manifest.files[1]}
    report = ggaudit.verify("ollama:tiny", manifest=manifest_path, store=tmp_path / "store")
    assert report.ok and len(report.checked) == 2
    assert report.warnings == (f"manifest describes model.gguf, checking {model.name} in its place",
                               f"manifest describes mmproj.gguf, checking {projector.name} in its place")


def test_renamed_shards_are_not_matched_by_content(tmp_path: Path) -> None:
    """A split set's shards find each other by name: another set's manifest, its shards however alike, names
    nothing of this one (as tests/test_manifest_coverage.py says verify does)."""
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    for shard in _split_set(theirs):
        shard.rename(theirs / shard.name.replace("m-", "x-"))
    manifest_path = _manifest(theirs / "x-00001-of-00002.gguf", tmp_path / "x.json")
    with pytest.raises(NothingChecked, match="names no file of"):
        match_manifest(read_tensor_manifest(manifest_path), [str(_split_set(tmp_path)[0])])
