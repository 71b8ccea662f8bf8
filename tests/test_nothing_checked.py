""""Nothing was verified" is never clean (issue 23, item 5): the empty case of every store and target
form is exit 2, one line ending "nothing was checked", as an empty ``rows`` selection is; the library
raises NothingChecked (a UsageError) for it. And the cases that look empty but did check something
stay what they are: a zero-byte file against the empty digest, a manifest of a model with no tensor,
a diff of two headers."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from gguf import GGMLQuantizationType as T
from jsonschema import Draft202012Validator

import ggaudit
from ggaudit.errors import NothingChecked, UsageError
from ggaudit.format.build import TensorSpec, gguf_bytes, write_gguf

from support import assert_one_line_error, run_cli
from test_json_schema import SCHEMA

COMMIT = "c0ffee" + "0" * 34
NAME = "registry.ollama.ai/library/empty:latest"
EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()


def _model_bytes(seed: int = 1) -> bytes:
    data = np.random.default_rng(seed).standard_normal(32).astype("<f4").tobytes()
    return gguf_bytes([TensorSpec("token_embd.weight", T.F32, (8, 4), data)], {"general.architecture": "llama"})[0]


def _blob(store: Path, data: bytes) -> dict[str, Any]:
    digest = hashlib.sha256(data).hexdigest()
    (store / "blobs").mkdir(parents=True, exist_ok=True)
    (store / "blobs" / f"sha256-{digest}").write_bytes(data)
    return {"mediaType": "application/vnd.ollama.image.model", "digest": f"sha256:{digest}", "size": len(data)}


def _ollama_model(store: Path, name: str, layers: list[dict[str, Any]], config: bool = True) -> Path:
    doc: dict[str, Any] = {"schemaVersion": 2, "layers": layers}
    if config:
        doc["config"] = {**_blob(store, json.dumps({"model": name}).encode()),
                         "mediaType": "application/vnd.docker.container.image.v1+json"}
    path = store / "manifests" / "registry.ollama.ai" / "library" / name / "latest"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(doc))
    (store / "blobs").mkdir(exist_ok=True)
    return path


def _refused(target: str, source: str | Path, said: str, *options: str | Path, **library: Any) -> None:
    """The library raises NothingChecked (a UsageError) naming ``source``; the CLI prints that one line, exit 2."""
    with pytest.raises(NothingChecked) as caught:
        ggaudit.verify(target, **library)
    assert isinstance(caught.value, UsageError)
    assert (caught.value.path, caught.value.message) == (str(source), said)
    result = run_cli(["verify", target, *options])
    assert assert_one_line_error(result) == f"ggaudit: error: {source}: {said}"
    assert result.stdout == ""


# --- verify: every store ---------------------------------------------------------------------------------

@pytest.mark.parametrize("config", [True, False])
def test_an_ollama_manifest_listing_no_layers_is_exit_2(tmp_path: Path, config: bool) -> None:
    """With a config it said "1 file checked" (the config), exit 0: a config alone is no model."""
    manifest = _ollama_model(tmp_path, "empty", [], config=config)
    _refused("ollama:empty", manifest, f"model {NAME} lists no layers; nothing was checked",
             "--store", tmp_path, store=tmp_path)


def test_ollama_star_on_an_empty_store_is_exit_2(tmp_path: Path) -> None:
    (tmp_path / "manifests").mkdir()
    (tmp_path / "blobs").mkdir()
    _refused("ollama:*", tmp_path, "the store holds no model and no blob; nothing was checked",
             "--store", tmp_path, store=tmp_path)


def test_ollama_star_on_a_store_whose_only_model_lists_no_layers_is_exit_2(tmp_path: Path) -> None:
    """Its config blob is no orphan, and that search alone checked no model."""
    _ollama_model(tmp_path, "empty", [])
    with pytest.raises(NothingChecked) as caught:
        ggaudit.verify("ollama:*", store=tmp_path)
    assert (caught.value.path, caught.value.message) == (str(tmp_path), (
        f"no model of the store lists layers (1 warning, the first: model {NAME} lists no layers: nothing of it "
        "checked); nothing was checked"))
    result = run_cli(["verify", "ollama:*", "--store", tmp_path])
    assert result.exit_code == 2
    assert result.stderr == (f"ggaudit: error: {tmp_path / 'manifests' / 'registry.ollama.ai' / 'library'}"
                             f"{os.sep}empty{os.sep}latest: model {NAME} lists no layers; nothing was checked\n")


def test_ollama_star_reports_an_empty_model_as_an_error_and_still_checks_the_others(tmp_path: Path) -> None:
    _ollama_model(tmp_path, "good", [_blob(tmp_path, _model_bytes())])
    empty = _ollama_model(tmp_path, "empty", [])
    result = run_cli(["verify", "ollama:*", "--store", tmp_path, "--json"])
    assert result.exit_code == 2
    doc = json.loads(result.stdout)
    assert list(Draft202012Validator(SCHEMA).iter_errors(doc)) == []
    assert [(m.get("target"), m.get("source"), m.get("ok")) for m in doc["models"]] == [
        ("ollama:registry.ollama.ai/library/empty:latest", None, None),
        (None, "registry.ollama.ai/library/good:latest", True), (None, str(tmp_path), True)]
    assert doc["models"][0]["error"] == {"message": f"{empty}: model {NAME} lists no layers; nothing was checked",
                                         "path": str(empty), "offset": None, "field": None, "kind": "NothingChecked"}
    # The library's whole-store walk is one report: the empty model is a warning in it.
    report = ggaudit.verify("ollama:*", store=tmp_path)
    assert report.ok and len(report.checked) == 2     # good's layer and config; empty's config is no orphan
    assert report.warnings == (f"model {NAME} lists no layers: nothing of it checked",)


def test_an_empty_hugging_face_snapshot_is_exit_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repo = tmp_path / "hub" / "models--org--tiny"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(COMMIT + "\n")
    (repo / "snapshots" / COMMIT).mkdir(parents=True)
    (repo / "blobs").mkdir()
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    _refused("hf:org/tiny", f"org/tiny@{COMMIT}", "the snapshot holds no file; nothing was checked")


def test_an_empty_local_dir_download_is_exit_2(tmp_path: Path) -> None:
    (tmp_path / ".cache" / "huggingface" / "download").mkdir(parents=True)
    _refused(f"hf-local:{tmp_path}", tmp_path, "the folder holds no downloaded file; nothing was checked")


def test_a_local_dir_download_without_metadata_checked_nothing(tmp_path: Path) -> None:
    """Each file without metadata is a warning; when that is every file, the warning is in the one line."""
    (tmp_path / ".cache" / "huggingface" / "download").mkdir(parents=True)
    (tmp_path / "model.gguf").write_bytes(_model_bytes())
    _refused(f"hf-local:{tmp_path}", tmp_path, "none of its 1 file has download metadata giving a digest (1 "
             f"warning, the first: {tmp_path / 'model.gguf'}: no download metadata: not checked); nothing was checked")


def test_an_lm_studio_folder_without_a_gguf_is_exit_2(tmp_path: Path) -> None:
    (tmp_path / "pub" / "model").mkdir(parents=True)
    (tmp_path / "pub" / "model" / "README.md").write_text("no weights here\n")
    said = "the folder holds no GGUF file; nothing was checked"
    _refused("lmstudio:", tmp_path, said, "--store", tmp_path, store=tmp_path)
    _refused("lmstudio:pub/model", f"{tmp_path} pub/model", said, "--store", tmp_path, store=tmp_path)


def test_a_gpt4all_folder_listing_models_never_downloaded_is_exit_2(tmp_path: Path) -> None:
    (tmp_path / "models3.json").write_text(json.dumps([{"filename": "never.gguf", "filesize": "9",
                                                        "md5sum": "1" * 32}]))
    _refused("gpt4all:", tmp_path, "the folder holds no GGUF file; nothing was checked", "--store", tmp_path,
             store=tmp_path)


def test_a_checksum_file_whose_every_entry_is_skipped_is_exit_2(tmp_path: Path) -> None:
    sums = tmp_path / "SHA256SUMS"
    sums.write_text(f"{'0' * 64}  gone.bin\n{'1' * 64}  also-gone.bin\n")
    with pytest.raises(NothingChecked, match="no file it names is present"):
        ggaudit.verify(sums=sums, ignore_missing=True)
    assert_one_line_error(run_cli(["verify", "--sums", sums, "--ignore-missing"]),
                          "no file it names is present (--ignore-missing): no file was verified")


def test_nothing_checked_is_a_failed_target_in_the_json_and_the_others_still_report(tmp_path: Path) -> None:
    (tmp_path / "manifests").mkdir()
    (tmp_path / "blobs").mkdir()
    data = _model_bytes()
    blob = tmp_path / f"sha256-{hashlib.sha256(data).hexdigest()}"
    blob.write_bytes(data)
    result = run_cli(["verify", "lmstudio:", blob, "--store", tmp_path, "--json"])
    assert result.exit_code == 2
    doc = json.loads(result.stdout)
    assert list(Draft202012Validator(SCHEMA).iter_errors(doc)) == [] and doc["status"] == "error"
    failed, checked = doc["models"]
    assert failed["error"]["kind"] == "NothingChecked" and failed["error"]["message"].endswith("nothing was checked")
    assert checked["ok"] and [c["path"] for c in checked["checked"]] == [str(blob)]


# --- what looks empty but was checked ----------------------------------------------------------------------

def test_a_zero_byte_file_against_the_empty_digest_was_checked(tmp_path: Path) -> None:
    """Its size and its sha256 were both compared, and both are right: exit 0, one file checked."""
    empty = tmp_path / "empty.bin"
    empty.write_bytes(b"")
    report = ggaudit.verify(empty, sha256=EMPTY_SHA256)
    assert report.ok and [(c.path, c.size, c.digest) for c in report.checked] == [(str(empty), 0, EMPTY_SHA256)]
    blob = tmp_path / f"sha256-{EMPTY_SHA256}"
    blob.write_bytes(b"")
    assert run_cli(["verify", blob]).exit_code == 0
    blob.write_bytes(b"\0")
    assert run_cli(["verify", blob]).exit_code == 1


# --- scan, manifest, diff ------------------------------------------------------------------------------------

def test_scan_of_a_model_with_no_tensor_is_exit_2(tmp_path: Path) -> None:
    """It said "0 tensors, 0 bytes of tensor data scanned", "clean", exit 0. The library raises
    NothingChecked (an engine's test must not see a clean report), the command line says it, exit 2."""
    path = tmp_path / "none.gguf"
    write_gguf(path, [], {"general.architecture": "llama"})
    with pytest.raises(NothingChecked, match="holds no tensor, vocabulary or chat template; nothing was checked"):
        ggaudit.scan(path)
    result = run_cli(["scan", path])
    said = f"{path}: holds no tensor, vocabulary or chat template; nothing was checked"
    assert assert_one_line_error(result) == f"ggaudit: error: {said}"
    assert result.stdout == ""
    doc = json.loads(run_cli(["scan", path, "--json"]).stdout)
    assert list(Draft202012Validator(SCHEMA).iter_errors(doc)) == []
    assert doc["models"] == [{"target": str(path), "error": {
        "message": said, "path": str(path), "offset": None, "field": None, "kind": "NothingChecked"}}]


def test_scan_of_a_model_with_no_tensor_still_reports_what_its_structure_holds(tmp_path: Path) -> None:
    """Bytes after the header of a model with no tensor were checked, and are a finding: exit 1."""
    path = tmp_path / "none.gguf"
    write_gguf(path, [], {"general.architecture": "llama"})
    size = path.stat().st_size
    with open(path, "ab") as f:
        f.write(b"payload")
    result = run_cli(["scan", path, "--json"])
    assert result.exit_code == 1
    assert [(s["kind"], s["offset"], s["length"]) for s in json.loads(result.stdout)["models"][0]["structure"]] == [
        ("trailing", size, 7)]


def test_scan_of_a_tensor_glob_matching_nothing_is_exit_2(tmp_path: Path) -> None:
    path = tmp_path / "m.gguf"
    path.write_bytes(_model_bytes())
    assert_one_line_error(run_cli(["scan", path, "--tensor", "blk.*"]), "--tensor: no tensor matches 'blk.*'")


def test_a_manifest_of_a_model_with_no_tensor_still_checks_its_file(tmp_path: Path) -> None:
    """manifest is no verdict: it records the file's size and sha256, and verify then checks those."""
    path = tmp_path / "none.gguf"
    write_gguf(path, [], {"general.architecture": "llama"})
    manifest = tmp_path / "none.json"
    assert run_cli(["manifest", path, "-o", manifest]).exit_code == 0
    report = ggaudit.verify(path, manifest=manifest)
    assert report.ok and [(c.path, c.digest) for c in report.checked] == [
        (str(path), hashlib.sha256(path.read_bytes()).hexdigest())]
    path.write_bytes(path.read_bytes().replace(b"llama", b"llamb"))
    assert [m.kind for m in ggaudit.verify(path, manifest=manifest).mismatches] == ["sha256"]


def test_diff_of_two_models_with_no_tensor_compares_their_headers(tmp_path: Path) -> None:
    """diff's claim is "A and B hold the same": with no tensor the metadata is still compared."""
    a, b = tmp_path / "a.gguf", tmp_path / "b.gguf"
    write_gguf(a, [], {"general.architecture": "llama"})
    write_gguf(b, [], {"general.architecture": "llama"})
    assert run_cli(["diff", a, b]).exit_code == 0
    write_gguf(b, [], {"general.architecture": "qwen2"})
    assert run_cli(["diff", a, b]).exit_code == 1


def test_rows_through_the_library_that_compared_nothing_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every read path skipped: check_rows returned a report with ok=True (only the command line refused
    it), so an engine's test calling the library saw a clean result."""
    from ggaudit.rows import replay
    from ggaudit.evidence.readers import DirectIOUnavailable

    def no_direct(path: str, mode: str) -> Any:
        raise DirectIOUnavailable(path, "no direct I/O here")

    monkeypatch.setattr(replay, "open_reader", no_direct)
    ple = os.path.join(os.path.dirname(__file__), "..", "fixtures", "ple_q8_0.gguf")
    with pytest.raises(NothingChecked, match=r"nothing was compared: every read path was skipped \(direct: "
                                             r"skipped: .*no direct I/O here\)"):
        ggaudit.check_rows(ple, [1], modes=("direct",))
