"""`verify` over every local store, offline (issue 13): the whole Ollama store in one run (tensor and draft
layers, a model without a model layer, orphan blobs), Hugging Face --local-dir downloads, LM Studio and
GPT4All folders, checksum files with --ignore-missing and --base, and a bare --sha256."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

import ggaudit
from ggaudit.errors import ManifestError, UsageError
from ggaudit.untrusted import quote
from ggaudit.stores.gpt4all import default_gpt4all_store
from ggaudit.stores.lmstudio import default_lmstudio_store

from platforms import needs_symlinks
from support import assert_one_line_error, run_cli
from stores_support import (MEDIA_CONFIG, MEDIA_DRAFT, MEDIA_MODEL, MEDIA_TENSOR, gguf, gpt4all_folder, hf_local_dir,
                            lmstudio_models, ollama_everything, sha256)

CHAT, IMAGEGEN = "registry.ollama.ai/library/chat:latest", "registry.ollama.ai/library/imagegen:latest"


def _mismatches(report: ggaudit.VerifyReport) -> list[tuple[str, str, str]]:
    return [(m.kind, m.path, m.subject) for m in report.mismatches]


def _checked(report: ggaudit.VerifyReport) -> list[tuple[str, str, str, bool]]:
    return [(c.algorithm, c.path, c.subject, c.ok) for c in report.checked]


# --- Ollama -----------------------------------------------------------------------------------------

def test_the_whole_ollama_store_is_one_run_each_model_its_own_target_then_the_orphans(tmp_path: Path) -> None:
    store = ollama_everything(tmp_path / "models")
    result = run_cli(["verify", "ollama:*", "--store", store.root, "--json"])
    assert result.exit_code == 1, result.stderr
    doc = json.loads(result.stdout)
    assert doc["status"] == "findings"
    assert [(m["kind"], m["source"], m["ok"]) for m in doc["models"]] == [
        ("ollama", CHAT, False), ("ollama", IMAGEGEN, True), ("ollama-store", os.fspath(store.root), False)]
    chat, imagegen, whole = doc["models"]
    assert [(c["subject"], c["path"], c["ok"]) for c in chat["checked"]] == [
        (MEDIA_MODEL, os.fspath(store.blob("chat.model")), False),
        (MEDIA_DRAFT, os.fspath(store.blob("chat.draft")), True),
        (MEDIA_CONFIG, os.fspath(store.blob("chat.config")), True)]
    assert [(m["kind"], m["path"], m["subject"], m["actual"]) for m in chat["mismatches"]] == [
        ("sha256", os.fspath(store.blob("chat.model")), MEDIA_MODEL,
         hashlib.sha256(store.blob("chat.model").read_bytes()).hexdigest())]
    # No model layer: checked by the layers it has, each tensor layer named by its tensor.
    assert [(c["subject"], c["ok"]) for c in imagegen["checked"]] == [
        (f"{MEDIA_TENSOR} vae/conv.weight", True), (f"{MEDIA_TENSOR} text/embed.weight", True), (MEDIA_CONFIG, True)]
    assert whole["checked"] == []
    assert whole["mismatches"] == [{"kind": "orphan", "path": os.fspath(store.orphan), "subject": "blob",
                                    "expected": None, "actual": None, "offset": 0, "length": 30, "tensor": None,
                                    "rows": None, "detail": "no manifest of the store names this blob"}]


def test_ollama_all_text_lines_and_partials_said_once(tmp_path: Path) -> None:
    store = ollama_everything(tmp_path / "models")
    partial = store.root / "blobs" / f"sha256-{'7' * 64}-partial"
    partial.write_bytes(b"")
    result = run_cli(["verify", "--ollama", "*", "--store", store.root])
    assert result.exit_code == 1
    assert result.stderr == f"ggaudit: warning: stray partial download: {partial}\n"
    assert result.stdout.splitlines()[-4:] == [
        f"verify ollama-store: {store.root}",
        f"MISMATCH orphan: file {store.orphan}, offset 0, length 30 (blob): no manifest of the store names this blob",
        "summary: 0 files checked, 0 from the cache, 0 bytes hashed, 1 mismatch",
        "2 models and 1 store: 2 with findings, 1 clean, 0 errors"]


def test_library_ollama_all_is_one_report_of_the_whole_store(tmp_path: Path) -> None:
    store = ollama_everything(tmp_path / "models")
    report = ggaudit.verify("ollama:*", store=store.root)
    assert (report.kind, report.source, report.ok) == ("ollama-store", os.fspath(store.root), False)
    assert _mismatches(report) == [("sha256", os.fspath(store.blob("chat.model")), f"{CHAT}: {MEDIA_MODEL}"),
                                   ("orphan", os.fspath(store.orphan), "blob")]
    assert [c.subject for c in report.checked if c.ok] == [
        f"{CHAT}: {MEDIA_DRAFT}", f"{CHAT}: {MEDIA_CONFIG}", f"{IMAGEGEN}: {MEDIA_TENSOR} vae/conv.weight",
        f"{IMAGEGEN}: {MEDIA_TENSOR} text/embed.weight", f"{IMAGEGEN}: {MEDIA_CONFIG}"]


def test_a_clean_store_with_no_orphans_exits_0(tmp_path: Path) -> None:
    store = ollama_everything(tmp_path / "models")
    store.orphan.unlink()
    store.blob("chat.model").write_bytes(gguf(1))      # undamaged again
    result = run_cli(["verify", "ollama:*", "--store", store.root])
    assert result.exit_code == 0, result.stdout
    assert result.stdout.splitlines()[-2:] == [
        "summary: 0 files checked, 0 from the cache, 0 bytes hashed, 0 mismatches",
        "2 models and 1 store: 0 with findings, 3 clean, 0 errors"]


def test_an_unreadable_manifest_is_an_error_of_its_model_and_a_warning_of_the_store(tmp_path: Path) -> None:
    store = ollama_everything(tmp_path / "models")
    manifest = store.root / "manifests" / "registry.ollama.ai" / "library" / "imagegen" / "latest"
    manifest.write_text("{")
    report = ggaudit.verify("ollama:*", store=store.root)
    assert report.warnings[0].startswith(f"manifest of {IMAGEGEN} unreadable, its blobs may show as orphans: ")
    # Its blobs are now named by no manifest the run could read.
    assert sorted(m.path for m in report.mismatches if m.kind == "orphan") == sorted(
        os.fspath(p) for p in (store.orphan, store.blob("imagegen.t0"), store.blob("imagegen.t1"),
                               store.blob("imagegen.config")))
    result = run_cli(["verify", "ollama:*", "--store", store.root, "--json"])
    assert result.exit_code == 2
    assert ["failed" if "error" in m else m["kind"] for m in json.loads(result.stdout)["models"]] == [
        "ollama", "failed", "ollama-store"]


def test_the_store_listing_skips_odd_entries_and_links_out(tmp_path: Path) -> None:
    store = ollama_everything(tmp_path / "models")
    (store.root / "manifests" / "registry.ollama.ai" / "library" / "stray-file").write_text("x")
    report = ggaudit.verify("ollama:*", store=store.root)
    assert report.warnings == (
        f"not an Ollama manifest folder, skipped: "
        f"{store.root / 'manifests' / 'registry.ollama.ai' / 'library' / 'stray-file'}",)


# --- Hugging Face --local-dir -------------------------------------------------------------------------

def test_hf_local_dir_good_damaged_stale_unlisted_and_gone(tmp_path: Path) -> None:
    d = hf_local_dir(tmp_path / "dl")
    report = ggaudit.verify(f"hf-local:{d.root}")
    assert (report.kind, report.ok) == ("hf-local", False)
    assert _checked(report) == [("git-sha1", os.fspath(d.stale), "README.md", True),
                                ("sha256", os.fspath(d.good), "model.gguf", True),
                                ("sha256", os.fspath(d.damaged), "sub/weights.bin", False)]
    assert _mismatches(report) == [("sha256", os.fspath(d.damaged), "sub/weights.bin"),
                                   ("missing", os.fspath(d.gone), "gone.bin")]
    assert report.warnings == (
        f"{d.stale}: modified after it was downloaded (mtime later than its download metadata)",
        f"{d.unlisted}: no download metadata: not checked")
    result = run_cli(["verify", f"hf-local:{d.root}"])
    assert result.exit_code == 1
    assert result.stderr.splitlines() == [f"ggaudit: warning: {w}" for w in report.warnings]


def test_hf_local_dir_without_metadata_is_bad_input(tmp_path: Path) -> None:
    (tmp_path / "plain").mkdir()
    assert_one_line_error(run_cli(["verify", f"hf-local:{tmp_path / 'plain'}"]),
                          "no download metadata: not a folder huggingface-cli download --local-dir wrote")


@needs_symlinks
def test_hf_local_dir_a_link_pointing_out_is_reported_not_opened(tmp_path: Path) -> None:
    d = hf_local_dir(tmp_path / "dl")
    (tmp_path / "secret").write_bytes(b"w" * 300)
    d.damaged.unlink()
    d.damaged.symlink_to(tmp_path / "secret")
    report = ggaudit.verify(f"hf-local:{d.root}")
    assert (report.mismatches[0].kind, report.mismatches[0].subject, report.mismatches[0].detail) == (
        "link", "sub/weights.bin", "a link pointing outside the folder (or a loop): not followed")
    assert all(c.path != os.fspath(d.damaged) for c in report.checked)


# --- LM Studio ----------------------------------------------------------------------------------------

@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    for variable in ("HOME", "USERPROFILE"):
        monkeypatch.setenv(variable, os.fspath(home))
    for variable in ("LOCALAPPDATA", "XDG_DATA_HOME"):
        monkeypatch.delenv(variable, raising=False)
    return home


def test_lmstudio_all_models_good_truncated_and_an_incomplete_split_set(home: Path) -> None:
    root = home / ".lmstudio" / "models"
    paths = lmstudio_models(root)
    report = ggaudit.verify("lmstudio:")
    assert (report.kind, report.ok) == ("lmstudio", False)
    assert _checked(report) == [("gguf-layout", os.fspath(paths["good"]), "pub/good/good.gguf", True),
                                ("gguf-layout", os.fspath(paths["split1"]), "pub/split/m-00001-of-00003.gguf", True),
                                ("gguf-layout", os.fspath(paths["split3"]), "pub/split/m-00003-of-00003.gguf", True)]
    full = len(gguf(11))
    assert [(m.kind, m.path, m.subject, m.offset, m.detail) for m in report.mismatches] == [
        ("header", os.fspath(paths["trunc"]), "pub/trunc/trunc.gguf", 118,
         f"tensor data [128, {full}) runs past the end of the file ({full - 10} bytes)"),
        ("missing", os.fspath(root / "pub" / "split" / "m-00002-of-00003.gguf"), "pub/split/m-00002-of-00003.gguf",
         None, "shard 2 of 3 of a split set not found")]
    assert run_cli(["verify", "lmstudio:"]).exit_code == 1


def test_lmstudio_one_model_text_lines(home: Path) -> None:
    paths = lmstudio_models(home / ".lmstudio" / "models")
    result = run_cli(["verify", "lmstudio:pub/good"])
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == [
        f"verify lmstudio: {home / '.lmstudio' / 'models'} pub/good",
        f"ok gguf-layout: file {paths['good']}, {paths['good'].stat().st_size} bytes (pub/good/good.gguf)",
        "summary: 1 file checked, 0 from the cache, 0 bytes hashed, 0 mismatches"]


def test_lmstudio_older_folder_and_bad_names(home: Path) -> None:
    older = home / ".cache" / "lm-studio" / "models"
    lmstudio_models(older)
    assert default_lmstudio_store() == older
    assert ggaudit.verify("lmstudio:pub/good").ok
    assert_one_line_error(run_cli(["verify", "lmstudio:../etc"]), "is not PUBLISHER/MODEL")
    assert_one_line_error(run_cli(["verify", "lmstudio:pub/absent"]), "is not in the LM Studio folder")


# --- GPT4All ------------------------------------------------------------------------------------------

def test_gpt4all_size_and_md5_from_its_list_and_structure_for_the_rest(home: Path) -> None:
    root = default_gpt4all_store()          # this OS's folder under the test's home
    assert home in root.parents
    paths = gpt4all_folder(root)
    report = ggaudit.verify("gpt4all:")
    assert (report.kind, report.source, report.ok) == ("gpt4all", os.fspath(root), False)
    assert _checked(report) == [("md5", os.fspath(paths["badmd5"]), "badmd5.gguf", False),
                                ("md5", os.fspath(paths["good"]), "good.gguf", True),
                                ("gguf-layout", os.fspath(paths["other"]), "other.gguf", True)]
    size = paths["badsize"].stat().st_size
    assert [(m.kind, m.path, m.expected, m.actual) for m in report.mismatches] == [
        ("md5", os.fspath(paths["badmd5"]), "0" * 32, hashlib.md5(paths["badmd5"].read_bytes()).hexdigest()),
        ("size", os.fspath(paths["badsize"]), str(size + 1), str(size))]
    assert report.warnings == ()
    assert run_cli(["verify", "gpt4all:"]).exit_code == 1


def test_gpt4all_without_a_list_checks_structure_and_says_so(home: Path) -> None:
    root = home / "g"
    paths = gpt4all_folder(root)
    (root / "models3.json").unlink()
    report = ggaudit.verify("gpt4all:", store=root)
    assert report.ok and [c.algorithm for c in report.checked] == ["gguf-layout"] * 4
    assert report.warnings == (f"no model list (models3.json, models2.json, models.json) in {root}: structure "
                               "checked, no digests",)
    assert len(paths) == 4


def test_gpt4all_a_malformed_list_is_bad_input(home: Path) -> None:
    root = home / "g"
    gpt4all_folder(root)
    (root / "models3.json").write_text(json.dumps([{"filename": "good.gguf", "md5sum": "xyz"}]))
    with pytest.raises(ManifestError, match=r"md5sum 'xyz' is not 32 hex digits") as err:
        ggaudit.verify("gpt4all:", store=root)
    assert err.value.field == "[0].md5sum"


def test_default_store_folders_per_os(tmp_path: Path) -> None:
    home = tmp_path / "h"
    assert default_gpt4all_store({"LOCALAPPDATA": r"C:\Users\u\AppData\Local"}, "win32") == \
        Path(r"C:\Users\u\AppData\Local") / "nomic.ai" / "GPT4All"
    assert default_gpt4all_store({}, "darwin", home) == \
        home / "Library" / "Application Support" / "nomic.ai" / "GPT4All"
    assert default_gpt4all_store({}, "linux", home) == home / ".local" / "share" / "nomic.ai" / "GPT4All"
    assert default_gpt4all_store({"XDG_DATA_HOME": "/x"}, "linux", home) == \
        Path("/x") / "nomic.ai" / "GPT4All"
    assert default_lmstudio_store({}, "win32", home) == home / ".lmstudio" / "models"


# --- sums and --sha256 ----------------------------------------------------------------------------------

def _sums(tmp_path: Path) -> tuple[Path, Path]:
    """SHA256SUMS in its own folder naming files that live in data/: good.bin, bad.bin, gone.bin."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "good.bin").write_bytes(b"good")
    (data / "bad.bin").write_bytes(b"bad")
    (tmp_path / "lists").mkdir()
    sums = tmp_path / "lists" / "SHA256SUMS"
    sums.write_text(f"{sha256(b'good')}  good.bin\n{'0' * 64}  bad.bin\n{sha256(b'x')}  gone.bin\n")
    return sums, data


def test_sums_base_and_ignore_missing(tmp_path: Path) -> None:
    sums, data = _sums(tmp_path)
    report = ggaudit.verify(sums=sums, base=data, ignore_missing=True)
    assert _mismatches(report) == [("sha256", os.fspath(data / "bad.bin"), "bad.bin")]
    assert report.warnings == ("1 of 3 files named are absent, skipped (--ignore-missing)",)
    without = ggaudit.verify(sums=sums, base=data)
    assert _mismatches(without) == [("sha256", os.fspath(data / "bad.bin"), "bad.bin"),
                                    ("missing", os.fspath(data / "gone.bin"), "gone.bin")]
    result = run_cli(["verify", "--sums", sums, "--base", data, "--ignore-missing"])
    assert result.exit_code == 1
    assert result.stderr == "ggaudit: warning: 1 of 3 files named are absent, skipped (--ignore-missing)\n"


def test_sums_ignore_missing_with_nothing_present_verified_nothing(tmp_path: Path) -> None:
    sums, _ = _sums(tmp_path)
    assert_one_line_error(run_cli(["verify", "--sums", sums, "--ignore-missing"]),
                          "no file it names is present (--ignore-missing): no file was verified")


def test_sums_base_confines_names(tmp_path: Path) -> None:
    sums, data = _sums(tmp_path)
    sums.write_text(f"{sha256(b'good')}  ../lists/SHA256SUMS\n")
    assert_one_line_error(run_cli(["verify", "--sums", sums, "--base", data]),
                          "name '../lists/SHA256SUMS' leaves the base folder")
    assert_one_line_error(run_cli(["verify", "--base", data, data / "good.bin"]),
                          "--ignore-missing and --base are for --sums FILE")


@pytest.mark.parametrize("given, status", [(sha256(b"good"), 0), (sha256(b"good").upper(), 0),
                                           (sha256(b"bad"), 1)])
def test_sha256_of_one_file(tmp_path: Path, given: str, status: int) -> None:
    (tmp_path / "f.bin").write_bytes(b"good")
    result = run_cli(["verify", "--sha256", given, tmp_path / "f.bin"])
    assert result.exit_code == status
    if status == 0:
        assert result.stdout.splitlines() == [
            f"verify file: {tmp_path / 'f.bin'}",
            f"ok sha256 {sha256(b'good')}: file {tmp_path / 'f.bin'}, 4 bytes (--sha256)",
            "summary: 1 file checked, 0 from the cache, 4 bytes hashed, 0 mismatches"]
    else:
        report = ggaudit.verify(tmp_path / "f.bin", sha256=given)
        assert [(m.kind, m.expected, m.actual) for m in report.mismatches] == [("sha256", given, sha256(b"good"))]


@pytest.mark.parametrize("given", ["abc", "g" * 64, "0" * 63, "0" * 65, ""])
def test_sha256_malformed_is_bad_input(tmp_path: Path, given: str) -> None:
    (tmp_path / "f.bin").write_bytes(b"good")
    line = assert_one_line_error(run_cli(["verify", "--sha256", given, tmp_path / "f.bin"]), "--sha256: ")
    assert line == f"ggaudit: error: --sha256: {quote(given)} is not a sha256: 64 hex digits"
    with pytest.raises(UsageError) as err:
        ggaudit.verify(tmp_path / "f.bin", sha256=given)
    assert err.value.field == "sha256"


def test_sha256_takes_one_file(tmp_path: Path) -> None:
    assert_one_line_error(run_cli(["verify", "--sha256", "0" * 64, tmp_path / "a", tmp_path / "b"]),
                          "--sha256 HEX checks one FILE and takes no --manifest")
