"""`verify ollama:NAME` against a real Ollama-shaped store laid out in tmp_path."""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from gguf import GGMLQuantizationType as T

from ggaudit.format.build import TensorSpec, gguf_bytes
from ggaudit.cli import main
from ggaudit.format.layout import open_model
from ggaudit.errors import ManifestError
from ggaudit.stores.ollama import MEDIA_MODEL, MEDIA_PROJECTOR
from ggaudit.verify.walk.ollama import verify_ollama

from platforms import needs_symlinks


CONFIG = "application/vnd.docker.container.image.v1+json"
PARAMS = "application/vnd.ollama.image.params"
TEMPLATE = "application/vnd.ollama.image.template"


@dataclass
class Store:
    root: Path
    blobs: dict[str, Path]      # role -> blob path

    def blob(self, role: str) -> Path:
        return self.blobs[role]


def _gguf(seed: int) -> bytes:
    rng = np.random.default_rng(seed)
    data, _ = gguf_bytes([TensorSpec("token_embd.weight", T.F16, (32, 8),
                                     rng.standard_normal(256).astype("<f2").tobytes())],
                         {"general.architecture": "llama"})
    return data


def _add_blob(root: Path, content: bytes, *, old_name: bool = False) -> tuple[str, Path]:
    digest = hashlib.sha256(content).hexdigest()
    path = root / "blobs" / (f"sha256:{digest}" if old_name else f"sha256-{digest}")
    path.write_bytes(content)
    return digest, path


def _add_model(root: Path, parts: tuple[str, str, str, str], layers: list[tuple[str, str, bytes]],
               config: bytes) -> dict[str, Path]:
    """Write blobs and the manifest; ``layers`` are (role, media type, content)."""
    paths, entries = {}, []
    for role, media, content in layers:
        digest, paths[role] = _add_blob(root, content, old_name=role == "template")
        entries.append({"mediaType": media, "digest": f"sha256:{digest}", "size": len(content)})
    cdigest, paths["config"] = _add_blob(root, config)
    manifest = {"schemaVersion": 2, "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
                "config": {"mediaType": CONFIG, "digest": f"sha256:{cdigest}", "size": len(config)},
                "layers": entries}
    mpath = root / "manifests" / Path(*parts)
    mpath.parent.mkdir(parents=True, exist_ok=True)
    mpath.write_text(json.dumps(manifest))
    return paths


@pytest.fixture
def store(tmp_path: Path) -> Store:
    root = tmp_path / "models"
    (root / "blobs").mkdir(parents=True)
    blobs = {}
    for model, parts, seed in (("tiny", ("registry.ollama.ai", "library", "tiny", "latest"), 1),
                               ("vis", ("registry.ollama.ai", "acme", "vis", "q4"), 2)):
        paths = _add_model(root, parts, [
            ("model", MEDIA_MODEL, _gguf(seed)),
            ("projector", MEDIA_PROJECTOR, _gguf(seed + 10)),
            ("params", PARAMS, json.dumps({"seed": seed}).encode()),
            ("template", TEMPLATE, f"{{{{ .Prompt }}}} {seed}".encode()),
        ], json.dumps({"model_format": "gguf", "n": seed}).encode())
        blobs.update({f"{model}.{role}": p for role, p in paths.items()})
    return Store(root, blobs)


def _damage(store: Store) -> None:
    """vis: model blob corrupted in place, params blob missing, projector one byte too long."""
    model = store.blob("vis.model")
    with open(model, "r+b") as f:
        f.seek(200)
        byte = f.read(1)
        f.seek(200)
        f.write(bytes([byte[0] ^ 0x01]))
    store.blob("vis.params").unlink()
    with open(store.blob("vis.projector"), "ab") as f:
        f.write(b"\0")


def test_clean_models_verify_ok(store: Store) -> None:
    for name in ("tiny", "acme/vis:q4"):
        report = verify_ollama(name, store.root)
        assert report.ok, report.mismatches
        assert len(report.checked) == 5
        assert {c.subject for c in report.checked} == {MEDIA_MODEL, MEDIA_PROJECTOR, PARAMS, TEMPLATE, CONFIG}
    old = verify_ollama("tiny", store.root).checked[3]
    assert old.path.endswith(f"sha256:{old.digest}")


def test_damaged_model_reports_corrupt_missing_and_resized_blobs(store: Store) -> None:
    _damage(store)
    report = verify_ollama("acme/vis:q4", store.root)
    assert not report.ok
    by_kind = {m.kind: m for m in report.mismatches}
    assert set(by_kind) == {"sha256", "missing", "size"}
    model = store.blob("vis.model")
    digest = model.name[len("sha256-"):]
    assert by_kind["sha256"].path == os.fspath(model)
    assert by_kind["sha256"].subject == MEDIA_MODEL
    assert by_kind["sha256"].expected == digest
    assert by_kind["sha256"].actual == hashlib.sha256(model.read_bytes()).hexdigest()
    assert by_kind["missing"].subject == PARAMS and by_kind["missing"].path == os.fspath(store.blob("vis.params"))
    size = by_kind["size"]
    assert (size.subject, size.expected, size.actual) == (
        MEDIA_PROJECTOR, str(len(_gguf(12))), str(len(_gguf(12)) + 1))
    assert verify_ollama("tiny", store.root).ok      # the other model shares nothing and is fine


def test_fail_fast_stops_at_the_first_problem(store: Store) -> None:
    _damage(store)
    report = verify_ollama("acme/vis:q4", store.root, fail_fast=True)
    assert [m.kind for m in report.mismatches] == ["sha256"]
    assert report.stopped_early


def test_stray_partial_files_are_mentioned(store: Store) -> None:
    digest = store.blob("tiny.model").name[len("sha256-"):]
    (store.root / "blobs" / f"sha256-{digest}-partial").write_bytes(b"")
    (store.root / "blobs" / f"sha256-{'9' * 64}-partial-0").write_bytes(b"")
    report = verify_ollama("tiny", store.root)
    assert report.ok
    assert set(report.warnings) == {
        f"stray partial download: {store.root / 'blobs' / f'sha256-{digest}-partial'} (a blob of this model)",
        f"stray partial download: {store.root / 'blobs' / ('sha256-' + '9' * 64 + '-partial-0')}"}


def test_digest_with_dot_dot_never_becomes_a_path(store: Store, tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_bytes(b"x")
    evil = store.root / "manifests" / "registry.ollama.ai" / "library" / "evil" / "latest"
    evil.parent.mkdir(parents=True)
    evil.write_text(json.dumps({"layers": [
        {"mediaType": MEDIA_MODEL, "digest": "sha256:../../secret", "size": 1}]}))
    with pytest.raises(ManifestError) as err:
        verify_ollama("evil", store.root)
    assert err.value.field == "layers[0].digest"
    result = CliRunner().invoke(main, ["verify", "ollama:evil", "--store", str(store.root)])
    assert result.exit_code == 2
    assert result.stderr == (f"ggaudit: error: {evil}: layers[0].digest: digest 'sha256:../../secret' is not of "
                             "the form sha256:<64 hex digits>\n")


def test_cli_exit_codes_and_fio_style_lines(store: Store) -> None:
    runner = CliRunner()
    ok = runner.invoke(main, ["verify", "ollama:acme/vis:q4", "--store", str(store.root)])
    assert ok.exit_code == 0, ok.output
    assert ok.output.splitlines()[0] == "verify ollama: registry.ollama.ai/acme/vis:q4"
    _damage(store)
    # --no-cache: whether the first run's digests were old enough to be cached depends on the clock.
    bad = runner.invoke(main, ["verify", "--ollama", "acme/vis:q4", "--store", str(store.root), "--no-cache"])
    assert bad.exit_code == 1
    lines = bad.output.splitlines()
    model = store.blob("vis.model")
    i = lines.index(f"MISMATCH sha256: file {model}, offset 0, length {model.stat().st_size} ({MEDIA_MODEL}): "
                    "sha256 differs")
    assert lines[i + 1] == f"  expected: {model.name[len('sha256-'):]}"
    assert lines[i + 2] == f"  actual:   {hashlib.sha256(model.read_bytes()).hexdigest()}"
    params = store.blob("vis.params")
    assert f"MISMATCH missing: file {params} ({PARAMS}): file not found" in lines
    assert lines[-1].startswith("summary: 3 files checked, 0 from the cache") and lines[-1].endswith("3 mismatches")
    doc = json.loads(runner.invoke(main, ["verify", "ollama:acme/vis:q4", "--store", str(store.root),
                                          "--json"]).stdout)["models"][0]
    assert doc["ok"] is False and [m["kind"] for m in doc["mismatches"]] == ["sha256", "size", "missing"]


def test_cli_store_from_environment_and_unknown_model(store: Store) -> None:
    runner = CliRunner(env={"OLLAMA_MODELS": str(store.root)})
    assert runner.invoke(main, ["verify", "ollama:tiny:latest"]).exit_code == 0
    missing = runner.invoke(main, ["verify", "ollama:nope"])
    assert missing.exit_code == 2
    assert "model registry.ollama.ai/library/nope:latest is not in the Ollama store" in missing.stderr
    bad_name = runner.invoke(main, ["verify", "ollama:a/b/c/d"])
    assert bad_name.exit_code == 2 and "ggaudit: error: model name 'a/b/c/d'" in bad_name.stderr


def test_blob_verifies_against_its_own_name(store: Store) -> None:
    runner = CliRunner()
    blob = store.blob("tiny.model")
    assert runner.invoke(main, ["verify", str(blob)]).exit_code == 0
    with open(blob, "r+b") as f:
        f.write(b"\0\0\0\0")
    assert runner.invoke(main, ["verify", str(blob)]).exit_code == 1
    unnamed = store.root / "plain.gguf"
    unnamed.write_bytes(b"x")
    res = runner.invoke(main, ["verify", str(unnamed)])
    assert res.exit_code == 2 and "the file name holds no sha256" in res.stderr


def test_manifest_and_diff_accept_ollama_names(store: Store, tmp_path: Path) -> None:
    runner = CliRunner()
    out = tmp_path / "tiny.json"
    written = runner.invoke(main, ["manifest", "ollama:tiny", "--store", str(store.root), "-o", str(out)])
    assert written.exit_code == 0, written.output
    # The model layer and its projector, both holding a tensor named token_embd.weight.
    doc = json.loads(out.read_text())
    assert [f["name"] for f in doc["files"]] == [store.blob("tiny.model").name, store.blob("tiny.projector").name]
    assert [(t["file"], t["name"]) for t in doc["tensors"]] == [(f["name"], "token_embd.weight") for f in doc["files"]]
    verify = ["verify", "ollama:tiny", "--manifest", str(out), "--store", str(store.root)]
    assert runner.invoke(main, verify).exit_code == 0
    projector = store.blob("tiny.projector")
    offset = open_model(projector).tensor("token_embd.weight").offset + 2 * 64  # row 2 of 8 (64-byte rows)
    with open(projector, "r+b") as f:
        f.seek(offset)
        f.write(b"\xff")
    damaged = runner.invoke(main, [*verify, "--json"])
    assert damaged.exit_code == 1
    kinds = [(m["kind"], m["path"], m["rows"]) for m in json.loads(damaged.stdout)["models"][0]["mismatches"]]
    assert kinds == [("sha256", str(projector), None), ("tensor-data", str(projector), [0, 7])]
    differ = runner.invoke(main, ["diff", "ollama:tiny", "ollama:acme/vis:q4", "--store", str(store.root)])
    assert differ.exit_code == 1
    assert "DIFFER tensor token_embd.weight (F16 [32, 8]): 8 of 8 rows differ" in differ.output.splitlines()


def test_several_targets_are_reported_in_order(store: Store) -> None:
    _damage(store)
    runner = CliRunner()
    # --no-cache: a blob two models share may come from the digest cache in one run and not another.
    args = ["verify", "ollama:tiny", "ollama:acme/vis:q4", "ollama:nope", "--store", str(store.root), "--jobs", "2",
            "--no-cache"]
    result = runner.invoke(main, args)
    assert result.exit_code == 2                    # one target unreadable: its error, the others' reports
    assert result.stderr.splitlines() == [
        f"ggaudit: error: {store.root / 'manifests/registry.ollama.ai/library/nope/latest'}: model "
        f"registry.ollama.ai/library/nope:latest is not in the Ollama store {store.root} (given by --store)"]
    alone = [runner.invoke(main, ["verify", name, "--store", str(store.root), "--no-cache"]).stdout
             for name in ("ollama:tiny", "ollama:acme/vis:q4")]
    assert result.stdout == "".join(alone) + "3 models: 1 with findings, 1 clean, 1 error\n"
    doc = json.loads(runner.invoke(main, [*args, "--json"]).stdout)
    assert doc["status"] == "error"
    assert [m.get("ok", m.get("target")) for m in doc["models"]] == [True, False, "ollama:nope"]
    assert doc["models"][2]["error"]["kind"] == "ManifestError"


@needs_symlinks
def test_blob_linked_out_of_the_store_is_reported_not_followed(store: Store, tmp_path: Path) -> None:
    params = store.blob("tiny.params")
    outside = tmp_path / "elsewhere"
    outside.write_bytes(params.read_bytes())        # even the right bytes: the link itself is the finding
    params.unlink()
    params.symlink_to(outside)
    report = verify_ollama("tiny", store.root)
    assert [(m.kind, m.subject, m.detail) for m in report.mismatches] == [
        ("link", PARAMS, f"blob is a link pointing outside the store: {outside}")]
    assert os.fspath(params) not in {c.path for c in report.checked}


@needs_symlinks
def test_blobs_folder_moved_to_another_disk_by_a_link_is_fine(store: Store, tmp_path: Path) -> None:
    moved = tmp_path / "big-disk-blobs"
    (store.root / "blobs").rename(moved)
    (store.root / "blobs").symlink_to(moved)
    assert verify_ollama("tiny", store.root).ok
