"""The stores are one registry (issue 24): each store class registered once by its prefix, every command
(info, scan, rows, diff, manifest, verify) reaching a store's model through it, and an unknown prefix
refused with the known ones, while files whose names hold a colon (a Windows drive, ``a:b.gguf``) stay
files."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import ggaudit
from ggaudit.errors import UsageError
from ggaudit.stores.gpt4all import GPT4AllStore
from ggaudit.stores.hf import HFStore
from ggaudit.stores.hf_local import HFLocalStore
from ggaudit.stores.lmstudio import LMStudioStore
from ggaudit.stores.ollama import OllamaStore
from ggaudit.stores.locate import resolve_model
from ggaudit.stores.registry import Roots
from ggaudit.stores.registry import Store, every_model_store, known_prefixes, store_class, store_module

from platforms import WINDOWS, needs_symlinks
from support import assert_one_line_error, run_cli
from stores_support import STORE_MODULES, gguf, gpt4all_folder, hf_local_dir, lmstudio_models, sha256

PACKAGE = Path(ggaudit.__file__).parent
PREFIXES = ["gpt4all:", "hf-local:", "hf:", "lmstudio:", "ollama:"]


def test_every_prefix_is_one_registered_store_class() -> None:
    assert known_prefixes() == PREFIXES
    assert Store.registered == {"ollama:": OllamaStore, "hf:": HFStore, "hf-local:": HFLocalStore,
                                "lmstudio:": LMStudioStore, "gpt4all:": GPT4AllStore}
    # Each class is defined in the module named for its prefix, the one the registry imports for it.
    assert {prefix: cls.__module__ for prefix, cls in Store.registered.items()} == STORE_MODULES
    assert STORE_MODULES["hf-local:"] == "ggaudit.stores.hf_local" and STORE_MODULES["hf:"] == "ggaudit.stores.hf"


def test_a_store_class_must_be_in_the_module_named_for_its_prefix() -> None:
    with pytest.raises(TypeError, match=r"store prefix unlisted: of \S*test_store_registry is not in the module "
                                        r"named for it, ggaudit\.stores\.unlisted"):
        class Unlisted(Store, prefix="unlisted"):
            pass
    assert known_prefixes() == PREFIXES and "unlisted:" not in Store.registered


def test_a_module_of_the_stores_that_defines_no_store_is_no_prefix() -> None:
    """``sums:`` and ``registry:`` name modules of the package, not stores; an uppercase prefix is not the
    store of its lowercase one."""
    assert [store_class(p) for p in ("sums:", "registry:", "expected:", "small-files:", "nope:", "OLLAMA:")] == \
        [None] * 6
    assert store_class("ollama:") is OllamaStore
    assert store_module("hf-local:") == "ggaudit.stores.hf_local"


def test_a_store_module_is_imported_when_a_name_of_it_is_first_looked_up(tmp_path: Path) -> None:
    """A plain path loads no store; ``hf-local:DIR`` loads that store's module and no other."""
    local = hf_local_dir(tmp_path / "dl")
    code = ("import sys\nfrom ggaudit.stores.locate import resolve_model\n"
            "def stores():\n    return sorted(m for m in STORES if m in sys.modules)\n"
            f"STORES = {sorted(STORE_MODULES.values())!r}\n"
            f"print(resolve_model({os.fspath(local.good)!r}) == [{os.fspath(local.good)!r}], stores())\n"
            f"print(resolve_model({'hf-local:' + os.fspath(local.root)!r}), stores())\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.splitlines() == ["True []", f"{[os.fspath(local.good)]!r} ['ggaudit.stores.hf_local']"]


def test_a_prefix_taken_or_a_drive_letter_cannot_be_registered() -> None:
    with pytest.raises(TypeError, match="store prefix ollama: is taken by OllamaStore"):
        class Again(Store, prefix="ollama"):
            pass
    with pytest.raises(TypeError, match="store prefix 'c' is not a name"):
        class Drive(Store, prefix="c"):
            pass
    assert known_prefixes() == PREFIXES


def test_every_store_lists_what_verify_checks() -> None:
    """Each store gives verify its listing (one walker checks them all): no store without one, and no
    module of verify names a store class."""
    assert [cls for cls in Store.registered.values() if cls.listing is Store.listing] == []
    named = re.compile("|".join(cls.__name__ for cls in Store.registered.values()))
    found = [f"{path.relative_to(PACKAGE)}:{n}" for path in (PACKAGE / "verify").rglob("*.py")
             for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
             if named.search(line) and path.name not in ("ollama.py", "hf.py")]
    assert found == []


def test_every_model_of_a_store_is_a_notion_of_the_store() -> None:
    assert every_model_store("ollama:*", Roots()) is not None
    assert [every_model_store(t, Roots()) for t in ("ollama:tiny", "hf:*", "foo:*", "*", "model.gguf")] == [None] * 5
    assert [p.label for p in HFStore("org/tiny", Roots()).each_model()] == ["hf:org/tiny"]


_NEW_STORE = """
import hashlib, os
from ggaudit.stores.listing import Expected, StoreListing, StoreEntry
from ggaudit.stores.registry import Store

FOLDER = {folder!r}


class JanStore(Store, prefix="jan"):
    def entries(self):
        path = os.path.join(FOLDER, self.name)
        return [StoreEntry(path=path, subject=self.name, read=path, expected=Expected(
            algorithm="sha256", digest={digest!r}, source="store", what="jan's digest"))]

    def listing(self):
        return StoreListing(subject=FOLDER, kind="jan", items=tuple(self.entries()), empty="no model")

    def model_files(self):
        return [os.path.join(FOLDER, self.name)]

    def redownload(self, damaged):
        return "download it again in Jan"
"""


def test_a_new_store_is_one_module(tmp_path: Path) -> None:
    """A store is one module named for its prefix: once it is in the package's folder, every command takes its
    names and verify checks what it lists, with no other file touched (the package's folder is extended here
    for the test, as a new file in it would be)."""
    (tmp_path / "jan").mkdir()
    data = gguf(5)
    (tmp_path / "jan" / "m.gguf").write_bytes(data)
    (tmp_path / "stores").mkdir()
    (tmp_path / "stores" / "jan.py").write_text(_NEW_STORE.format(folder=os.fspath(tmp_path / "jan"),
                                                                  digest=sha256(data)))
    code = ("import ggaudit, ggaudit.stores, sys\n"
            f"ggaudit.stores.__path__.append({os.fspath(tmp_path / 'stores')!r})\n"
            "from ggaudit.stores.registry import known_prefixes\n"
            "report = ggaudit.verify('jan:m.gguf', cache=False)\n"
            "print(known_prefixes(), report.kind, report.ok, [c.subject for c in report.checked])\n"
            "print(len(ggaudit.open_model('jan:m.gguf').files))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.splitlines() == [f"{[*PREFIXES[:3], 'jan:', *PREFIXES[3:]]!r} jan True ['m.gguf']", "1"]


def test_no_prefix_is_dispatched_by_a_startswith_chain() -> None:
    """The prefixes are looked up in the registry only: no ``startswith("ollama:")`` or ``startswith(X_PREFIX)``
    left anywhere in the package."""
    literal = "|".join(map(re.escape, PREFIXES))
    chain = re.compile(rf"startswith\((?:[\"'](?:{literal})[\"']|[A-Z_]*PREFIX\b)")
    found = [f"{path.relative_to(PACKAGE)}:{n}" for path in PACKAGE.rglob("*.py")
             for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1) if chain.search(line)]
    assert found == []


# --- every command reaches a store's model ---------------------------------------------------------------

def _reached(command: str, target: str, store: Path | None, other: Path) -> str:
    """The file ``ggaudit COMMAND TARGET`` worked on, as its JSON says (diff: against ``other``)."""
    extra = {"info": [], "scan": [], "rows": ["--ids", "0"], "diff": [other], "manifest": ["-o", "-"]}[command]
    args = [command, target, *extra, *(["--store", store] if store is not None else []), "--json"]
    result = run_cli(args)
    assert result.exit_code in (0, 1), (args, result.exit_code, result.stderr)
    model = json.loads(result.stdout)["models"][0]
    if command == "manifest":
        (entry,) = model["files"]
        return f"{entry['name']} {entry['sha256']}"
    return {"info": model.get("model"), "scan": (model.get("files") or [None])[0], "rows": model.get("file"),
            "diff": model.get("a")}[command]


def _said(command: str, path: Path) -> str:
    if command == "manifest":
        return f"{path.name} {hashlib.sha256(path.read_bytes()).hexdigest()}"
    return os.fspath(path)


@pytest.mark.parametrize("command", ["info", "scan", "rows", "diff", "manifest"])
def test_every_command_opens_every_store_form(tmp_path: Path, command: str) -> None:
    lmstudio = lmstudio_models(tmp_path / "lm")
    gpt4all = gpt4all_folder(tmp_path / "g4")
    local = hf_local_dir(tmp_path / "dl")
    other = tmp_path / "other.gguf"
    other.write_bytes(gguf(99))
    forms = [("lmstudio:pub/good", tmp_path / "lm", lmstudio["good"]),
             ("lmstudio:pub/split", tmp_path / "lm", lmstudio["split1"]),      # a split set: its first shard
             ("gpt4all:badmd5.gguf", tmp_path / "g4", gpt4all["badmd5"]),
             (f"hf-local:{local.root}", None, local.good)]
    assert [_reached(command, target, store, other) for target, store, _ in forms] == \
        [_said(command, path) for _, _, path in forms]


def test_a_store_name_standing_for_several_models_says_which_there_are(tmp_path: Path) -> None:
    gpt4all_folder(tmp_path / "g4")
    assert_one_line_error(run_cli(["info", "gpt4all:", "--store", tmp_path / "g4"]),
                          "gpt4all: holds 4 GGUF models: 'badmd5.gguf', 'badsize.gguf', 'good.gguf', 'other.gguf'",
                          "name one as gpt4all:FILE")
    assert_one_line_error(run_cli(["scan", "gpt4all:never.gguf", "--store", tmp_path / "g4"]),
                          "model 'never.gguf' is not in the folder")


def _hf_snapshot(cache: Path, files: dict[str, bytes]) -> Path:
    """org/tiny in a Hugging Face cache at ``cache``: each file a link to the blob named by its sha256."""
    commit = "c0ffee" + "0" * 34
    repo = cache / "models--org--tiny"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit + "\n")
    (repo / "blobs").mkdir()
    snapshot = repo / "snapshots" / commit
    for rel, data in files.items():
        digest = hashlib.sha256(data).hexdigest()
        (repo / "blobs" / digest).write_bytes(data)
        (snapshot / rel).parent.mkdir(parents=True, exist_ok=True)
        (snapshot / rel).symlink_to("../" * (rel.count("/") + 2) + f"blobs/{digest}")
    return snapshot


@needs_symlinks
def test_a_projector_beside_the_model_goes_with_it_in_a_hugging_face_snapshot(tmp_path: Path) -> None:
    """As in a folder store: ``mmproj-*.gguf`` is no second model, and goes with the model it is beside."""
    snapshot = _hf_snapshot(tmp_path / "hub", {"q8/tiny-Q8_0.gguf": gguf(60), "q8/mmproj-tiny-f16.gguf": gguf(61),
                                               "f16/mmproj-tiny-f16.gguf": gguf(62), "README.md": b"# tiny\n"})
    assert resolve_model("hf:org/tiny", hf_cache=tmp_path / "hub") == [
        os.path.join(snapshot, "q8", "tiny-Q8_0.gguf"), os.path.join(snapshot, "q8", "mmproj-tiny-f16.gguf")]
    assert resolve_model("hf:org/tiny:f16/mmproj-tiny-f16.gguf", hf_cache=tmp_path / "hub") == [
        os.path.join(snapshot, "f16", "mmproj-tiny-f16.gguf")]


def test_a_projector_beside_the_model_goes_with_it_in_lm_studio_s_folder(tmp_path: Path) -> None:
    paths = lmstudio_models(tmp_path / "lm")
    projector = paths["good"].parent / "mmproj-good-f16.gguf"
    projector.write_bytes(gguf(40))
    assert resolve_model("lmstudio:pub/good", store=tmp_path / "lm") == [os.fspath(paths["good"]),
                                                                        os.fspath(projector)]


def test_verify_takes_one_gpt4all_model(tmp_path: Path) -> None:
    gpt4all_folder(tmp_path / "g4")
    report = ggaudit.verify("gpt4all:badmd5.gguf", store=tmp_path / "g4")
    assert [(m.kind, m.subject) for m in report.mismatches] == [("md5", "badmd5.gguf")]
    assert [c.subject for c in report.checked] == ["badmd5.gguf"]
    assert report.source == f"{tmp_path / 'g4'} badmd5.gguf"


# --- unknown prefixes, and names that are files ----------------------------------------------------------

@pytest.mark.parametrize("command", ["info", "scan", "rows", "diff", "manifest", "verify"])
def test_an_unknown_prefix_is_exit_2_listing_the_known_ones(tmp_path: Path, command: str) -> None:
    extra = {"rows": ["--ids", "0"], "diff": ["foo:baz"], "manifest": ["-o", tmp_path / "m.json"]}.get(command, [])
    line = assert_one_line_error(run_cli([command, "foo:bar", *extra]), "'foo:bar' is no file",
                                 "'foo:' is no store prefix")
    assert line.endswith("the prefixes are gpt4all:, hf-local:, hf:, lmstudio:, ollama:")
    with pytest.raises(UsageError, match="the prefixes are gpt4all:, hf-local:, hf:, lmstudio:, ollama:"):
        ggaudit.open_model("foo:bar")


def _named_file(folder: Path, name: str) -> Path:
    path = folder / name
    path.write_bytes(gguf(7))
    return path


@pytest.mark.parametrize("command", ["info", "scan", "verify"])
def test_a_drive_letter_path_is_a_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: str) -> None:
    """``C:\\...`` is a drive on Windows (tmp_path is one there), a plain name holding a colon elsewhere."""
    monkeypatch.chdir(tmp_path)
    if WINDOWS:
        path = _named_file(tmp_path, "x.gguf")
        given = os.fspath(path)
        assert re.match(r"[A-Za-z]:\\", given)
    else:
        path = _named_file(tmp_path, "C:\\x.gguf")
        given = "C:\\x.gguf"
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    extra = ["--sha256", digest] if command == "verify" else []
    result = run_cli([command, given, *extra, "--json"])
    assert result.exit_code == 0, result.stderr
    assert ggaudit.open_model(given).files[0].path == given


@pytest.mark.skipif(WINDOWS, reason="Windows file names hold no colon")
@pytest.mark.parametrize("name", ["a:b.gguf", "foo:bar.gguf"])
def test_a_relative_file_named_with_a_colon_is_a_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      name: str) -> None:
    monkeypatch.chdir(tmp_path)
    _named_file(tmp_path, name)
    result = run_cli(["info", name, "--json"])
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["models"][0]["model"] == name
    assert ggaudit.open_model(name).files[0].path == name


def test_a_missing_drive_letter_path_is_a_missing_file_not_a_prefix(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    line = assert_one_line_error(run_cli(["info", "C:\\nope.gguf"]))
    assert "store prefix" not in line
