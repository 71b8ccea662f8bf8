"""Parsing and locating: Ollama names and store, Hugging Face cache, checksum files, tensor manifests."""

from __future__ import annotations

import re
import hashlib
import json
import os
from pathlib import Path

import pytest
from gguf import GGMLQuantizationType as T
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ggaudit.format.build import TensorSpec, write_gguf
from ggaudit.errors import GGAuditError, ManifestError, ReadError, UsageError
from ggaudit.format.layout import open_model
from ggaudit.stores.locate import resolve_model
from ggaudit.stores.ollama import (MEDIA_MODEL, MEDIA_PROJECTOR, OllamaName, default_ollama_store,
                                          ollama_blob_path, parse_digest, parse_ollama_name, read_ollama_manifest)
from ggaudit.verify.manifests.tensor import (build_tensor_manifest, read_tensor_manifest, rows_per_group,
                                             tensor_manifest_to_json, write_tensor_manifest)
from ggaudit.stores.hf import default_hf_cache, parse_hf_spec, read_hf_snapshot
from ggaudit.stores.sums import read_sums

from platforms import needs_symlinks
import contextlib


HEX_A = "a" * 64


@pytest.mark.parametrize("text, expected", [
    ("gemma3", ("registry.ollama.ai", "library", "gemma3", "latest")),
    ("gemma3:4b", ("registry.ollama.ai", "library", "gemma3", "4b")),
    ("acme/tiny:q4_K_M", ("registry.ollama.ai", "acme", "tiny", "q4_K_M")),
    ("hf.co/unsloth/Qwen3-GGUF:Q8_0", ("hf.co", "unsloth", "Qwen3-GGUF", "Q8_0")),
    ("localhost:11434/ns/m:v1", ("localhost:11434", "ns", "m", "v1")),
    ("localhost:11434/ns/m", ("localhost:11434", "ns", "m", "latest")),
])
def test_ollama_names_get_defaults(text: str, expected: tuple[str, str, str, str]) -> None:
    assert parse_ollama_name(text) == OllamaName(*expected)


@pytest.mark.parametrize("text", ["", "a/b/c/d", "name:", "../x", "ns/..:tag", "x:..", "a//b", "m:t/x", "na me"])
def test_bad_ollama_names_are_usage_errors(text: str) -> None:
    with pytest.raises(UsageError):
        parse_ollama_name(text)


def test_store_root_precedence(tmp_path: Path) -> None:
    assert default_ollama_store({"OLLAMA_MODELS": "/srv/m"}, "linux", tmp_path) == Path("/srv/m")
    assert default_ollama_store({}, "darwin", tmp_path) == tmp_path / ".ollama" / "models"
    assert default_ollama_store({"USERPROFILE": str(tmp_path)}, "win32") == tmp_path / ".ollama" / "models"
    (tmp_path / ".ollama" / "models").mkdir(parents=True)
    assert default_ollama_store({}, "linux", tmp_path) == tmp_path / ".ollama" / "models"


def test_store_root_falls_back_to_the_service_install_only_when_it_exists(tmp_path: Path) -> None:
    service = Path("/usr/share/ollama/.ollama/models")
    want = service if service.is_dir() else tmp_path / ".ollama" / "models"
    assert default_ollama_store({}, "linux", tmp_path) == want


@pytest.mark.parametrize("digest", ["sha256:../../etc/passwd", "sha256:" + "a" * 63, "sha512:" + HEX_A,
                                    "sha256:" + "g" * 64, "sha256:" + HEX_A + "/", 42, None])
def test_bad_digests_are_manifest_errors(digest: object) -> None:
    with pytest.raises(ManifestError) as err:
        parse_digest(digest, path="m.json", field="layers[0].digest")
    assert err.value.field == "layers[0].digest"


def test_digest_hex_is_normalised_to_lowercase() -> None:
    assert parse_digest("sha256:" + "AB" * 32, path="m", field="f") == "ab" * 32


def _write_manifest(store: Path, name: str, doc: object) -> Path:
    parsed = parse_ollama_name(name)
    path = parsed.manifest_path(store)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc) if not isinstance(doc, str) else doc, encoding="utf-8")
    return path


def _layer(media: str, digest: str, size: int) -> dict[str, object]:
    return {"mediaType": media, "digest": f"sha256:{digest}", "size": size}


def test_read_manifest_orders_model_then_projector(tmp_path: Path) -> None:
    _write_manifest(tmp_path, "m", {"schemaVersion": 2, "config": _layer("application/x-config", "c" * 64, 3),
                                    "layers": [_layer(MEDIA_PROJECTOR, "b" * 64, 2),
                                               _layer("application/vnd.ollama.image.params", "d" * 64, 1),
                                               _layer(MEDIA_MODEL, HEX_A, 1)]})
    manifest = read_ollama_manifest("m", tmp_path)
    assert [layer.digest[0] for layer in manifest.model_layers()] == ["a", "b"]
    assert [layer.field for layer in manifest.blobs] == ["layers[0]", "layers[1]", "layers[2]", "config"]


@pytest.mark.parametrize("doc, field", [
    ("{not json", None),
    ({"layers": "x"}, "layers"),
    ({"layers": [_layer(MEDIA_MODEL, HEX_A, -1)]}, "layers[0].size"),
    ({"layers": [_layer(MEDIA_MODEL, HEX_A, 1), {"digest": "sha256:../../x", "size": 1}]}, "layers[1].digest"),
    ({"layers": [], "config": {"digest": "sha256:" + HEX_A, "size": True}}, "config.size"),
])
def test_malformed_manifests_name_the_field(tmp_path: Path, doc: object, field: str | None) -> None:
    _write_manifest(tmp_path, "bad", doc)
    with pytest.raises(ManifestError) as err:
        read_ollama_manifest("bad", tmp_path)
    assert err.value.field == field
    assert os.path.join("manifests", "registry.ollama.ai", "library", "bad", "latest") in str(err.value)


def test_absent_model_is_a_manifest_error(tmp_path: Path) -> None:
    missing = "model registry.ollama.ai/library/nope:latest is not in the Ollama store"
    with pytest.raises(ManifestError, match=re.escape(missing)):
        read_ollama_manifest("nope", tmp_path)


def test_blob_path_accepts_old_colon_names(tmp_path: Path) -> None:
    (tmp_path / "blobs").mkdir()
    assert ollama_blob_path(tmp_path, HEX_A) == tmp_path / "blobs" / f"sha256-{HEX_A}"
    (tmp_path / "blobs" / f"sha256:{HEX_A}").write_bytes(b"x")
    assert ollama_blob_path(tmp_path, HEX_A) == tmp_path / "blobs" / f"sha256:{HEX_A}"
    with pytest.raises(ManifestError):
        ollama_blob_path(tmp_path, "../" + HEX_A[3:])


def test_resolve_model_maps_ollama_names_to_model_and_projector_blobs(tmp_path: Path) -> None:
    _write_manifest(tmp_path, "acme/vis:1", {"layers": [_layer(MEDIA_MODEL, HEX_A, 1),
                                                        _layer(MEDIA_PROJECTOR, "b" * 64, 1)]})
    assert resolve_model("ollama:acme/vis:1", store=tmp_path) == [
        os.fspath(tmp_path / "blobs" / f"sha256-{HEX_A}"), os.fspath(tmp_path / "blobs" / f"sha256-{'b' * 64}")]
    assert resolve_model("some/file.gguf") == ["some/file.gguf"]
    _write_manifest(tmp_path, "noweights", {"layers": [_layer("application/vnd.ollama.image.params", HEX_A, 1)]})
    with pytest.raises(ManifestError, match=re.escape("has no layer of type application/vnd.ollama.image.model")):
        resolve_model("ollama:noweights", store=tmp_path)


# --- Hugging Face -----------------------------------------------------------------------------

def test_hf_spec_and_cache_root(tmp_path: Path) -> None:
    assert parse_hf_spec("org/name") == parse_hf_spec("org/name@main")
    assert parse_hf_spec("Org/Name-GGUF@v1.0").folder == "models--Org--Name-GGUF"
    for bad in ("name", "a/b/c", "../x", "org/..", "org/name@../../x"):
        with pytest.raises(UsageError):
            parse_hf_spec(bad)
    assert default_hf_cache({"HF_HUB_CACHE": "/c", "HF_HOME": "/h"}) == Path("/c")
    assert default_hf_cache({"HF_HOME": "/h"}) == Path("/h/hub")
    assert default_hf_cache({}, tmp_path) == tmp_path / ".cache" / "huggingface" / "hub"


@needs_symlinks
def test_hf_snapshot_lists_links_with_expected_digests(tmp_path: Path) -> None:
    repo = tmp_path / "models--org--m"
    commit = "1" * 40
    (repo / "blobs").mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    snap = repo / "snapshots" / commit / "sub"
    snap.mkdir(parents=True)
    big = hashlib.sha256(b"weights").hexdigest()
    (repo / "blobs" / big).write_bytes(b"weights")
    (snap / "m.gguf").symlink_to(f"../../../blobs/{big}")
    (snap.parent / "outside").symlink_to("/etc/hostname")
    (repo / "blobs" / "x.incomplete").write_bytes(b"")
    shot = read_hf_snapshot("org/m", tmp_path)
    assert shot.commit == commit
    by_name = {f.name: f for f in shot.files}
    assert by_name["sub/m.gguf"].algorithm == "sha256" and by_name["sub/m.gguf"].expected == big
    assert by_name["outside"].problem.startswith("link points outside the cache's blobs")
    assert shot.incomplete == (repo / "blobs" / "x.incomplete",)
    with pytest.raises(ManifestError, match="revision 'dev' is not cached"):
        read_hf_snapshot("org/m@dev", tmp_path)


# --- checksum files ---------------------------------------------------------------------------

def test_sums_formats_case_and_escapes(tmp_path: Path) -> None:
    lines = [
        f"{HEX_A}  plain.gguf",
        f"{'B' * 64} *binary.gguf",
        f"SHA256 (tagged.gguf) = {'c' * 64}",
        f"SHA2-256(openssl.gguf)= {'d' * 64}",
        f"\\{'e' * 64}  back\\\\slash\\nnewline",
        f"\\SHA256 (tag\\\\esc) = {'f' * 64}",
        "# a comment",
        "",
        f"{'1' * 64}  dir/with space.gguf",
    ]
    (tmp_path / "SHA256SUMS").write_text("\n".join(lines) + "\n")
    entries = read_sums(tmp_path / "SHA256SUMS")
    assert [(e.name, e.sha256[0], e.line) for e in entries] == [
        ("plain.gguf", "a", 1), ("binary.gguf", "b", 2), ("tagged.gguf", "c", 3), ("openssl.gguf", "d", 4),
        ("back\\slash\nnewline", "e", 5), ("tag\\esc", "f", 6), ("dir/with space.gguf", "1", 9)]
    assert entries[0].path == tmp_path.resolve() / "plain.gguf"


@pytest.mark.parametrize("line, message", [
    (f"{HEX_A}  ../escape.gguf", "leaves the checksum file's folder"),
    (f"{HEX_A}  /etc/passwd", "leaves the checksum file's folder"),
    (f"SHA256 (a/../../x) = {HEX_A}", "leaves the checksum file's folder"),
    (f"MD5 (x) = {'a' * 32}", "algorithm 'MD5' is not sha256"),
    (f"{'a' * 40}  x", "digest has 40 hex digits"),
    ("garbage", "not a GNU, BSD or OpenSSL checksum line"),
    (f"\\{HEX_A}  bad\\escape", "bad escape"),
])
def test_bad_sums_lines_are_manifest_errors_naming_the_line(tmp_path: Path, line: str, message: str) -> None:
    (tmp_path / "sums").write_text(f"{'0' * 64}  ok\n{line}\n")
    with pytest.raises(ManifestError, match=message) as err:
        read_sums(tmp_path / "sums")
    assert err.value.field == "line 2"


@needs_symlinks
def test_sums_name_through_a_link_out_of_the_folder_is_refused(tmp_path: Path) -> None:
    inner = tmp_path / "inner"
    inner.mkdir()
    (inner / "link").symlink_to(tmp_path)
    (inner / "sums").write_text(f"{HEX_A}  link/secret\n")
    # One entry saying so (issue 11: a link line no longer aborts the whole file).
    (entry,) = read_sums(inner / "sums")
    assert entry.problem == "resolves outside the checksum file's folder (a link pointing out): not followed"


# --- tensor manifest --------------------------------------------------------------------------

def _model(path: Path) -> None:
    write_gguf(path, [TensorSpec("emb", T.Q8_0, (64, 40), bytes(range(256)) * 10 + bytes(160)),
                      TensorSpec("norm", T.F32, (16,), bytes(64))], {"general.architecture": "llama"})


def test_rows_per_group_is_whole_rows_and_at_least_one() -> None:
    assert rows_per_group(68, 1 << 20) == 15420
    assert rows_per_group(3 << 20, 1 << 20) == 1
    assert rows_per_group(0) == 1


def test_tensor_manifest_round_trip(tmp_path: Path) -> None:
    _model(tmp_path / "m.gguf")
    built = build_tensor_manifest(open_model(tmp_path / "m.gguf"), group_bytes=68 * 16)
    write_tensor_manifest(built, tmp_path / "m.json")
    assert read_tensor_manifest(tmp_path / "m.json") == built
    doc = json.loads((tmp_path / "m.json").read_text())
    assert doc["format"] == "ggaudit-tensor-manifest" and doc["version"] == 1
    assert doc["files"][0]["sha256"] == hashlib.sha256((tmp_path / "m.gguf").read_bytes()).hexdigest()
    emb = doc["tensors"][0]
    assert (emb["rows_per_group"], len(emb["row_groups"]), emb["n_rows"]) == (16, 3, 40)
    assert tensor_manifest_to_json(built) == doc


@pytest.mark.parametrize("edit, field", [
    (lambda d: d.update(version=2), "version"),
    (lambda d: d.update(format="other"), "format"),
    (lambda d: d.update(row_group_bytes=0), "row_group_bytes"),
    (lambda d: d["files"][0].update(name="../m.gguf"), "files[0].name"),
    (lambda d: d["files"][0].update(sha256="XY"), "files[0].sha256"),
    (lambda d: d["tensors"][0].update(shape=[64, -1]), "tensors[0].shape"),
    (lambda d: d["tensors"][0]["row_groups"].pop(), "tensors[0].row_groups"),
    (lambda d: d["tensors"][1].update(row_groups=["zz"]), "tensors[1].row_groups[0]"),
    (lambda d: d["tensors"][0].update(n_rows=True), "tensors[0].n_rows"),
    (lambda d: d["tensors"][1].update(file="other.gguf"), "tensors[1].file"),
    (lambda d: d["tensors"][1].update(name="emb"), "tensors[1].name"),
])
def test_malformed_tensor_manifest_names_the_field(tmp_path: Path, edit, field: str) -> None:
    _model(tmp_path / "m.gguf")
    doc = tensor_manifest_to_json(build_tensor_manifest(open_model(tmp_path / "m.gguf"), group_bytes=68 * 16))
    edit(doc)
    (tmp_path / "m.json").write_text(json.dumps(doc))
    with pytest.raises(ManifestError) as err:
        read_tensor_manifest(tmp_path / "m.json")
    assert err.value.field == field


def test_non_json_and_huge_manifests_are_refused(tmp_path: Path) -> None:
    (tmp_path / "m.json").write_bytes(b"\xff\xfe")
    with pytest.raises(ManifestError, match="not UTF-8") as err:
        read_tensor_manifest(tmp_path / "m.json")
    assert err.value.offset == 0
    (tmp_path / "m.json").write_text('{"format": ')
    with pytest.raises(GGAuditError, match="tensor manifest is not JSON"):
        read_tensor_manifest(tmp_path / "m.json")
    (tmp_path / "m.json").write_text("[" * 100_000)
    with pytest.raises(ManifestError, match="nests too deeply"):
        read_tensor_manifest(tmp_path / "m.json")


def test_sums_lines_split_only_on_newlines(tmp_path: Path) -> None:
    (tmp_path / "sums").write_bytes(f"{HEX_A}  odd\u2028name\r\n{HEX_A}  b\n".encode())
    assert [e.name for e in read_sums(tmp_path / "sums")] == ["odd\u2028name", "b"]


def test_file_changed_after_opening_is_a_read_error(tmp_path: Path) -> None:
    _model(tmp_path / "m.gguf")
    model = open_model(tmp_path / "m.gguf")
    with open(tmp_path / "m.gguf", "ab") as f:
        f.write(b"more")
    with pytest.raises(ReadError, match="file changed"):
        build_tensor_manifest(model)


_json_values = st.recursive(st.none() | st.booleans() | st.integers(-2, 2**70) | st.text(max_size=70),
                            lambda inner: st.lists(inner, max_size=4)
                            | st.dictionaries(st.sampled_from(["layers", "config", "digest", "size", "mediaType",
                                                               "format", "version", "files", "tensors", "name",
                                                               "sha256", "row_groups", "row_group_bytes"]),
                                              inner, max_size=5), max_leaves=20)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.binary(max_size=300) | st.builds(lambda v: json.dumps(v).encode(), _json_values)
       | st.builds(lambda lines: "\n".join(lines).encode(),
                   st.lists(st.sampled_from([f"{HEX_A}  a", f"SHA256 ({HEX_A[:5]}) = {HEX_A}", "\\x  y",
                                             f"{HEX_A} *../b", "SHA2-256(c)= 00", "#", ""]) | st.text(max_size=40),
                            max_size=5)))
def test_parsers_only_ever_raise_their_own_errors(tmp_path: Path, data: bytes) -> None:
    (tmp_path / "f").write_bytes(data)
    store = tmp_path / "store"
    _write_manifest(store, "x", data.decode("utf-8", "replace"))
    for parse in (lambda: read_sums(tmp_path / "f"), lambda: read_tensor_manifest(tmp_path / "f"),
                  lambda: read_ollama_manifest("x", store)):
        with contextlib.suppress(ManifestError):
            parse()
