"""Issue 35, section 3: no output replaces a file of a store the run depends on. A report's ``-o FILE`` (scan,
verify, check, rows) and ``manifest -o``/``--report`` naming a store's metadata (a Hugging Face ref, an Ollama
manifest or config blob, ``--local-dir`` download metadata, GPT4All's model list, a file LM Studio's model
folder holds) are refused, exit 2, one line, before anything runs, as its blobs are: each store says what it
relies on (``Store.relied_on``). Real store layouts in a temporary folder, every store kind, every command."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from platforms import needs_symlinks
from stores_support import (MEDIA_CONFIG, MEDIA_MODEL, MEDIA_PROJECTOR, git_blob_sha1, gpt4all_folder, hf_local_dir,
                            lmstudio_models)
from support import assert_one_line_error, run_cli, write_small_model

COMMIT = "0123456789abcdef0123456789abcdef01234567"
#: The report's ``-o`` of each command (the model's arguments follow the command's name).
REPORTS = (["scan"], ["verify"], ["check"], ["rows", "--ids", "0"])


def _refusal(out: Path, input_name: str) -> str:
    return f"ggaudit: error: {out}: is an input of this run ({input_name}); an output never replaces an input"


@dataclass
class Layout:
    """One store in a folder: the target naming its model, the options that find the store, and each file of
    the store a run on the target relies on, with the name of the run's input it is (a link's target is the
    link's input: its file)."""

    target: str
    options: list[str]
    protected: dict[Path, str]


def _ollama(tmp_path: Path) -> Layout:
    """library/tiny:latest: a model layer, a projector layer and a config blob."""
    root = tmp_path / "ollama"
    (root / "blobs").mkdir(parents=True)
    layers, blobs = [], []
    for media, data in ((MEDIA_MODEL, write_small_model(tmp_path / "m.gguf").read_bytes()),
                        (MEDIA_PROJECTOR, write_small_model(tmp_path / "p.gguf", rows=8).read_bytes()),
                        (MEDIA_CONFIG, b'{"model_format": "gguf"}')):
        digest = hashlib.sha256(data).hexdigest()
        blobs.append(root / "blobs" / f"sha256-{digest}")
        blobs[-1].write_bytes(data)
        layers.append({"mediaType": media, "digest": f"sha256:{digest}", "size": len(data)})
    manifest = root / "manifests" / "registry.ollama.ai" / "library" / "tiny" / "latest"
    manifest.parent.mkdir(parents=True)
    manifest.write_text(json.dumps({"schemaVersion": 2, "config": layers[2], "layers": layers[:2]}))
    return Layout("ollama:tiny", ["--store", os.fspath(root)],
                  {manifest: "latest", **{blob: blob.name for blob in blobs}})


def hf_cache(hub: Path, model: bytes) -> dict[str, Path]:
    """``models--org--tiny`` as huggingface_hub lays it out: refs/main and refs/v1 (both the one commit), the
    snapshot's model.gguf and README.md, links to blobs named by their sha256 and git's blob sha1."""
    repo = hub / "models--org--tiny"
    snapshot = repo / "snapshots" / COMMIT
    snapshot.mkdir(parents=True)
    (repo / "blobs").mkdir()
    (repo / "refs").mkdir()
    found = {}
    for ref in ("main", "v1"):
        found[f"refs/{ref}"] = repo / "refs" / ref
        found[f"refs/{ref}"].write_text(COMMIT)
    readme = b"# tiny\n"
    for name, data, digest in (("model.gguf", model, hashlib.sha256(model).hexdigest()),
                               ("README.md", readme, git_blob_sha1(readme))):
        found[f"blob {name}"] = repo / "blobs" / digest
        found[f"blob {name}"].write_bytes(data)
        found[name] = snapshot / name
        found[name].symlink_to(f"../../blobs/{digest}")
    return found


def _hf(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Layout:
    files = hf_cache(tmp_path / "hub", write_small_model(tmp_path / "m.gguf").read_bytes())
    monkeypatch.setenv("HF_HUB_CACHE", os.fspath(tmp_path / "hub"))
    named = {"refs/main": "main", "refs/v1": "v1", "model.gguf": "model.gguf", "blob model.gguf": "model.gguf",
             "README.md": "README.md", "blob README.md": "README.md"}
    return Layout("hf:org/tiny", [], {files[key]: name for key, name in named.items()})


def _hf_local(tmp_path: Path) -> Layout:
    local = hf_local_dir(tmp_path / "dl")
    meta = local.root / ".cache" / "huggingface" / "download"
    protected = [meta / "model.gguf.metadata", meta / "README.md.metadata", meta / "gone.bin.metadata",
                 local.good, local.stale, local.unlisted, local.damaged]
    return Layout(f"hf-local:{local.root}", [], {path: path.name for path in protected})


def _lmstudio(tmp_path: Path) -> Layout:
    models = lmstudio_models(tmp_path / "lms")
    beside = models["good"].parent / "README.md"
    beside.write_text("kept beside the model\n")
    return Layout("lmstudio:pub/good", ["--store", os.fspath(tmp_path / "lms")],
                  {models["good"]: "good.gguf", beside: "README.md"})


def _gpt4all(tmp_path: Path) -> Layout:
    models = gpt4all_folder(tmp_path / "g4a")
    listing = tmp_path / "g4a" / "models3.json"
    return Layout("gpt4all:good.gguf", ["--store", os.fspath(tmp_path / "g4a")],
                  {listing: "models3.json", models["good"]: "good.gguf", models["other"]: "other.gguf"})


@pytest.fixture(params=["ollama", pytest.param("hf", marks=needs_symlinks), "hf-local", "lmstudio", "gpt4all"])
def layout(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Layout:
    if request.param == "hf":
        return _hf(tmp_path, monkeypatch)
    made = {"ollama": _ollama, "hf-local": _hf_local, "lmstudio": _lmstudio, "gpt4all": _gpt4all}[request.param]
    return made(tmp_path)


@pytest.fixture
def nothing_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every command's job fails the test if it starts: a refused output is refused before it."""
    import ggaudit.cli.manifest
    import ggaudit.rows.replay
    from ggaudit.check import run as check_run      # ggaudit.check, .scan and .verify are the functions
    from ggaudit.scan import run as scan_run
    from ggaudit.verify import dispatch

    def started(*args: object, **kwargs: object) -> None:
        raise AssertionError("the run started before its output was refused")

    for module, name in ((check_run, "check"), (scan_run, "scan"),
                         (ggaudit.rows.replay, "check_rows"), (dispatch, "verify"),
                         (dispatch, "verify_listing"), (ggaudit.cli.manifest, "build_tensor_manifest"),
                         (ggaudit.cli.manifest, "build_llama_hash"), (ggaudit.cli.manifest, "_damage")):
        monkeypatch.setattr(module, name, started)


def _bytes(paths: list[Path]) -> list[bytes]:
    return [p.read_bytes() for p in paths]


def test_no_report_replaces_a_file_the_store_relies_on(layout: Layout, nothing_runs: None) -> None:
    files = list(layout.protected)
    before = _bytes(files)
    for command in REPORTS:
        for victim, name in layout.protected.items():
            result = run_cli([command[0], layout.target, *command[1:], *layout.options, "--format", "json",
                              "-o", victim])
            assert assert_one_line_error(result) == _refusal(victim, name), (command, victim)
            assert result.stdout == ""
    assert _bytes(files) == before


def test_no_manifest_replaces_a_file_the_store_relies_on(layout: Layout, nothing_runs: None,
                                                         tmp_path: Path) -> None:
    files = list(layout.protected)
    before = _bytes(files)
    for victim, name in layout.protected.items():
        for fmt in ([], ["--manifest-format", "llama-gguf-hash"]):
            result = run_cli(["manifest", layout.target, *layout.options, *fmt, "-o", victim, "--force"])
            assert assert_one_line_error(result) == _refusal(victim, name), victim
        result = run_cli(["manifest", layout.target, *layout.options, "-o", tmp_path / "out.json",
                          "--report", victim])
        assert assert_one_line_error(result) == _refusal(victim, name), victim
    assert _bytes(files) == before and not (tmp_path / "out.json").exists()


@needs_symlinks
def test_check_over_the_hugging_face_ref_leaves_the_cache_working(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The issue's case, with nothing stubbed: ``check hf:org/tiny -o <cache>/refs/main`` replaced the ref with
    the report, and the next run found no revision; now it is refused and the cache still checks clean."""
    files = hf_cache(tmp_path / "hub", write_small_model(tmp_path / "m.gguf").read_bytes())
    monkeypatch.setenv("HF_HUB_CACHE", os.fspath(tmp_path / "hub"))
    ref = files["refs/main"]
    for command in (["check"], ["scan"], ["verify"]):
        refused = run_cli([*command, "hf:org/tiny", "-o", ref])
        assert assert_one_line_error(refused) == _refusal(ref, "main")
    assert ref.read_text() == COMMIT
    again = run_cli(["check", "hf:org/tiny", "--modes", "buffered"])
    assert again.exit_code == 0, again.output


def test_a_malformed_ollama_manifest_is_still_protected(tmp_path: Path) -> None:
    """A manifest the run cannot parse is its error (exit 2), and the report of that error still never
    replaces it: the store names its manifest without reading it."""
    store = _ollama(tmp_path)
    manifest = next(path for path, name in store.protected.items() if name == "latest")
    manifest.write_text("{not json")
    result = run_cli(["check", store.target, *store.options, "--format", "json", "-o", manifest])
    assert assert_one_line_error(result) == _refusal(manifest, "latest")
    assert manifest.read_text() == "{not json"


def test_each_store_says_what_it_relies_on(layout: Layout) -> None:
    """The store's own list names every protected file (the CLI only asks it): a new store is one module."""
    from ggaudit.stores.registry import Roots, find_store

    store_option = layout.options[1] if layout.options else None
    store = find_store(layout.target, Roots(store_option))
    assert store is not None
    relied = {os.path.realpath(p) for p in store.relied_on()}
    assert {os.path.realpath(p) for p in layout.protected} <= relied


_NEW_STORE = """
import os
from ggaudit.stores.listing import Expected, StoreEntry, StoreListing
from ggaudit.stores.registry import Store

FOLDER = {folder!r}


class JanStore(Store, prefix="jan"):
    def entries(self):
        found = []
        for name in (self.name, self.name + ".json"):     # the model, and the description Jan keeps beside it
            path = os.path.join(FOLDER, name)
            found.append(StoreEntry(path=path, subject=name, read=path, expected=Expected(
                algorithm="sha256", digest="0" * 64, source="store", what="jan's digest")))
        return found

    def listing(self):
        return StoreListing(subject=FOLDER, kind="jan", items=tuple(self.entries()), empty="no model")

    def model_files(self):
        return [os.path.join(FOLDER, self.name)]
"""


def test_a_new_store_s_files_are_protected_without_a_line_for_it(tmp_path: Path) -> None:
    """A store that says nothing of what it relies on still has every file of its entries protected (the default
    ``relied_on``): a new store is one module, and no command line names it."""
    (tmp_path / "jan").mkdir()
    write_small_model(tmp_path / "jan" / "m.gguf")
    sidecar = tmp_path / "jan" / "m.gguf.json"
    sidecar.write_text('{"jan": 1}\n')
    (tmp_path / "stores").mkdir()
    (tmp_path / "stores" / "jan.py").write_text(_NEW_STORE.format(folder=os.fspath(tmp_path / "jan")))
    code = ("import sys, ggaudit.stores\n"
            f"ggaudit.stores.__path__.append({os.fspath(tmp_path / 'stores')!r})\n"
            "from ggaudit.cli import main\n"
            "main(sys.argv[1:], prog_name='ggaudit')\n")
    for command in (["check"], ["scan"], ["verify"], ["rows", "--ids", "0"]):
        done = subprocess.run([sys.executable, "-c", code, command[0], "jan:m.gguf", *command[1:], "--format", "json",
                               "-o", os.fspath(sidecar)], capture_output=True, text=True)
        assert (done.returncode, done.stdout, done.stderr) == (2, "", _refusal(sidecar, sidecar.name) + "\n"), command
    done = subprocess.run([sys.executable, "-c", code, "manifest", "jan:m.gguf", "-o", os.fspath(sidecar), "--force"],
                          capture_output=True, text=True)
    assert (done.returncode, done.stderr) == (2, _refusal(sidecar, sidecar.name) + "\n")
    assert sidecar.read_text() == '{"jan": 1}\n'
