"""First contact with a MODEL (issue 35, section 4): a bare name of a model a store holds gives the same "did you
mean" on every command; a name a store does not hold names the folder that was searched and how it was chosen
(``--store``, ``$OLLAMA_MODELS``, ``$HF_HUB_CACHE``/``$HF_HOME``, or the default)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ggaudit.cli import COMMANDS
from ggaudit.errors import ManifestError
from ggaudit.stores.ollama import chosen_by, read_ollama_manifest

from ollama_support import ollama_store
from stores_support import lmstudio_models
from support import assert_one_line_error, run_cli, write_small_model

#: Each command with a bare name as its MODEL (TARGET), and what else it needs to get as far as the name.
ARGS = {
    "info": ["{name}"],
    "scan": ["{name}"],
    "check": ["{name}"],
    "verify": ["{name}"],
    "rows": ["{name}", "--ids", "1"],
    "manifest": ["{name}", "-o", "{tmp}/out.json"],
    "diff": ["{name}", "{tmp}/m.gguf"],
}


@pytest.fixture()
def clef_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An Ollama store holding library/clef-flash:latest, and a working folder with no file of that name."""
    model = write_small_model(tmp_path / "m.gguf").read_bytes()
    ollama_store(tmp_path / "store", model, model, name="clef-flash")
    monkeypatch.chdir(tmp_path)
    return tmp_path / "store"


def test_every_command_is_covered() -> None:
    assert sorted(ARGS) == sorted(COMMANDS)


@pytest.mark.parametrize("command", sorted(ARGS))
@pytest.mark.parametrize("name", ["clef-flash", "clef-flash:latest"])
def test_every_command_says_the_store_name_a_bare_name_means(command: str, name: str, clef_store: Path) -> None:
    args = [a.format(name=name, tmp=clef_store.parent) for a in ARGS[command]]
    result = run_cli([command, *args, "--store", clef_store])
    assert assert_one_line_error(result) == f"ggaudit: error: {name}: no such file; did you mean ollama:{name}?"
    assert not (clef_store.parent / "out.json").exists()


@pytest.mark.parametrize("command", ["check", "verify"])
def test_a_bare_name_no_store_holds_is_still_a_missing_path(command: str, clef_store: Path) -> None:
    result = run_cli([command, "other-model", "--store", clef_store])
    line = assert_one_line_error(result)
    assert line.startswith("ggaudit: error: other-model: ") and "did you mean" not in line


def test_a_file_of_that_name_is_the_file_not_the_store_model(clef_store: Path) -> None:
    write_small_model(clef_store.parent / "clef-flash", rows=3)
    result = run_cli(["check", "clef-flash", "--store", clef_store])
    assert result.exit_code == 0, result.output
    assert "clef-flash" in result.stdout and "ollama:" not in result.stdout


# --- which store was searched ---------------------------------------------------------------------------

def test_an_ollama_name_not_in_a_given_store_names_it(clef_store: Path) -> None:
    manifest = clef_store / "manifests" / "registry.ollama.ai" / "library" / "nope" / "latest"
    result = run_cli(["check", "ollama:nope", "--store", clef_store])
    assert assert_one_line_error(result) == (
        f"ggaudit: error: {manifest}: model registry.ollama.ai/library/nope:latest is not in the Ollama store "
        f"{clef_store} (given by --store)")


def test_an_ollama_name_not_in_the_store_of_ollama_models_names_the_variable(
        clef_store: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OLLAMA_MODELS", os.fspath(clef_store))
    result = run_cli(["scan", "ollama:nope"])
    assert assert_one_line_error(result).endswith(
        f"is not in the Ollama store {clef_store} (from $OLLAMA_MODELS)")


def _home(monkeypatch: pytest.MonkeyPatch, folder: Path) -> None:
    """``folder`` as the user's home folder: HOME on Linux and macOS, USERPROFILE on Windows."""
    for variable in ("HOME", "USERPROFILE"):
        monkeypatch.setenv(variable, os.fspath(folder))


def test_an_ollama_name_not_in_the_default_store_says_it_is_the_default(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OLLAMA_MODELS", raising=False)
    _home(monkeypatch, tmp_path)
    (tmp_path / ".ollama" / "models").mkdir(parents=True)    # the per-user store, which Linux prefers
    with pytest.raises(ManifestError) as caught:
        read_ollama_manifest("nope")
    assert caught.value.message == (f"model registry.ollama.ai/library/nope:latest is not in the Ollama store "
                                    f"{tmp_path / '.ollama' / 'models'} (the default: $OLLAMA_MODELS is not set)")


def test_verify_of_a_folder_that_is_no_ollama_store_says_how_it_was_chosen(tmp_path: Path) -> None:
    result = run_cli(["verify", "ollama:*", "--store", tmp_path])
    assert assert_one_line_error(result) == (f"ggaudit: error: {tmp_path / 'manifests'}: no manifests folder: "
                                             f"{tmp_path} is not an Ollama store (given by --store)")


def test_a_hugging_face_name_not_in_the_cache_names_the_variable_that_chose_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HOME", os.fspath(tmp_path))
    result = run_cli(["info", "hf:org/absent"])
    assert assert_one_line_error(result) == (
        f"ggaudit: error: {tmp_path / 'hub' / 'models--org--absent'}: org/absent is not in the Hugging Face cache "
        f"{tmp_path / 'hub'} (from $HF_HOME)")
    monkeypatch.setenv("HF_HUB_CACHE", os.fspath(tmp_path / "elsewhere"))
    assert assert_one_line_error(run_cli(["info", "hf:org/absent"])).endswith(
        f"is not in the Hugging Face cache {tmp_path / 'elsewhere'} (from $HF_HUB_CACHE)")


def test_lm_studio_and_gpt4all_say_the_folder_and_how_it_was_chosen(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lmstudio_models(tmp_path / "lms")
    result = run_cli(["scan", "lmstudio:pub/absent", "--store", tmp_path / "lms"])
    assert assert_one_line_error(result).endswith(
        f"model 'pub/absent' is not in the LM Studio folder {tmp_path / 'lms'} (given by --store)")
    (tmp_path / "g4").mkdir()
    result = run_cli(["scan", "gpt4all:absent.gguf", "--store", tmp_path / "g4"])
    assert assert_one_line_error(result).endswith(
        f"model 'absent.gguf' is not in the folder {tmp_path / 'g4'} (given by --store)")
    _home(monkeypatch, tmp_path / "home")     # no LM Studio folder there
    result = run_cli(["scan", "lmstudio:pub/model"])
    assert assert_one_line_error(result) == (f"ggaudit: error: {tmp_path / 'home' / '.lmstudio' / 'models'}: no LM "
                                             f"Studio model folder here (the default; --store names another)")


def test_how_a_folder_was_chosen_in_words() -> None:
    def said(words: tuple[object, ...]) -> str:     # as the library says it: a parameter as store=
        return "".join(map(str, words))

    assert said(chosen_by("store", ("OLLAMA_MODELS",), env={"OLLAMA_MODELS": "/x"})) == "given by store="
    assert said(chosen_by(None, ("HF_HUB_CACHE", "HF_HOME"), env={"HF_HOME": "/h"})) == "from $HF_HOME"
    assert said(chosen_by(None, ("HF_HUB_CACHE", "HF_HOME"), env={"HF_HUB_CACHE": "/c", "HF_HOME": "/h"})) == \
        "from $HF_HUB_CACHE"
    assert said(chosen_by(None, ("OLLAMA_MODELS",), env={"OLLAMA_MODELS": ""})) == \
        "the default: $OLLAMA_MODELS is not set"
    assert said(chosen_by(None, ("HF_HUB_CACHE", "HF_HOME"), env={})) == \
        "the default: $HF_HUB_CACHE and $HF_HOME are not set"
    assert said(chosen_by(None, (), env={})) == "the default; store= names another"
