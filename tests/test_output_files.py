"""No output replaces an input: ``manifest -o`` and every report's ``-o FILE`` refuse to name any file the run
reads (however it is spelled: another path, a link, another case), and replace an existing output only
atomically (a temporary file, fsync, rename, fsync of the folder)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import stat
from pathlib import Path

import numpy as np
import pytest

from ggaudit.errors import UsageError
from ggaudit.format.layout import open_model
from ggaudit.verify.manifests.tensor import build_tensor_manifest, write_tensor_manifest
from ollama_support import ollama_store
from stores_support import ollama_everything
from platforms import WINDOWS, needs_fifo, needs_symlinks
from support import assert_one_line_error, run_cli, write_small_model, write_split_set

ROW = 68            # write_small_model: Q8_0, 64 columns = 2 blocks of 34 bytes
EMB = "token_embd.weight"


def _input_refused(out: Path, input_name: str) -> str:
    return f"ggaudit: error: {out}: is an input of this run ({input_name}); an output never replaces an input"


# --- manifest -o never replaces an input ---------------------------------------------------------

def test_output_naming_the_model_is_refused_even_with_force(tmp_path: Path) -> None:
    model = write_small_model(tmp_path / "m.gguf")
    before = model.read_bytes()
    for extra in ([], ["--force"]):
        result = run_cli(["manifest", model, "-o", model, *extra])
        assert assert_one_line_error(result) == _input_refused(model, "m.gguf")
        assert result.stdout == ""
    assert model.read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == ["m.gguf"]          # no temporary file left behind


def test_output_naming_the_model_through_another_path_is_refused(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    model = write_small_model(tmp_path / "m.gguf")
    (tmp_path / "sub").mkdir()
    monkeypatch.chdir(tmp_path)
    before = model.read_bytes()
    spellings = [tmp_path / "sub" / ".." / "m.gguf", Path(".") / "sub" / ".." / "m.gguf"]
    if WINDOWS:
        spellings.append(tmp_path / "M.GGUF")         # the same file to a case-insensitive filesystem
    try:
        os.link(model, tmp_path / "hard.gguf")
        spellings.append(tmp_path / "hard.gguf")
    except OSError:
        pass        # no hard links on this filesystem: the other spellings still hold
    for out in spellings:
        result = run_cli(["manifest", model, "-o", out, "--force"])
        assert assert_one_line_error(result) == _input_refused(out, "m.gguf"), out
    assert model.read_bytes() == before


@needs_symlinks
def test_output_naming_a_symlink_to_the_model_is_refused(tmp_path: Path) -> None:
    model = write_small_model(tmp_path / "m.gguf")
    link = tmp_path / "link.json"
    link.symlink_to(model)
    before = model.read_bytes()
    result = run_cli(["manifest", model, "-o", link, "--force"])
    assert assert_one_line_error(result) == _input_refused(link, "m.gguf")
    assert model.read_bytes() == before and link.is_symlink()


def test_output_naming_another_shard_of_the_set_is_refused(tmp_path: Path) -> None:
    first, second = write_split_set(tmp_path)
    before = second.read_bytes()
    result = run_cli(["manifest", first, "-o", second, "--force"])
    assert assert_one_line_error(result) == _input_refused(second, second.name)
    assert second.read_bytes() == before


def test_output_naming_the_ollama_blob_projector_or_manifest_is_refused(tmp_path: Path) -> None:
    write_small_model(tmp_path / "model.gguf")
    write_small_model(tmp_path / "proj.gguf", rows=8)
    store = tmp_path / "store"
    blob, projector = ollama_store(store, (tmp_path / "model.gguf").read_bytes(),
                                   (tmp_path / "proj.gguf").read_bytes())
    manifest = store / "manifests" / "registry.ollama.ai" / "library" / "tiny" / "latest"
    for target in (blob, projector, manifest):
        before = target.read_bytes()
        result = run_cli(["manifest", "ollama:tiny", "--store", store, "-o", target, "--force"])
        assert assert_one_line_error(result) == _input_refused(target, target.name)
        assert target.read_bytes() == before


def test_existing_output_needs_force_and_is_replaced_atomically(tmp_path: Path) -> None:
    model = write_small_model(tmp_path / "m.gguf")
    out = tmp_path / "out.json"
    out.write_text("keep me\n")
    refused = run_cli(["manifest", model, "-o", out])
    assert assert_one_line_error(refused) == f"ggaudit: error: {out}: exists; give --force to replace it"
    assert out.read_text() == "keep me\n"
    replaced = run_cli(["manifest", model, "-o", out, "--force"])
    assert replaced.exit_code == 0, replaced.output
    assert replaced.stdout.splitlines()[0] == f"wrote {out}: 1 file, 1 tensor, 1 row group"
    assert json.loads(out.read_text())["files"][0]["name"] == "m.gguf"
    assert sorted(os.listdir(tmp_path)) == ["m.gguf", "out.json"]


def test_library_writer_refuses_an_existing_file_unless_asked(tmp_path: Path) -> None:
    model = write_small_model(tmp_path / "m.gguf")
    built = build_tensor_manifest(open_model(model))
    out = tmp_path / "out.json"
    write_tensor_manifest(built, out)
    first = out.read_bytes()
    with pytest.raises(UsageError) as err:
        write_tensor_manifest(built, out)
    assert str(err.value) == f"{out}: exists; give replace=True to replace it"
    with pytest.raises(UsageError):
        write_tensor_manifest(built, model, replace=True, inputs=[model])
    write_tensor_manifest(built, out, replace=True)
    assert out.read_bytes() == first and first.endswith(b"}\n") and b"\r" not in first


@pytest.mark.skipif(WINDOWS, reason="Windows cannot open a folder to fsync it; NTFS journals the rename")
def test_written_manifest_and_its_folder_entry_reach_the_disk(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """The file is fsynced before the rename and its folder after it: a power cut leaves the old file or
    the whole new one, never an empty one."""
    model = write_small_model(tmp_path / "m.gguf")
    synced: list[tuple[bool, bool]] = []        # (a folder, the output's name exists yet)
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        synced.append((stat.S_ISDIR(os.fstat(fd).st_mode), (tmp_path / "out.json").exists()))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    write_tensor_manifest(build_tensor_manifest(open_model(model)), tmp_path / "out.json")
    assert synced == [(False, False), (True, True)]


@needs_fifo
def test_existing_output_that_is_not_a_file_is_never_replaced(tmp_path: Path) -> None:
    model = write_small_model(tmp_path / "m.gguf")
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    result = run_cli(["manifest", model, "-o", fifo, "--force"])
    assert assert_one_line_error(result) == f"ggaudit: error: {fifo}: exists and is not a regular file; not replaced"
    assert fifo.is_fifo()


def test_dash_writes_the_manifest_to_stdout_and_nothing_else(tmp_path: Path) -> None:
    model = write_small_model(tmp_path / "m.gguf")
    out = tmp_path / "file.json"
    assert run_cli(["manifest", model, "-o", out]).exit_code == 0
    result = run_cli(["manifest", model, "-o", "-"])
    assert (result.exit_code, result.stderr, result.stdout) == (0, "", out.read_text())
    # With --json it is the one model of the JSON every command prints.
    result = run_cli(["manifest", model, "-o", "-", "--json"])
    assert (result.exit_code, result.stderr) == (0, "")
    assert json.loads(result.stdout) == {"schema": "ggaudit/cli-output/1", "status": "clean",
                                         "models": [json.loads(out.read_text())]}
    assert sorted(os.listdir(tmp_path)) == ["file.json", "m.gguf"]


def test_unwritable_output_folder_is_one_line_naming_the_output(tmp_path: Path) -> None:
    model = write_small_model(tmp_path / "m.gguf")
    out = tmp_path / "no-such-folder" / "out.json"
    result = run_cli(["manifest", model, "-o", out])
    assert assert_one_line_error(result).startswith(f"ggaudit: error: {out}: cannot write the manifest: ")


# --- a report's -o FILE never replaces an input of the run either --------------------------------

def _spellings(path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """``path`` as given, through ``..``, relative to the working folder (made ``tmp_path``), through a hard
    link and a symlink (where this filesystem has them), and in another case on Windows."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sub").mkdir(exist_ok=True)
    found = [path, tmp_path / "sub" / ".." / path.relative_to(tmp_path), Path("sub", "..", path.relative_to(tmp_path))]
    if WINDOWS:
        found.append(Path(str(path).upper()))
    for make, name in ((os.link, "hard-" + path.name), (os.symlink, "soft-" + path.name)):
        try:
            make(path, tmp_path / name)
        except (OSError, NotImplementedError):
            continue        # not on this filesystem: the other spellings still hold
        if os.path.lexists(tmp_path / name):
            found.append(tmp_path / name)
    return found


@pytest.fixture
def nothing_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every command's check fails the test if it starts: a refused -o FILE must be refused before it."""
    import ggaudit.cli.info
    import ggaudit.rows.replay
    from ggaudit.verify import diff, dispatch     # ggaudit.verify is the function

    def started(*args: object, **kwargs: object) -> None:
        raise AssertionError("the run started before -o FILE was refused")

    for module, name in ((dispatch, "verify"), (dispatch, "verify_listing"),
                         (ggaudit.rows.replay, "check_rows"),
                         (diff, "diff_paths"), (ggaudit.cli.info, "open_model")):
        monkeypatch.setattr(module, name, started)


def _refused(args: list[object], victims: list[Path], spellings: list[Path], input_name: str | None = None) -> None:
    """``args`` with ``-o`` each spelling: exit 2, the one line naming it (and the input it is, by name),
    nothing on stdout, and no victim's bytes changed."""
    before = [v.read_bytes() for v in victims]
    for out in spellings:
        result = run_cli([*args, "-o", out])
        assert assert_one_line_error(result) == _input_refused(out, input_name or victims[0].name), out
        assert result.stdout == ""
    assert [v.read_bytes() for v in victims] == before


def _model_and_manifest(tmp_path: Path) -> tuple[Path, Path]:
    model = write_small_model(tmp_path / "m.gguf")
    assert run_cli(["manifest", model, "-o", tmp_path / "m.json"]).exit_code == 0
    return model, tmp_path / "m.json"


def test_verify_report_naming_its_manifest_is_refused_before_any_read(tmp_path: Path, nothing_runs: None,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    model, manifest = _model_and_manifest(tmp_path)
    for fmt in ("json", "sarif", "junit", "html", "text"):
        _refused(["verify", model, "--manifest", manifest, "--format", fmt], [manifest, model],
                 _spellings(manifest, tmp_path, monkeypatch) if fmt == "json" else [manifest])
    # The model itself (a GGUF file, and the run's target) is named as the input it is.
    _refused(["verify", model, "--manifest", manifest], [model, manifest], [model, tmp_path / "sub" / ".." / "m.gguf"])


def test_verify_report_naming_the_sums_file_or_a_file_it_names_is_refused(tmp_path: Path, nothing_runs: None,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    model = write_small_model(tmp_path / "m.gguf")
    (tmp_path / "data").mkdir()
    notes = tmp_path / "data" / "notes.txt"
    notes.write_text("not a model\n")
    sums = tmp_path / "SUMS"
    sums.write_text(f"{hashlib.sha256(model.read_bytes()).hexdigest()}  m.gguf\n"
                    f"{hashlib.sha256(notes.read_bytes()).hexdigest()}  data/notes.txt\n")
    args: list[object] = ["verify", "--sums", sums, "--format", "json"]
    _refused(args, [sums, notes, model], _spellings(sums, tmp_path, monkeypatch))
    _refused(args, [notes, sums, model], _spellings(notes, tmp_path, monkeypatch))
    # With --base the names resolve there, and are just as much inputs.
    (tmp_path / "elsewhere").mkdir()
    moved = tmp_path / "elsewhere" / "SUMS"
    moved.write_text(sums.read_text())
    _refused(["verify", "--sums", moved, "--base", tmp_path, "--format", "junit"], [notes, moved], [notes])


def test_verify_report_naming_an_ollama_manifest_or_any_blob_is_refused(tmp_path: Path, nothing_runs: None,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    store = ollama_everything(tmp_path / "S")
    manifest = store.root / "manifests" / "registry.ollama.ai" / "library" / "chat" / "latest"
    everything = [manifest, *store.blobs.values(), store.orphan]
    args: list[object] = ["verify", "ollama:chat", "--store", store.root, "--format", "sarif"]
    _refused(args, everything, _spellings(manifest, tmp_path, monkeypatch))
    for role in ("chat.model", "chat.draft", "chat.config"):     # the config is JSON, not GGUF: an input all the same
        _refused(args, everything, [store.blob(role)], store.blob(role).name)
    # The store reached through a link to its folder is the same store.
    with contextlib.suppress(OSError, NotImplementedError):
        (tmp_path / "S-link").symlink_to(store.root, target_is_directory=True)
    if (tmp_path / "S-link").is_symlink():
        _refused(args, everything, [tmp_path / "S-link" / manifest.relative_to(store.root)], "latest")
    # ollama:* reads every manifest and every blob, the orphans too.
    star: list[object] = ["verify", "ollama:*", "--store", store.root, "--format", "json"]
    imagegen = store.root / "manifests" / "registry.ollama.ai" / "library" / "imagegen" / "latest"
    for victim in (imagegen, store.orphan, store.blob("imagegen.t1")):
        _refused(star, everything, [victim], victim.name)


@needs_symlinks
def test_verify_report_naming_a_hugging_face_snapshot_file_is_refused(tmp_path: Path, nothing_runs: None,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    commit = "0123456789abcdef0123456789abcdef01234567"
    repo = tmp_path / "hub" / "models--org--tiny"
    snapshot = repo / "snapshots" / commit
    snapshot.mkdir(parents=True)
    (repo / "blobs").mkdir()
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    readme = b"# tiny\n"
    blob = repo / "blobs" / hashlib.sha1(b"blob %d\0" % len(readme) + readme).hexdigest()
    blob.write_bytes(readme)
    (snapshot / "README.md").symlink_to(f"../../blobs/{blob.name}")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    for victim in (snapshot / "README.md", blob):
        _refused(["verify", "hf:org/tiny", "--format", "json"], [blob], [victim], "README.md")
    assert (snapshot / "README.md").is_symlink()


def _capture(model: Path, path: Path, ids: list[int]) -> Path:
    t = open_model(model).tensor(EMB)
    data = model.read_bytes()
    rows = np.stack([np.frombuffer(data[t.row_offset(r):t.row_offset(r) + ROW], np.uint8) for r in ids])
    np.savez(path, ids=np.array(ids), rows=rows)
    return path


def test_rows_report_naming_its_ids_file_or_capture_is_refused_before_any_read(
        tmp_path: Path, nothing_runs: None, monkeypatch: pytest.MonkeyPatch) -> None:
    model = write_small_model(tmp_path / "m.gguf")
    ids = tmp_path / "ids.txt"
    ids.write_text("1,2\n")
    capture = _capture(model, tmp_path / "cap.npz", [3, 7])
    _refused(["rows", model, "--ids-file", ids, "--format", "json"], [ids, model],
             _spellings(ids, tmp_path, monkeypatch))
    _refused(["rows", model, "--ids", "1", "--ids-file", ids, "--modes", "buffered", "--format", "junit"],
             [ids], [ids])
    _refused(["rows", model, "--ids", "0", "--against", capture, "--format", "json"], [capture, model],
             _spellings(capture, tmp_path, monkeypatch))
    _refused(["rows", model, "--ids", "0", "--format", "sarif"], [model], [model, tmp_path / "sub" / ".." / "m.gguf"])


def test_rows_report_over_its_capture_is_refused_for_real_too(tmp_path: Path) -> None:
    """Without the test's guard, and with a capture the run rejects (exit 2, where the report used to be written
    over the capture all the same): the refusal comes first, and the capture is still there to be judged."""
    model = write_small_model(tmp_path / "m.gguf")
    good = _capture(model, tmp_path / "cap.npz", [3, 7])
    bad = tmp_path / "bad.npz"
    np.savez(bad, ids=np.array([999]), rows=np.zeros((1, ROW), np.uint8))
    for capture in (good, bad):
        _refused(["rows", model, "--ids", "0", "--against", capture, "--format", "json"], [capture], [capture])
    assert run_cli(["rows", model, "--against", good]).exit_code == 0
    assert assert_one_line_error(run_cli(["rows", model, "--ids", "0", "--against", bad])) == \
        f"ggaudit: error: {bad}: ids: ids must lie in 0..63"


def test_reports_of_info_diff_and_rows_never_name_a_shard_or_an_ollama_manifest(tmp_path: Path,
                                                                                 nothing_runs: None) -> None:
    first, second = write_split_set(tmp_path)
    for args in (["info", first], ["diff", first, first], ["rows", first, "--ids", "0"]):
        _refused([*args, "--format", "json"], [first, second], [second], second.name)
    write_small_model(tmp_path / "model.gguf")
    write_small_model(tmp_path / "proj.gguf", rows=8)
    store = tmp_path / "store"
    blob, projector = ollama_store(store, (tmp_path / "model.gguf").read_bytes(), (tmp_path / "proj.gguf").read_bytes())
    manifest = store / "manifests" / "registry.ollama.ai" / "library" / "tiny" / "latest"
    for args in (["info", "ollama:tiny", "--store", store], ["diff", tmp_path / "model.gguf", "ollama:tiny",
                                                              "--store", store]):
        for victim in (manifest, blob, projector):
            _refused([*args, "--format", "sarif"], [manifest, blob, projector], [victim], victim.name)


def test_report_writer_checks_again_what_the_run_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A file the run found only while it ran (here: the check before it is told nothing) is still never
    replaced: the writer compares FILE with every file the reports name."""
    import ggaudit.cli.verify

    model = write_small_model(tmp_path / "m.gguf")
    notes = tmp_path / "notes.txt"
    notes.write_text("not a model\n")
    sums = tmp_path / "SUMS"
    sums.write_text(f"{hashlib.sha256(model.read_bytes()).hexdigest()}  m.gguf\n"
                    f"{hashlib.sha256(notes.read_bytes()).hexdigest()}  notes.txt\n")
    monkeypatch.setattr(ggaudit.cli.verify, "_inputs", lambda *args: [])
    (tmp_path / "sub").mkdir()
    _refused(["verify", "--sums", sums, "--format", "json"], [notes, sums],
             [notes, tmp_path / "sub" / ".." / "notes.txt"])
    assert sorted(os.listdir(tmp_path)) == ["SUMS", "m.gguf", "notes.txt", "sub"]     # no temporary file left


def test_existing_report_is_replaced_but_never_a_model(tmp_path: Path) -> None:
    """Reports keep their contract: an existing report file is replaced atomically, no --force needed (a CI job
    writes the same name each run); a GGUF file the run does not read is still refused."""
    model, manifest = _model_and_manifest(tmp_path)
    out = tmp_path / "report.json"
    out.write_text("last run's report\n")
    result = run_cli(["verify", model, "--manifest", manifest, "--format", "json", "-o", out])
    assert (result.exit_code, result.stdout) == (0, ""), result.output
    assert json.loads(out.read_text())["status"] == "clean"
    other = write_small_model(tmp_path / "other.gguf")
    before = other.read_bytes()
    result = run_cli(["verify", model, "--manifest", manifest, "--format", "json", "-o", other])
    assert assert_one_line_error(result) == f"ggaudit: error: {other}: --output: is a GGUF file; a report never " \
                                            "replaces a model"
    assert other.read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == ["m.gguf", "m.json", "other.gguf", "report.json"]


def test_scan_report_naming_a_shard_or_an_ollama_manifest_is_refused(tmp_path: Path, nothing_runs: None) -> None:
    first, second = write_split_set(tmp_path)
    _refused(["scan", first, "--format", "json"], [first, second], [second], second.name)
    write_small_model(tmp_path / "model.gguf")
    write_small_model(tmp_path / "proj.gguf", rows=8)
    store = tmp_path / "store"
    blob, projector = ollama_store(store, (tmp_path / "model.gguf").read_bytes(), (tmp_path / "proj.gguf").read_bytes())
    manifest = store / "manifests" / "registry.ollama.ai" / "library" / "tiny" / "latest"
    for victim in (manifest, blob, projector):
        _refused(["scan", "ollama:tiny", "--store", store, "--format", "sarif"], [manifest, blob, projector],
                 [victim], victim.name)


def test_manifest_report_naming_an_input_or_the_manifest_written_is_refused(tmp_path: Path) -> None:
    write_small_model(tmp_path / "model.gguf")
    write_small_model(tmp_path / "proj.gguf", rows=8)
    store = tmp_path / "store"
    ollama_store(store, (tmp_path / "model.gguf").read_bytes(), (tmp_path / "proj.gguf").read_bytes())
    manifest = store / "manifests" / "registry.ollama.ai" / "library" / "tiny" / "latest"
    before = manifest.read_bytes()
    out = tmp_path / "out.json"
    result = run_cli(["manifest", "ollama:tiny", "--store", store, "-o", out, "--format", "json", "--report", manifest])
    assert assert_one_line_error(result) == _input_refused(manifest, manifest.name)
    assert manifest.read_bytes() == before and not out.exists()
    result = run_cli(["manifest", tmp_path / "model.gguf", "-o", out, "--format", "json", "--report", out])
    assert assert_one_line_error(result) == (f"ggaudit: error: {out}: is the manifest this run writes (-o); a report "
                                             "never replaces it")
    assert not out.exists()
