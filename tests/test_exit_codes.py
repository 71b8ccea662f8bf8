"""How a run ends (issue 11, class 1 and 7): the exit status and the one line on stderr.

0 clean, 1 findings, 2 bad input, 3 a bug in ggaudit (one line asking for a report; the traceback only
with ``ggaudit --debug``), 130 interrupted (never "Aborted!" and 1). A reader that goes away
(``ggaudit ... | head -1``) ends the run quietly with the status it had. The library raises only
GGAuditError subclasses for bad input, whatever type of argument it is given.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any
from collections.abc import Callable

import numpy as np
import pytest
from click.testing import Result
from gguf import GGMLQuantizationType as T

from ggaudit.outcomes import run_models
from ggaudit.format.build import TensorSpec, write_gguf
from ggaudit.errors import GGAuditError, ManifestError, ReadError, UsageError
from ggaudit.format.layout import open_gguf, open_model
from ggaudit.stores.sums import read_sums
from ggaudit.verify.manifests.tensor import read_tensor_manifest
from ggaudit.verify.manifests.tensor import build_tensor_manifest
from ggaudit.evidence.readers import open_reader
from ggaudit.rows.replay import RowSelection, RowsOptions, check_rows
from ggaudit.verify.walk.sums import verify_sums
from ggaudit.verify.walk.tensors import verify_tensor_manifest

from platforms import needs_linux
from support import REPO, assert_one_line_error, run_cli

FIXTURE = REPO / "fixtures" / "all_types.gguf"
#: The module, not the command of the same name that ``ggaudit.cli`` exports.
INFO = importlib.import_module("ggaudit.cli.info")
REPORT = "(a bug in ggaudit: please report it with the command that ran; run with --debug for the traceback)"


def _table(path: Path) -> Path:
    write_gguf(path, [TensorSpec("token_embd.weight", T.F32, (32, 4), np.zeros(128, "<f4").tobytes())])
    return path


def _raise(exc: BaseException) -> Any:
    def raiser(*_args: object, **_kwargs: object) -> None:
        raise exc
    return raiser


def _stderr_lines(result: Result) -> list[str]:
    return result.stderr.splitlines()


# --- exit 3: an internal error ------------------------------------------------------------------------

@pytest.mark.parametrize("exc, shown", [
    (ZeroDivisionError("division by zero"), "ZeroDivisionError: division by zero"),
    (RuntimeError(), "RuntimeError"),
    # Its message is quoted escaped and cut: never a terminal sequence, never megabytes.
    (ValueError("bad \x1b]0;title\x07" + "x" * 300),
     "ValueError: bad \\x1b]0;title\\x07" + "x" * (200 - 14) + "... (314 chars)"),
    (KeyError("k"), "KeyError: 'k'"),
])
def test_internal_error_is_one_line_and_exit_3(monkeypatch: pytest.MonkeyPatch, exc: Exception,
                                               shown: str) -> None:
    monkeypatch.setattr(INFO, "open_model", _raise(exc))
    result = run_cli(["info", FIXTURE])
    assert result.exit_code == 3, (result.exit_code, result.stderr, result.exception)
    assert _stderr_lines(result) == [f"ggaudit: internal error: {shown} {REPORT}"]
    assert result.stdout == ""


@pytest.mark.parametrize("command", [["scan"], ["verify", "--sums"], ["manifest"], ["diff", FIXTURE]])
def test_internal_error_in_every_command_is_exit_3(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                   command: list[Any]) -> None:
    # Every command opens through these; a bug anywhere below a command ends the same way.
    monkeypatch.setattr("ggaudit.io.opening.open_fd", _raise(ZeroDivisionError("boom")))
    args = [*command, FIXTURE] + (["-o", tmp_path / "m.json"] if command == ["manifest"] else [])
    result = run_cli(args)
    assert (result.exit_code, _stderr_lines(result)) == (
        3, [f"ggaudit: internal error: ZeroDivisionError: boom {REPORT}"]), result.exception


def test_debug_adds_the_traceback(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(INFO, "open_model", _raise(ZeroDivisionError("boom")))
    result = run_cli(["--debug", "info", FIXTURE])
    assert result.exit_code == 3
    lines = _stderr_lines(result)
    assert lines[0] == "Traceback (most recent call last):"
    assert "ZeroDivisionError: boom" in lines[-2]
    assert lines[-1] == ("ggaudit: internal error: ZeroDivisionError: boom (a bug in ggaudit: please report it "
                         "with the command that ran)")


def test_bad_input_stays_exit_2_with_and_without_debug(tmp_path: Path) -> None:
    for prefix in ([], ["--debug"]):
        assert_one_line_error(run_cli([*prefix, "info", tmp_path / "missing.gguf"]),
                              "missing.gguf: cannot open: ")


# --- exit 130: Ctrl-C -------------------------------------------------------------------------------

@pytest.mark.parametrize("target", ["open_model", "emit_outcomes"])
def test_ctrl_c_in_a_command_is_exit_130(monkeypatch: pytest.MonkeyPatch, target: str) -> None:
    monkeypatch.setattr(INFO, target, _raise(KeyboardInterrupt()))
    result = run_cli(["info", FIXTURE])
    assert (result.exit_code, result.stderr) == (130, "ggaudit: interrupted\n"), result.exception


def test_ctrl_c_while_arguments_are_parsed_is_exit_130(monkeypatch: pytest.MonkeyPatch) -> None:
    # Outside any command: click alone would print "Aborted!" and exit 1, the findings status.
    monkeypatch.setattr("ggaudit.cli.common.OneLineErrorsGroup.parse_args", _raise(KeyboardInterrupt()))
    result = run_cli(["info", FIXTURE])
    assert (result.exit_code, result.stderr) == (130, "ggaudit: interrupted\n"), result.exception


def test_ctrl_c_in_a_subcommands_options_is_exit_130(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr("ggaudit.cli.common.PathParam.convert", _raise(KeyboardInterrupt()))
    result = run_cli(["info", "--store", tmp_path, FIXTURE])
    assert (result.exit_code, result.stderr) == (130, "ggaudit: interrupted\n"), result.exception


# --- a reader that goes away: `ggaudit ... | head -1` ------------------------------------------------

@pytest.mark.parametrize("extra, status, stderr", [
    ([], 0, b""),
    # The run's own status and its own error line, and nothing about the pipe.
    (["missing.gguf"], 2, b"ggaudit: error: missing.gguf: cannot open: No such file or directory"),
])
def test_closed_stdout_ends_quietly_with_the_runs_status(extra: list[str], status: int, stderr: bytes) -> None:
    # Twenty models print about 100 KB, more than a pipe holds: ggaudit is still writing when the
    # reader closes, so the broken pipe is certain, not a race.
    args = [sys.executable, "-m", "ggaudit", "info", *[os.path.join("fixtures", "all_types.gguf")] * 20, *extra]
    proc = subprocess.Popen(args, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    first = proc.stdout.readline()
    proc.stdout.close()
    err = proc.stderr.read()
    assert proc.wait(timeout=120) == status, err
    assert first.rstrip() == b"model: " + os.path.join("fixtures", "all_types.gguf").encode()
    assert err.rstrip() == stderr


def test_closed_stdout_of_json_output_ends_quietly() -> None:
    args = [sys.executable, "-m", "ggaudit", "scan", "--json",
            *[os.path.join("fixtures", "all_types-q4_k-inf.gguf")] * 12]
    proc = subprocess.Popen(args, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.readline().rstrip() == b"{"
    proc.stdout.close()
    err = proc.stderr.read()
    assert (proc.wait(timeout=120), err) == (1, b"")


# --- the library: bad arguments are GGAuditErrors ----------------------------------------------------

class _BytesPath:
    def __fspath__(self) -> bytes:
        return b"m.gguf"


@pytest.mark.parametrize("opener", [open_gguf, open_model])
@pytest.mark.parametrize("path", [b"m.gguf", 5, None, _BytesPath()])
def test_openers_refuse_what_is_not_a_text_path(opener: Any, path: object) -> None:
    with pytest.raises(UsageError) as caught:
        opener(path)
    assert str(caught.value) == f"path: must be a str or os.PathLike[str], not {type(path).__name__}"


@pytest.mark.parametrize("call", [open_gguf, open_model, lambda p: open_reader(p, "buffered"),
                                  lambda p: open_reader(p, "mmap"), lambda p: check_rows(p),
                                  lambda p: verify_sums(p), lambda p: read_tensor_manifest(Path(p))])
def test_a_nul_byte_in_a_path_is_a_read_error(call: Any) -> None:
    with pytest.raises(ReadError) as caught:
        call("model\0.gguf")
    assert str(caught.value) == "model\\x00.gguf: path holds a NUL byte"


@pytest.mark.parametrize("call, message", [
    (lambda m: check_rows(m, 5), "rows: must be a sequence, range or numpy array of row IDs, not int; for one row, "
                                 "pass a list of one"),
    (lambda m: check_rows(m, "1,2"), "rows: must be a sequence, range or numpy array of row IDs, not str"),
    (lambda m: check_rows(m, [1], tensor=["t"]), "tensor: must be a string or None, not list"),
    (lambda m: check_rows(m, select=RowSelection(random="3")), "random: must be an integer or None, not str"),
    (lambda m: check_rows(m, select=RowSelection(random=True)), "random: must be an integer or None, not bool"),
    (lambda m: check_rows(m, select=RowSelection(random=2, seed=-1)), "seed: must be an integer in 0..4294967295"),
    (lambda m: check_rows(m, [1], options=RowsOptions(workers=2.0)), "workers: must be an integer, not float"),
    (lambda m: check_rows(m, [1], modes="mmap"), "modes: must be a list of read paths, not str"),
    (lambda m: check_rows(m, [1], modes=["bogus"]), "modes: unknown read path 'bogus'; choose from buffered, mmap, "
                                                    "direct"),
], ids=["rows-int", "rows-str", "tensor", "random-str", "random-bool", "seed", "workers", "modes-str", "modes"])
def test_check_rows_refuses_bad_arguments(tmp_path: Path, call: Callable[[Path], object], message: str) -> None:
    with pytest.raises(UsageError) as caught:
        call(_table(tmp_path / "m.gguf"))
    assert str(caught.value) == message


@pytest.mark.parametrize("mode", ["bogus", "", None, "MMAP"])
def test_open_reader_refuses_an_unknown_read_path(tmp_path: Path, mode: Any) -> None:
    with pytest.raises(UsageError) as caught:
        open_reader(str(_table(tmp_path / "m.gguf")), mode)
    assert str(caught.value) == f"mode: unknown read path {mode!r}; choose from buffered, mmap, direct"


@pytest.mark.parametrize("group_bytes", [-1, 0, "4096", 4096.0, True, None])
def test_build_tensor_manifest_refuses_a_bad_group_size(tmp_path: Path, group_bytes: Any) -> None:
    model = open_model(_table(tmp_path / "m.gguf"))
    with pytest.raises(UsageError) as caught:
        build_tensor_manifest(model, group_bytes=group_bytes)
    assert str(caught.value) == f"group_bytes: must be a positive integer, not {group_bytes!r}"
    assert build_tensor_manifest(model, group_bytes=1).group_bytes == 1


@pytest.mark.parametrize("reader, what", [(verify_sums, "checksum file"), (read_sums, "checksum file"),
                                          (lambda p: read_tensor_manifest(Path(p)), "tensor manifest"),
                                          (lambda p: verify_tensor_manifest(FIXTURE, p), "tensor manifest")])
def test_a_missing_or_folder_manifest_is_a_manifest_error(tmp_path: Path, reader: Any, what: str) -> None:
    missing = tmp_path / "missing.sha256"
    with pytest.raises(ManifestError) as caught:
        reader(missing)
    assert str(caught.value) == f"{missing}: cannot open {what}: No such file or directory"
    with pytest.raises(ManifestError) as caught:
        reader(tmp_path)
    assert str(caught.value) == f"{tmp_path}: {what} is a directory"


def test_cli_reports_a_missing_or_folder_sums_file_in_one_line(tmp_path: Path) -> None:
    assert_one_line_error(run_cli(["verify", "--sums", tmp_path]), f"{tmp_path}: ")
    assert_one_line_error(run_cli(["verify", "--sums", tmp_path / "SHA256SUMS"]),
                          f"{tmp_path / 'SHA256SUMS'}: cannot open checksum file: No such file or directory")


def _manifest_with(tmp_path: Path, key: str, raw_number: str) -> tuple[Path, int]:
    model = open_model(_table(tmp_path / "m.gguf"))
    from ggaudit.verify.manifests.tensor import tensor_manifest_to_json
    text = json.dumps(tensor_manifest_to_json(build_tensor_manifest(model, group_bytes=64)))
    marker = f'"{key}": '
    at = text.index(marker) + len(marker)
    end = at + len(str(json.loads(text[at:].split(",")[0].rstrip("}]"))))
    path = tmp_path / "m.manifest.json"
    path.write_text(text[:at] + raw_number + text[end:])
    return path, at


@pytest.mark.parametrize("key, number", [("row_group_bytes", "9" * 4301), ("size", "-" + "1" * 5000),
                                         ("nbytes", "7" * 100_000)])
def test_a_json_integer_too_long_to_convert_is_a_manifest_error(tmp_path: Path, key: str, number: str) -> None:
    path, at = _manifest_with(tmp_path, key, number)
    with pytest.raises(ManifestError) as caught:
        read_tensor_manifest(path)
    assert (caught.value.offset, caught.value.message) == (
        at, "tensor manifest holds an integer of more than 4300 digits")
    assert_one_line_error(run_cli(["verify", "--manifest", path, tmp_path / "m.gguf"]),
                          f"{path}: offset {at}: tensor manifest holds an integer of more than 4300 digits")


def test_long_digit_strings_and_floats_are_not_the_integer_reported(tmp_path: Path) -> None:
    path, at = _manifest_with(tmp_path, "row_group_bytes", "9" * 4301)
    text = path.read_text()
    # Long digits inside a string and a long float come first; the offset is still the integer's.
    prefix = '{"note": "' + "1" * 5000 + '", "x": ' + "2" * 5000 + ".5, "
    path.write_text(prefix + text[1:])
    with pytest.raises(ManifestError) as caught:
        read_tensor_manifest(path)
    assert caught.value.offset == at + len(prefix) - 1


@pytest.mark.parametrize("key", ["n_rows", "rows_per_group"])
def test_a_long_integer_in_a_row_group_count_message_is_cut(tmp_path: Path, key: str) -> None:
    # Under Python's 4300-digit limit, so it parses: the counts it leads to are quoted cut, not in full.
    path, _ = _manifest_with(tmp_path, key, "7" * 4000)
    tensor = json.loads(path.read_text())["tensors"][0]

    def cut(number: int) -> str:
        text = str(number)
        return text if len(text) <= 40 else f"{text[:40]}... ({len(text)} chars)"

    said = (f"has {len(tensor['row_groups'])} entries, {cut(-(-tensor['n_rows'] // tensor['rows_per_group']))} "
            f"expected for {cut(tensor['n_rows'])} rows")
    with pytest.raises(ManifestError) as caught:
        read_tensor_manifest(path)
    assert (caught.value.field, caught.value.message) == ("tensors[0].row_groups", said)
    line = assert_one_line_error(run_cli(["verify", "--manifest", path, tmp_path / "m.gguf"]), said)
    assert len(line) < 200 + len(str(path)), len(line)


def test_every_library_error_above_is_a_ggaudit_error() -> None:
    assert all(issubclass(cls, GGAuditError) for cls in (ManifestError, ReadError, UsageError))


@pytest.mark.parametrize("jobs", [0, -3])
def test_run_models_refuses_fewer_than_one_job(jobs: int) -> None:
    with pytest.raises(UsageError) as caught:
        run_models(["a", "b"], len, jobs=jobs)
    assert str(caught.value) == f"jobs: must be at least 1, not {jobs}"


def _set_name_interrupted() -> None:
    """What Python before 3.12 raises when Ctrl-C lands while a class body is set up."""
    class Interrupts:
        def __set_name__(self, owner: type, name: str) -> None:
            raise KeyboardInterrupt

    try:
        type("Model", (), {"field": Interrupts()})
    except KeyboardInterrupt as err:        # Python 3.12 and later let it through: wrap it as 3.11 does
        raise RuntimeError("Error calling __set_name__ on 'Interrupts' instance 'field' in 'Model'") from err


@pytest.mark.parametrize("call", [_set_name_interrupted, _raise(ValueError("x"))])
def test_a_wrapped_ctrl_c_is_130_and_other_errors_are_3(call: Any) -> None:
    from ggaudit.cli.common import guarded

    with pytest.raises(SystemExit) as ended:
        guarded(call)
    assert ended.value.code == (130 if call is _set_name_interrupted else 3)


# --- exit 4: the result could not be written ----------------------------------------------------------

def _run_writing_to(stdout: Any, *args: str | Path, limit_file_size: bool = False) -> subprocess.CompletedProcess[str]:
    """``python -m ggaudit ARGS`` with stdout on ``stdout``; with ``limit_file_size``, no file it writes may
    pass 256 bytes (RLIMIT_FSIZE: the write fails with EFBIG, as on a full disk; CPython ignores SIGXFSZ)."""
    def limit() -> None:
        import resource
        resource.setrlimit(resource.RLIMIT_FSIZE, (256, 256))

    return subprocess.run([sys.executable, "-m", "ggaudit", *map(str, args)], cwd=REPO, stdout=stdout,
                          stderr=subprocess.PIPE, text=True, timeout=120,
                          preexec_fn=limit if limit_file_size else None)


@needs_linux        # /dev/full: a device whose every write fails with ENOSPC
@pytest.mark.parametrize("args", [["scan", FIXTURE], ["scan", "--json", FIXTURE], ["info", FIXTURE],
                                  ["diff", FIXTURE, FIXTURE], ["manifest", FIXTURE, "-o", "-"], ["--help"]],
                         ids=["scan", "scan-json", "info", "diff", "manifest", "help"])
def test_a_full_stdout_is_exit_4_naming_stdout(args: list[str | Path]) -> None:
    # Not exit 2, which says the input is bad, nor 0: the check ran, but nobody can read its verdict.
    with open("/dev/full", "w") as full:
        proc = _run_writing_to(full, *args)
    assert (proc.returncode, proc.stderr) == (
        4, "ggaudit: error: cannot write the output to stdout: No space left on device\n")


@needs_linux
@pytest.mark.parametrize("args, what", [(["scan", "--json", FIXTURE, "-o"], "the report"),
                                        (["manifest", FIXTURE, "-o"], "the manifest")], ids=["report", "manifest"])
def test_an_output_file_that_cannot_be_written_is_exit_4_naming_it(tmp_path: Path, args: list[str | Path],
                                                                   what: str) -> None:
    out = tmp_path / "out.json"
    out.write_text("the previous run's\n")
    proc = _run_writing_to(subprocess.PIPE, *args, out, *(["--force"] if what == "the manifest" else []),
                           limit_file_size=True)
    assert (proc.returncode, proc.stderr, proc.stdout) == (
        4, f"ggaudit: error: cannot write {what} to {out}: File too large\n", "")
    # Replaced atomically or not at all: the old file is whole, and no temporary file is left beside it.
    assert (os.listdir(tmp_path), out.read_text()) == (["out.json"], "the previous run's\n")
