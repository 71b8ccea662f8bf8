"""Unreadable input (issue 6): a missing file, a directory, a FIFO, a device, permission denied, a
missing or unreadable shard. Every command gives exit 2 and exactly one line on stderr naming the path,
never a traceback and never a hang.

Permission tests run as root here, and root reads a mode-000 file regardless; so they run the CLI in
a subprocess whose capability bounding set lacks CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH (setpriv),
which makes the kernel refuse the open exactly as it would for an ordinary user.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from click.testing import Result

from platforms import IS_ROOT, needs_fifo, needs_mode_bits, needs_unix_socket
from support import assert_one_line_error, run_cli, write_small_model, write_split_set

HANG_GUARD = 20.0


@pytest.fixture()
def good(tmp_path: Path) -> Path:
    return write_small_model(tmp_path / "good.gguf")


@pytest.fixture()
def manifest_file(good: Path, tmp_path: Path) -> Path:
    out = tmp_path / "good.manifest.json"
    result = run_cli(["manifest", good, "-o", out])
    assert result.exit_code == 0, result.output + result.stderr
    return out


def _commands(model: Path, manifest: Path, tmp_path: Path) -> dict[str, list[object]]:
    """Every command, with MODEL in the position a user would put it."""
    return {
        "info": ["info", model],
        "scan": ["scan", model],
        "manifest": ["manifest", model, "-o", tmp_path / "out.json"],
        "rows": ["rows", model, "--ids", "0"],
        "verify": ["verify", model, "--manifest", manifest],
        "diff": ["diff", model, manifest.with_name("good.gguf")],
    }


COMMANDS = ["info", "scan", "manifest", "rows", "verify", "diff"]


def _run_guarded(args: list[object], unblock: Path | None = None) -> Result:
    """Run the CLI in a thread; if it is still running after HANG_GUARD seconds, fail (and unblock a
    FIFO open by opening its other end, so the thread can finish)."""
    box: dict[str, Result] = {}
    thread = threading.Thread(target=lambda: box.setdefault("r", run_cli(args)), daemon=True)
    thread.start()
    thread.join(HANG_GUARD)
    if thread.is_alive():
        if unblock is not None:
            fd = os.open(unblock, os.O_WRONLY | os.O_NONBLOCK)
            os.close(fd)
            thread.join(5)
        pytest.fail(f"ggaudit {args[0]} hung on {args[1]}")
    return box["r"]


@pytest.mark.parametrize("command", COMMANDS)
def test_missing_file(command: str, manifest_file: Path, tmp_path: Path) -> None:
    missing = tmp_path / "no-such.gguf"
    result = run_cli(_commands(missing, manifest_file, tmp_path)[command])
    if command == "verify":
        # Checked against a manifest, a missing file is a finding (the manifest says it exists), as a
        # missing blob is for an Ollama model: exit 1 with the path in the report.
        assert result.exit_code == 1, (result.output, result.stderr)
        assert f"MISMATCH missing: file {missing} " in result.output
        return
    assert_one_line_error(result, str(missing))
    assert not (tmp_path / "out.json").exists()


@pytest.mark.parametrize("command", COMMANDS)
def test_directory_given_as_model(command: str, manifest_file: Path, tmp_path: Path) -> None:
    folder = tmp_path / "a-folder.gguf"
    folder.mkdir()
    result = run_cli(_commands(folder, manifest_file, tmp_path)[command])
    assert_one_line_error(result, str(folder), "directory")


@needs_fifo
@pytest.mark.parametrize("command", COMMANDS)
def test_fifo_given_as_model_does_not_hang(command: str, manifest_file: Path, tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.gguf"
    os.mkfifo(fifo)
    result = _run_guarded(_commands(fifo, manifest_file, tmp_path)[command], unblock=fifo)
    assert_one_line_error(result, str(fifo), "not a regular file")


@pytest.mark.parametrize("command", ["info", "scan", "rows"])
def test_device_given_as_model(command: str, manifest_file: Path, tmp_path: Path) -> None:
    assert_one_line_error(_run_guarded(_commands(Path(os.devnull), manifest_file, tmp_path)[command]),
                          os.devnull, "not a regular file")


@needs_unix_socket
@pytest.mark.parametrize("command", ["info", "scan", "rows"])
def test_socket_given_as_model(command: str, manifest_file: Path, tmp_path: Path) -> None:
    sock_path = tmp_path / "sock.gguf"
    _refused_while_bound(sock_path, _commands(sock_path, manifest_file, tmp_path)[command])


def _refused_while_bound(sock_path: Path, args: list[object]) -> None:
    """``args`` name ``sock_path``, a listening Unix socket: one line naming it, exit 2, no hang."""
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(os.fspath(sock_path))
        assert_one_line_error(_run_guarded(args), str(sock_path))


@needs_fifo
@pytest.mark.parametrize("option", ["--sums", "--manifest"])
def test_fifo_manifest_or_sums_file(option: str, good: Path, tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.txt"
    os.mkfifo(fifo)
    args: list[object] = ["verify", "--sums", fifo] if option == "--sums" else ["verify", good, "--manifest", fifo]
    assert_one_line_error(_run_guarded(args, unblock=fifo), str(fifo))


def _input_file_args(option: str, good: Path, path: object) -> list[object]:
    """A command that reads ``path`` through ``option`` (an input file other than the model)."""
    return {"--ids-file": ["rows", good, "--ids-file", path], "--sums": ["verify", "--sums", path],
            "--manifest": ["verify", good, "--manifest", path],
            "--against": ["rows", good, "--ids", "0", "--modes", "buffered", "--against", path]}[option]


@pytest.mark.skipif(sys.platform == "win32" or not Path("/dev/zero").exists(), reason="a POSIX device")
@pytest.mark.parametrize("option", ["--ids-file", "--sums", "--manifest"])
def test_an_endless_device_as_an_input_file_is_refused(option: str, good: Path) -> None:
    assert_one_line_error(_run_guarded(_input_file_args(option, good, "/dev/zero")), "/dev/zero",
                          "not a regular file")


@needs_unix_socket
@pytest.mark.parametrize("option", ["--ids-file", "--sums", "--manifest"])
def test_a_socket_as_an_input_file_is_refused(option: str, good: Path, tmp_path: Path) -> None:
    sock_path = tmp_path / "input.sock"
    _refused_while_bound(sock_path, _input_file_args(option, good, sock_path))


def test_an_ids_file_over_the_cap_is_refused_unread(good: Path, tmp_path: Path) -> None:
    ids = tmp_path / "ids.txt"
    with open(ids, "wb") as fh:                     # sparse: 64 MiB and one byte, nothing written
        fh.truncate((64 << 20) + 1)
    assert_one_line_error(run_cli(["rows", good, "--ids-file", ids]), str(ids), "larger than 64 MiB")


@pytest.mark.parametrize("option", ["--sums", "--manifest"])
def test_missing_manifest_or_sums_file(option: str, good: Path, tmp_path: Path) -> None:
    missing = tmp_path / "missing.txt"
    args = ["verify", "--sums", missing] if option == "--sums" else ["verify", good, "--manifest", missing]
    assert_one_line_error(run_cli(args), str(missing))


def test_missing_shard_is_named(tmp_path: Path) -> None:
    first, second = write_split_set(tmp_path)
    second.unlink()
    for command in (["info", first], ["scan", first], ["manifest", first, "-o", tmp_path / "m.json"]):
        assert_one_line_error(run_cli(command), str(second), "missing")


# --- permission denied, for real ------------------------------------------------------------------

_SETPRIV = shutil.which("setpriv")
_DROP = "-dac_override,-dac_read_search"


def _run_unprivileged(args: list[object]) -> subprocess.CompletedProcess[str]:
    """Run ``python -m ggaudit ARGS`` as a process the kernel holds to file permissions."""
    cmd = [sys.executable, "-m", "ggaudit", *map(str, args)]
    if IS_ROOT:
        cmd = [_SETPRIV or "setpriv", f"--bounding-set={_DROP}", f"--inh-caps={_DROP}", *cmd]
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parent.parent))
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)


needs_drop = needs_mode_bits


def _assert_denied(proc: subprocess.CompletedProcess[str], path: Path) -> None:
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("ggaudit: error: "), proc.stderr
    # The library says "Permission denied"; click's own check of a path option says "is not readable".
    assert str(path) in lines[0] and ("Permission denied" in lines[0] or "is not readable" in lines[0]), lines[0]


@needs_drop
def test_the_unprivileged_runner_really_cannot_read(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text("x")
    secret.chmod(0)
    proc = subprocess.run([*([_SETPRIV, f"--bounding-set={_DROP}", f"--inh-caps={_DROP}"]
                             if IS_ROOT else []), sys.executable, "-c", f"open({str(secret)!r})"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1 and "PermissionError" in proc.stderr


@needs_drop
@pytest.mark.parametrize("command", ["info", "scan", "manifest", "rows"])
def test_permission_denied_names_the_file(command: str, good: Path, tmp_path: Path) -> None:
    good.chmod(0)
    args = {"info": ["info", good], "scan": ["scan", good], "manifest": ["manifest", good, "-o", tmp_path / "o"],
            "rows": ["rows", good, "--ids", "0"]}[command]
    _assert_denied(_run_unprivileged(args), good)


@needs_drop
def test_unreadable_shard_is_named(tmp_path: Path) -> None:
    first, second = write_split_set(tmp_path)
    second.chmod(0)
    _assert_denied(_run_unprivileged(["info", first]), second)


@needs_drop
def test_unreadable_sums_file_and_listed_file(tmp_path: Path) -> None:
    model = write_small_model(tmp_path / "m.gguf")
    sums = tmp_path / "SHA256SUMS"
    sums.write_text(f"{hashlib.sha256(model.read_bytes()).hexdigest()}  m.gguf\n")
    model.chmod(0)
    _assert_denied(_run_unprivileged(["verify", "--sums", sums]), model)
    model.chmod(0o644)
    sums.chmod(0)
    _assert_denied(_run_unprivileged(["verify", "--sums", sums]), sums)


@needs_drop
@pytest.mark.parametrize("option", ["--manifest", "--ids-file", "--against"])
def test_an_unreadable_input_file_is_named(option: str, good: Path, tmp_path: Path) -> None:
    unreadable = tmp_path / "input"
    shutil.copyfile(good, unreadable)               # a model for --against, junk for the others
    unreadable.chmod(0)
    _assert_denied(_run_unprivileged(_input_file_args(option, good, unreadable)), unreadable)


@pytest.mark.parametrize("args, needle", [
    (["scan", "--bogus", "m.gguf"], "--bogus"),
    (["info"], "Missing argument 'MODEL...'"),
    (["frobnicate"], "No such command 'frobnicate'"),
    (["rows", "m.gguf", "--workers", "many"], "'many' is not a valid integer"),
])
def test_bad_arguments_are_one_line_too(args: list[str], needle: str) -> None:
    line = assert_one_line_error(run_cli(args), needle)
    assert line.endswith(" --help')"), line
