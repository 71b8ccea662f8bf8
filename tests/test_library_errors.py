"""Errors an engine's Python code catches (issue 36, item 4): ggaudit's I/O errors are also the standard
exceptions (a missing file a ``FileNotFoundError``, with ``errno``, ``strerror`` and ``filename``), survive
pickling as they are (Dask ships them between processes), and say the library's parameters (``manifest=``)
where the command line says its options (``--manifest``), the CLI's one line unchanged."""

from __future__ import annotations

import errno
import os
import pickle
from pathlib import Path

import pytest

import ggaudit
from ggaudit.cli.common import OutputError, as_flags, writing_to
from ggaudit.errors import STANDARD_OS_ERRORS, ManifestError, NothingChecked, Param, ReadError, UsageError

from support import assert_one_line_error, run_cli, write_small_model, write_split_set

NO_SUCH_FILE = os.strerror(errno.ENOENT)


def test_a_missing_model_is_a_read_error_and_a_file_not_found_error(tmp_path: Path) -> None:
    missing = tmp_path / "absent.gguf"
    with pytest.raises(FileNotFoundError) as caught:
        ggaudit.open_model(missing)
    err = caught.value
    assert isinstance(err, ReadError) and isinstance(err, OSError)
    assert (err.errno, err.strerror, err.filename) == (errno.ENOENT, NO_SUCH_FILE, os.fspath(missing))
    assert (err.path, err.offset, err.field) == (os.fspath(missing), None, None)
    assert str(err) == err.args[0] == f"{missing}: cannot open: {NO_SUCH_FILE}"
    line = assert_one_line_error(run_cli(["info", missing]))
    assert line == f"ggaudit: error: {missing}: cannot open: {NO_SUCH_FILE}"


def test_a_missing_manifest_is_a_manifest_error_and_a_file_not_found_error(tmp_path: Path) -> None:
    model = write_small_model(tmp_path / "m.gguf", rows=4)
    missing = tmp_path / "absent.manifest.json"
    with pytest.raises(FileNotFoundError) as caught:
        ggaudit.verify(model, manifest=missing)
    err = caught.value
    assert isinstance(err, ManifestError) and not isinstance(err, ReadError)
    assert (err.errno, err.filename) == (errno.ENOENT, os.fspath(missing))
    assert str(err) == f"{missing}: cannot open manifest: {NO_SUCH_FILE}"


def test_every_missing_file_error_is_of_the_one_class_made_once(tmp_path: Path) -> None:
    errors = []
    for name in ("a.gguf", "b.gguf"):
        with pytest.raises(ReadError) as caught:
            ggaudit.open_model(tmp_path / name)
        errors.append(caught.value)
    assert type(errors[0]) is type(errors[1])
    assert type(errors[0]).__name__ == "ReadError[FileNotFoundError]"
    assert type(errors[0]).__bases__ == (ReadError, FileNotFoundError)


@pytest.mark.parametrize(("code", "standard"), [
    (errno.ENOENT, FileNotFoundError), (errno.EACCES, PermissionError), (errno.EPERM, PermissionError),
    (errno.EIO, OSError)])
def test_the_errno_says_which_standard_exception_the_error_also_is(code: int, standard: type[OSError]) -> None:
    # Windows' ERROR_ACCESS_DENIED and ERROR_SHARING_VIOLATION reach here as EACCES: Python maps them.
    err = ReadError.for_os_error("m.gguf", "read failed: it", OSError(code, os.strerror(code), "m.gguf"), offset=96)
    assert STANDARD_OS_ERRORS.get(code, OSError) is standard
    assert type(err).__bases__ == (ReadError, standard) and isinstance(err, OSError)
    assert (err.errno, err.strerror, err.filename, err.offset) == (code, os.strerror(code), "m.gguf", 96)
    assert str(err) == "m.gguf: offset 96: read failed: it"


@pytest.mark.skipif(os.name != "nt", reason="Windows error codes reach Python mapped to errno on Windows only")
@pytest.mark.parametrize(("winerror", "standard"), [
    (2, FileNotFoundError), (3, FileNotFoundError), (5, PermissionError), (32, PermissionError)])
def test_windows_errors_are_the_standard_exceptions_too(winerror: int, standard: type[OSError]) -> None:
    # ERROR_FILE_NOT_FOUND, ERROR_PATH_NOT_FOUND, ERROR_ACCESS_DENIED, ERROR_SHARING_VIOLATION
    err = ReadError.for_os_error("m.gguf", "cannot open: it", OSError(None, "it", "m.gguf", winerror))
    assert isinstance(err, standard) and type(err).__bases__ == (ReadError, standard)


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root reads a file of mode 000")
def test_an_unreadable_model_is_a_permission_error(tmp_path: Path) -> None:
    model = write_small_model(tmp_path / "m.gguf", rows=4)
    model.chmod(0)
    with pytest.raises(PermissionError) as caught:
        ggaudit.open_model(model)
    assert isinstance(caught.value, ReadError) and caught.value.errno == errno.EACCES


def test_an_os_error_survives_pickling_as_it_was(tmp_path: Path) -> None:
    with pytest.raises(ReadError) as caught:
        ggaudit.open_model(tmp_path / "absent.gguf")
    back = pickle.loads(pickle.dumps(caught.value))
    assert type(back) is type(caught.value) and isinstance(back, FileNotFoundError)
    assert (back.errno, back.strerror) == (errno.ENOENT, NO_SUCH_FILE)
    assert back.filename == os.fspath(tmp_path / "absent.gguf")
    assert (str(back), back.path, back.offset, back.field) == (str(caught.value), caught.value.path, None, None)


def test_a_model_that_is_not_there_is_an_os_error_of_its_outcome_too(tmp_path: Path) -> None:
    from ggaudit.outcomes import as_error

    err = as_error("m.gguf", PermissionError(errno.EACCES, os.strerror(errno.EACCES), "m.gguf"))
    assert isinstance(err, ReadError) and isinstance(err, PermissionError)
    assert str(err) == f"m.gguf: {os.strerror(errno.EACCES)}"


def test_verify_of_a_plain_file_names_the_parameters_and_the_cli_its_options(tmp_path: Path) -> None:
    plain = tmp_path / "model.bin"
    plain.write_bytes(b"x")
    with pytest.raises(UsageError) as caught:
        ggaudit.verify(plain)
    assert str(caught.value) == (f"{plain}: the file name holds no sha256; give manifest=, sums=, ollama:NAME or "
                                 "hf:ORG/NAME to say what to check it against")
    assert assert_one_line_error(run_cli(["verify", plain])) == (
        f"ggaudit: error: {plain}: the file name holds no sha256; give --manifest, --sums, ollama:NAME or "
        "hf:ORG/NAME to say what to check it against")


def test_ignore_missing_with_nothing_present_in_both_wordings(tmp_path: Path) -> None:
    sums = tmp_path / "SHA256SUMS"
    sums.write_text(f"{'0' * 64}  gone.bin\n")
    with pytest.raises(NothingChecked) as caught:
        ggaudit.verify(sums=sums, ignore_missing=True)
    assert str(caught.value) == (f"{sums}: ignore_missing: no file it names is present (ignore_missing=True): "
                                 "no file was verified")
    assert assert_one_line_error(run_cli(["verify", "--sums", sums, "--ignore-missing"])) == (
        f"ggaudit: error: {sums}: --ignore-missing: no file it names is present (--ignore-missing): "
        "no file was verified")


def test_one_sha256_for_a_split_set_points_to_the_sums_parameter(tmp_path: Path) -> None:
    first, _ = write_split_set(tmp_path)
    with pytest.raises(UsageError) as caught:
        ggaudit.check(first, sha256="0" * 64)
    assert str(caught.value) == ("sha256: is one file's digest, and the target has 2 files: check each file on its "
                                 "own, or give sums=")
    assert assert_one_line_error(run_cli(["check", first, "--sha256", "0" * 64])) == (
        "ggaudit: error: --sha256: is one file's digest, and the target has 2 files: check each file on its own, "
        "or give --sums")


def test_a_store_given_is_said_as_the_parameter_by_the_library(tmp_path: Path) -> None:
    (tmp_path / "manifests").mkdir()
    manifest = tmp_path / "manifests" / "registry.ollama.ai" / "library" / "nope" / "latest"
    with pytest.raises(ManifestError) as caught:
        ggaudit.verify("ollama:nope", store=tmp_path)
    assert str(caught.value) == (f"{manifest}: model registry.ollama.ai/library/nope:latest is not in the Ollama "
                                 f"store {tmp_path} (given by store=)")
    assert assert_one_line_error(run_cli(["verify", "ollama:nope", "--store", tmp_path])) == (
        f"ggaudit: error: {manifest}: model registry.ollama.ai/library/nope:latest is not in the Ollama store "
        f"{tmp_path} (given by --store)")


def test_as_flags_keeps_the_class_and_the_errno() -> None:
    err = ReadError.for_os_error("m.gguf", ("cannot open; give ", Param("sums")), FileNotFoundError(errno.ENOENT, "x"),
                                 field="tensors")
    said = as_flags(err)
    assert type(said) is type(err) and isinstance(said, FileNotFoundError) and said.errno == errno.ENOENT
    assert str(said) == said.args[0] == "m.gguf: --tensor: cannot open; give --sums"
    assert str(err) == "m.gguf: tensors: cannot open; give sums="


def test_a_parameter_named_pickles_in_the_library_wording() -> None:
    err = UsageError(None, ("give ", Param("manifest"), " or ", Param("sums")), field="sha256")
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is UsageError and str(back) == "sha256: give manifest= or sums="
    assert str(as_flags(back)) == "--sha256: give --manifest or --sums"


def test_an_input_error_inside_an_output_block_stays_the_input_error(tmp_path: Path) -> None:
    # It is an OSError too now; writing_to must not take it for a failed write of the output (exit 4).
    with pytest.raises(ReadError), writing_to(os.fspath(tmp_path / "report.txt"), "the report"):
        ggaudit.open_model(tmp_path / "absent.gguf")
    with pytest.raises(OutputError), writing_to(os.fspath(tmp_path / "report.txt"), "the report"):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_a_direct_open_windows_refuses_is_an_os_error_too(tmp_path: Path) -> None:
    from fake_kernel32 import FakeKernel32

    from ggaudit.evidence.readers import WindowsDirectReader

    missing = tmp_path / "missing"
    with pytest.raises(OSError) as caught:
        WindowsDirectReader(os.fspath(missing), FakeKernel32())     # CreateFileW fails: ERROR_FILE_NOT_FOUND
    assert isinstance(caught.value, ReadError) and caught.value.filename == os.fspath(missing)
    assert str(caught.value) == f"{missing}: CreateFileW failed: Windows error 2"
    # Python gives the Windows error its errno (ENOENT) on Windows only: the stand-in on Linux stays an OSError.
    assert isinstance(caught.value, FileNotFoundError) == (os.name == "nt")


def test_every_parameter_a_message_names_has_its_option_on_the_command_line() -> None:
    # A Param the CLI's table lacks would reach the command line in the library's words (store=). chosen_by
    # forwards the name of the parameter that chose a store's folder: its callers' literals count.
    import ast

    from ggaudit.cli.common import FLAGS

    named = set()
    for source in (Path(ggaudit.__file__).parent).rglob("*.py"):
        for node in ast.walk(ast.parse(source.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) in ("Param", "chosen_by") and node.args:
                named |= {c.value for c in ast.walk(node.args[0]) if isinstance(c, ast.Constant) and c.value}
    assert named >= {"manifest", "sums", "ignore_missing", "store", "hf_cache"}
    # hf_cache: no option sets it (the command line finds the cache by $HF_HUB_CACHE and $HF_HOME).
    assert sorted(named - set(FLAGS)) == ["hf_cache"]


def test_a_header_read_the_device_fails_is_an_os_error_at_its_offset(tmp_path: Path) -> None:
    from ggaudit.format.layout import open_gguf

    model = write_small_model(tmp_path / "m.gguf", rows=4)

    def failing(offset: int, n: int) -> bytes:
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    with pytest.raises(OSError) as caught:
        open_gguf(model, lambda path: failing)
    assert isinstance(caught.value, ReadError) and not isinstance(caught.value, FileNotFoundError)
    assert (caught.value.errno, caught.value.filename) == (errno.EIO, os.fspath(model))
    assert str(caught.value) == f"{model}: offset 0: read failed: {os.strerror(errno.EIO)}"


def test_a_missing_capture_is_a_usage_error_and_a_file_not_found_error(tmp_path: Path) -> None:
    model = write_small_model(tmp_path / "m.gguf", rows=4)
    missing = tmp_path / "capture.npz"
    with pytest.raises(FileNotFoundError) as caught:
        ggaudit.check_rows(model, against=os.fspath(missing), modes=())
    assert isinstance(caught.value, UsageError) and caught.value.errno == errno.ENOENT
    assert str(caught.value) == f"{missing}: cannot read the capture: cannot open: {NO_SUCH_FILE}"
