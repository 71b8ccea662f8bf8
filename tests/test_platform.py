"""The platform package (ggaudit.io) and what Windows users see: positioned reads on every OS, folders
refused as folders, paths shown once-escaped, default stores from Windows-style environments.

These run on both lanes; the ones marked ``windows`` hold only there (the Windows lane runs them under
Wine with python.org's CPython) and are skipped on POSIX with that reason.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from ggaudit.io import opening, positioned
from ggaudit.io import windows as win_api
from ggaudit.cli import main
from ggaudit.errors import ReadError
from ggaudit.stores.hf import default_hf_cache
from ggaudit.stores.ollama import default_ollama_store
from ggaudit.evidence.readers import MmapReader
from ggaudit.escaping import escape_path
import contextlib

WINDOWS = sys.platform == "win32"
windows = pytest.mark.skipif(not WINDOWS, reason="checks Windows' own paths and semantics")
FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


@pytest.fixture
def pattern(tmp_path: Path) -> tuple[Path, bytes]:
    data = bytes((i * 7 + i // 251) & 0xFF for i in range(200_000))
    path = tmp_path / "pattern.bin"
    path.write_bytes(data)
    return path, data


def test_positioned_reads_deliver_the_bytes_at_the_offset(pattern: tuple[Path, bytes]) -> None:
    path, data = pattern
    fd, st = opening.open_readonly(path)
    try:
        assert st.st_size == len(data)
        assert positioned.pread(fd, 1000, 12345) == data[12345:13345]
        assert positioned.pread(fd, 1000, len(data) - 10) == data[-10:]     # stops at the end of the file
        assert positioned.pread(fd, 10, len(data)) == b""                   # at the end: nothing, no error
        buf = bytearray(4096)
        assert positioned.pread_into(fd, memoryview(buf), 65535) == 4096
        assert bytes(buf) == data[65535:65535 + 4096]
        assert positioned.pread_into(fd, memoryview(buf), len(data) + 5) == 0
        positioned.pread_exact(fd, path, memoryview(buf)[:100], 7)
        assert bytes(buf[:100]) == data[7:107]
        with pytest.raises(ReadError, match="file ended early") as err:
            positioned.pread_exact(fd, path, memoryview(buf), len(data) - 100)
        assert err.value.offset == len(data)
    finally:
        os.close(fd)


def test_threads_sharing_one_descriptor_never_race(pattern: tuple[Path, bytes]) -> None:
    # Positioned reads carry their own offset (pread; ReadFile with an OVERLAPPED): no shared file pointer.
    path, data = pattern
    fd, _ = opening.open_readonly(path)
    wrong: list[int] = []

    def worker(seed: int) -> None:
        buf = bytearray(333)
        for k in range(300):
            offset = (seed * 7919 + k * 104729) % (len(data) - 333)
            if positioned.pread_into(fd, memoryview(buf), offset) != 333 or bytes(buf) != data[offset:offset + 333]:
                wrong.append(offset)

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(4)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        os.close(fd)
    assert wrong == []


def test_offsets_past_4_gib_reach_the_right_bytes(tmp_path: Path) -> None:
    # The high half of the offset travels separately on Windows (OVERLAPPED.OffsetHigh).
    path = tmp_path / "sparse.bin"
    far = (4 << 30) + 123
    with open(path, "wb") as f:
        f.seek(far)
        f.write(b"far bytes")
    fd, _ = opening.open_readonly(path)
    try:
        assert positioned.pread(fd, 9, far) == b"far bytes"
        buf = bytearray(9)
        assert positioned.pread_into(fd, memoryview(buf), far) == 9 and bytes(buf) == b"far bytes"
        assert positioned.pread(fd, 3, 123) == b"\0\0\0"
    finally:
        os.close(fd)


def test_a_folder_is_refused_as_a_folder(tmp_path: Path) -> None:
    with pytest.raises(ReadError, match=r": is a directory$"):
        opening.open_readonly(tmp_path)


def test_cli_says_a_folder_is_a_directory(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["info", str(tmp_path)])
    assert result.exit_code == 2
    assert result.stderr.rstrip("\n").endswith(": is a directory"), result.stderr


def test_a_missing_file_says_so(tmp_path: Path) -> None:
    with pytest.raises(ReadError, match="cannot open: No such file or directory"):
        opening.open_readonly(tmp_path / "absent.gguf")


@pytest.mark.parametrize(("path", "sep", "shown"), [
    ("fixtures\\all_types.gguf", "\\", "fixtures\\all_types.gguf"),      # Windows: the separator once
    ("C:\\m\\bad\x1bname.gguf", "\\", "C:\\m\\bad\\x1bname.gguf"),       # controls still escaped
    ("C:\\m\\\u202egnp.gguf", "\\", "C:\\m\\\\u202egnp.gguf"),
    ("dir/a\\b.gguf", "/", "dir/a\\\\b.gguf"),     # POSIX: a backslash is part of a name, so it is escaped
    ("dir/new\nline", "/", "dir/new\\nline"),
])
def test_paths_are_escaped_but_the_separator_is_not(path: str, sep: str, shown: str) -> None:
    assert escape_path(path, sep) == shown


@windows
def test_windows_paths_print_with_single_backslashes() -> None:
    runner = CliRunner()
    result = runner.invoke(main, ["scan", "fixtures\\all_types-q4_k-inf.gguf"])
    assert result.exit_code == 1, result.output
    assert result.stdout.splitlines()[0].startswith("model fixtures\\all_types-q4_k-inf.gguf: ")
    assert "\\\\" not in result.stdout
    result = runner.invoke(main, ["info", "fixtures\\absent.gguf"])
    assert result.exit_code == 2
    assert "fixtures\\absent.gguf" in result.stderr and "\\\\" not in result.stderr


@windows
def test_default_stores_from_a_windows_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    profile = "C:\\Users\\Ann Lee"
    assert str(default_ollama_store({"USERPROFILE": profile}, "win32")) == \
        "C:\\Users\\Ann Lee\\.ollama\\models"
    assert str(default_ollama_store({"OLLAMA_MODELS": "D:\\models", "USERPROFILE": profile})) == "D:\\models"
    monkeypatch.setenv("USERPROFILE", profile)
    monkeypatch.delenv("HOME", raising=False)
    assert str(default_hf_cache({})) == "C:\\Users\\Ann Lee\\.cache\\huggingface\\hub"
    assert str(default_hf_cache({"HF_HOME": "E:\\hf"})) == "E:\\hf\\hub"
    assert str(default_hf_cache({"HF_HUB_CACHE": "E:\\hub", "HF_HOME": "E:\\hf"})) == "E:\\hub"


@windows
def test_windows_does_not_let_a_mapped_file_shrink(pattern: tuple[Path, bytes]) -> None:
    # Why the mmap read path has no SIGBUS to guard against on Windows: while the map is open the file
    # cannot shrink. Windows refuses (ERROR_USER_MAPPED_FILE); Wine 8.0 says yes and leaves the size as it
    # was. Either way every byte the reader copies is still the file's.
    path, data = pattern
    with MmapReader(str(path)) as reader:
        with contextlib.suppress(OSError):
            os.truncate(path, 100)
        assert path.stat().st_size == len(data)
        buf = bytearray(5000)
        assert reader.read_into(memoryview(buf), 150_000) == 5000
        assert bytes(buf) == data[150_000:155_000]


class _RecordingKernel32:
    """The real kernel32, with every CreateFileW and every ReadFile on the handles it opened written down."""

    def __init__(self, real: Any) -> None:
        self.real = real
        self.opened: list[tuple[str, int, int]] = []     # (path, flags, handle)
        self.reads: list[tuple[int, int, int]] = []      # (offset, length, buffer address) on those handles

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)

    def CreateFileW(self, path: str, access: int, share: int, sa: Any, disposition: int, flags: int,
                    template: Any) -> Any:
        handle = self.real.CreateFileW(path, access, share, sa, disposition, flags, template)
        self.opened.append((path, flags, handle))
        return handle

    def ReadFile(self, handle: Any, address: int, length: int, got: Any, ov: Any) -> int:
        if any(h == handle for _, _, h in self.opened):
            o = ov.contents
            self.reads.append(((o.OffsetHigh << 32) | o.Offset, length, address))
        return self.real.ReadFile(handle, address, length, got, ov)


@windows
def test_rows_direct_reads_go_through_no_buffering(monkeypatch: pytest.MonkeyPatch) -> None:
    from ggaudit.evidence.readers import FILE_FLAG_NO_BUFFERING
    recording = _RecordingKernel32(win_api.kernel32())
    monkeypatch.setattr(win_api, "kernel32", lambda: recording)
    path = str(FIXTURES / "ple_iq4_nl.gguf")
    result = CliRunner().invoke(main, ["rows", path, "--modes", "buffered,mmap,direct", "--page-crossing"])
    assert result.exit_code == 0, (result.stdout, result.stderr)
    verdict = result.stdout.splitlines()[-1]
    assert verdict.startswith("result: clean: every path delivered the file's bytes; the ") and \
        verdict.endswith(" selected rows are finite in the file")
    direct = next(line for line in result.stdout.splitlines() if line.startswith("direct (gather): "))
    align = int(direct.split("alignment ")[1].split()[0])
    assert [(p, f & FILE_FLAG_NO_BUFFERING) for p, f, _ in recording.opened] == [(path, FILE_FLAG_NO_BUFFERING)]
    assert recording.reads, "no ReadFile went through the no-buffering handle"
    for offset, length, address in recording.reads:     # the contract Wine does not enforce, kept anyway
        assert offset % align == 0 and length % align == 0 and address % align == 0, (offset, length, address)


def test_names_a_legacy_code_page_cannot_encode_do_not_crash(tmp_path: Path) -> None:
    # Windows writes to pipes in the ANSI code page; cp1252 has no CJK or U+FFFD.
    from ggaudit.format.build import TensorSpec, write_gguf
    from gguf import GGMLQuantizationType as T
    path = tmp_path / "m.gguf"
    write_gguf(path, [TensorSpec("层.\ufffd.weight", T.F32, (4,), bytes(16))], {})
    env = dict(os.environ, PYTHONIOENCODING="cp1252")
    proc = subprocess.run([sys.executable, "-m", "ggaudit", "info", str(path)], capture_output=True, env=env,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert b"  \\u5c42.\\ufffd.weight  F32 " in proc.stdout


def test_hf_snapshot_names_are_slash_joined_on_every_os(tmp_path: Path) -> None:
    # Copies, not links: what huggingface_hub leaves on a Windows without symlinks. The names are the
    # repository's paths, so "gguf/sub/m.gguf" on every OS, never "gguf\\sub\\m.gguf".
    from ggaudit.stores.hf import read_hf_snapshot
    commit = "2" * 40
    repo = tmp_path / "models--org--m"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    (repo / "blobs").mkdir()
    snap = repo / "snapshots" / commit
    (snap / "gguf" / "sub").mkdir(parents=True)
    (snap / "gguf" / "sub" / "m.gguf").write_bytes(b"GGUF")
    (snap / "README.md").write_text("# m")
    shot = read_hf_snapshot("org/m", tmp_path)
    assert [(f.name, f.problem) for f in shot.files] == [
        ("README.md", "not a link to a blob (cannot check a copy)"),
        ("gguf/sub/m.gguf", "not a link to a blob (cannot check a copy)")]


def test_a_next_steps_words_are_quoted_for_the_shell_of_this_system() -> None:
    """A printed command's word is one word to the user's shell: POSIX quoting on Linux and macOS; on Windows a
    path stays bare and anything cmd or PowerShell would split or redirect is double-quoted."""
    from ggaudit.io import shell
    from ggaudit.io.system import WINDOWS

    assert shell.shell_word("jinja2>=3.0") == ('"jinja2>=3.0"' if WINDOWS else "'jinja2>=3.0'")
    assert shell.shell_word("my models/m.gguf") == ('"my models/m.gguf"' if WINDOWS else "'my models/m.gguf'")
    assert [shell._windows_word(w) for w in (r"C:\models\m.gguf", "blk.0.attn_q.weight", r"D:\my models\m.gguf",
                                             "ggaudit[dask]", 'a"b', "x|y")] == \
        [r"C:\models\m.gguf", "blk.0.attn_q.weight", r'"D:\my models\m.gguf"', '"ggaudit[dask]"', r'"a\"b"', '"x|y"']
