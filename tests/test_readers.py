"""Read paths against real files: buffered, mmap, real O_DIRECT (including EINVAL on misalignment),
the Windows no-buffering path against the kernel32 stand-in, and macOS F_NOCACHE."""

from __future__ import annotations

import errno
import mmap
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fake_kernel32 import FILE_FLAG_NO_BUFFERING, FakeKernel32
from platforms import mapped_files_can_shrink, needs_fifo, needs_linux
from ggaudit.evidence import readers
from ggaudit.errors import ReadError
from ggaudit.rows import MODES
from ggaudit.evidence.readers import (POISON, Alignment, Buffer, BufferedReader, DirectIOUnavailable,
                                  LinuxDirectReader, MacNoCacheReader, MmapReader, WindowsDirectReader,
                                  dio_alignment, is_short, map_view, open_reader, same_bytes)

SIZE = 3 * 65536 + 1234  # not a multiple of any alignment, so the last span crosses EOF


@pytest.fixture
def blob(ddir: Path) -> tuple[str, bytes]:
    data = os.urandom(SIZE)
    path = ddir / "blob.bin"
    path.write_bytes(data)
    return str(path), data


def read_row(reader: readers.Reader, offset: int, length: int) -> bytes:
    """What a gather does for one row: read the covering span into a poisoned buffer, then slice."""
    start, span = reader.span(offset, length)
    buf = reader.alloc(span)
    try:
        buf.poison(span)
        got = reader.read_into(buf.view[:span], start)
        assert not is_short(start, span, got, reader.size)
        return bytes(buf.view[offset - start:offset - start + length])
    finally:
        buf.close()


ROWS = [(0, 90), (4050, 90), (4096 * 3 - 45, 90), (65536 - 100, 170), (SIZE - 90, 90), (SIZE - 7, 7),
        (511, 2)]


@pytest.mark.parametrize("mode", ["buffered", "mmap", "direct"])
def test_every_path_reads_the_files_bytes(blob: tuple[str, bytes], mode: str) -> None:
    path, data = blob
    with open_reader(path, mode) as r:
        assert r.size == SIZE
        for off, n in ROWS:
            assert read_row(r, off, n) == data[off:off + n], (mode, off, n)


@needs_linux
def test_direct_alignment_comes_from_statx(blob: tuple[str, bytes]) -> None:
    path, _ = blob
    found = dio_alignment(path)
    with LinuxDirectReader(path) as r:
        if found is None:  # kernel before 6.1 or a filesystem that does not report it
            assert r.alignment == Alignment(4096, 4096, "fallback")
        else:
            assert r.alignment == found and found.source == "statx"
            assert found.offset > 0 and found.offset & (found.offset - 1) == 0


@needs_linux
def test_direct_span_covers_the_row_with_aligned_ends(blob: tuple[str, bytes]) -> None:
    with LinuxDirectReader(blob[0]) as r:
        a = r.alignment.offset
        start, span = r.span(a * 7 + 5, a)  # a row straddling one alignment boundary
        assert (start, span) == (a * 7, 2 * a)
        buf = r.alloc(span)
        assert buf.address % 4096 == 0 and buf.size % a == 0
        buf.close()


@needs_linux
def test_direct_misaligned_offset_and_length_fail_with_einval(blob: tuple[str, bytes]) -> None:
    # The buffer address is not tested here: this machine's kernel (6.18, virtio disk) accepts any buffer
    # address although statx reports dio_mem_align 512. ggaudit aligns its buffers anyway.
    path, _ = blob
    with LinuxDirectReader(path) as r:
        a = r.alignment.offset
        buf = r.alloc(4 * a)
        try:
            assert r.read_into(buf.view[:a], a) == a  # aligned: fine
            for view, offset in ((buf.view[:a], a + a // 2), (buf.view[:a + 1], 0), (buf.view[:a], 1)):
                with pytest.raises(ReadError) as info:
                    r.read_into(view, offset)
                assert info.value.__cause__.errno == errno.EINVAL
                assert info.value.offset == offset
                assert "EINVAL" in str(info.value)
                view.release()
        finally:
            buf.close()


@needs_linux
def test_direct_read_at_eof_is_short_but_not_a_finding(blob: tuple[str, bytes]) -> None:
    path, data = blob
    with LinuxDirectReader(path) as r:
        a = r.alignment.offset
        start = (SIZE // a) * a
        buf = r.alloc(4 * a)
        got = r.read_into(buf.view[:4 * a], start)
        assert got == SIZE - start
        assert bytes(buf.view[:got]) == data[start:]
        assert not is_short(start, 4 * a, got, SIZE)
        assert r.read_into(buf.view[:a], SIZE + a * 10) == 0
        buf.close()


def test_is_short_only_before_eof() -> None:
    assert is_short(0, 4096, 2048, 10000)
    assert not is_short(8192, 4096, 1808, 10000)
    assert not is_short(0, 4096, 4096, 10000)


def test_poison_and_buffer_alignment() -> None:
    buf = Buffer(8192)
    buf.view[:] = b"\0" * 8192
    buf.poison(100)
    assert bytes(buf.view[:100]) == bytes([POISON]) * 100 and buf.view[100] == 0
    assert buf.address % mmap.PAGESIZE == 0
    buf.close()


def test_map_view_starts_on_the_granularity(blob: tuple[str, bytes]) -> None:
    path, data = blob
    fd = os.open(path, os.O_RDONLY)
    try:
        m, delta = map_view(fd, 70000, 300, granularity=65536)
        assert delta == 70000 - 65536
        assert m[delta:delta + 300] == data[70000:70300]
        m.close()
    finally:
        os.close(fd)


def test_reference_read_exact_reports_a_file_that_ends_early(blob: tuple[str, bytes]) -> None:
    with BufferedReader(blob[0]) as r:
        assert r.read_exact(SIZE - 10, 10) == blob[1][-10:]
        with pytest.raises(ReadError) as info:
            r.read_exact(SIZE - 10, 20)
        assert info.value.offset == SIZE


def test_read_exact_into_fills_the_buffer_or_names_the_offset(blob: tuple[str, bytes]) -> None:
    path, data = blob
    with BufferedReader(path) as r:
        buf = Buffer(70000)
        r.read_exact_into(buf.view[:70000], 1000)
        assert bytes(buf.view) == data[1000:71000]
        with pytest.raises(ReadError) as info:
            r.read_exact_into(buf.view[:100], SIZE - 40)
        assert info.value.offset == SIZE and "file ends before 100 bytes" in str(info.value)
        buf.close()


def test_same_bytes_compares_every_byte() -> None:
    a, b = Buffer(1 << 20), Buffer(1 << 20)
    a.view[:] = b.view[:] = os.urandom(1 << 20)
    assert same_bytes(a.view, b.view)
    for at in (0, 4095, (1 << 20) - 1):
        b.view[at] ^= 1
        assert not same_bytes(a.view, b.view)
        assert same_bytes(a.view[:at], b.view[:at])
        b.view[at] ^= 1
    assert not same_bytes(a.view[:10], b.view[:11])
    a.close()
    b.close()


def test_mmap_reader_of_an_empty_file(ddir: Path) -> None:
    p = ddir / "empty"
    p.write_bytes(b"")
    with MmapReader(str(p)) as r:
        buf = r.alloc(16)
        assert r.read_into(buf.view[:16], 0) == 0
        buf.close()


_TRUNCATE_WHILE_READING = """
import os, sys, threading, time
from ggaudit.evidence.readers import MmapReader
from ggaudit.errors import ReadError
path = sys.argv[1]
r = MmapReader(path)
buf = r.alloc(8 << 20)
threading.Thread(target=lambda: (time.sleep(0.05), os.truncate(path, 4096))).start()
deadline = time.monotonic() + 20
try:
    while time.monotonic() < deadline:
        for off in range(0, r.size, 8 << 20):
            r.read_into(buf.view[:8 << 20], off)
    print("no error")
except ReadError as err:
    print(err)
"""


@pytest.mark.skipif(readers.vm_read() is None, reason="process_vm_readv is refused here: the mmap path has "
                                                      "only its size check before each copy")
def test_mmap_reads_survive_a_truncate_during_the_copy(ddir: Path) -> None:
    """A truncate that lands while 8 MiB are being copied out of the mapping: a ReadError, not SIGBUS.
    (A copy with a CPU load dies of SIGBUS here: the child is there so that a failure is a result.)"""
    path = ddir / "big.bin"
    path.write_bytes(os.urandom(1 << 20) * 64)
    proc = subprocess.run([sys.executable, "-c", _TRUNCATE_WHILE_READING, str(path)], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])
    assert proc.stdout.startswith(f"{path}: offset ") and \
        proc.stdout.rstrip().endswith("file shrank to 4096 bytes while mapped (changed while reading?)"), proc.stdout


@mapped_files_can_shrink
def test_mmap_reads_without_process_vm_readv_check_the_size_first(blob: tuple[str, bytes]) -> None:
    path, _ = blob
    with MmapReader(path) as r:
        r._vm_read = None  # as where a sandbox refuses process_vm_readv
        buf = r.alloc(4096)
        assert r.read_into(buf.view[:4096], 0) == 4096
        os.truncate(path, 1000)
        with pytest.raises(ReadError, match="file shrank to 1000 bytes while mapped") as err:
            r.read_into(buf.view[:4096], 4096)
        assert err.value.offset == 4096
        buf.close()


@mapped_files_can_shrink
def test_mmap_reads_of_a_shrunk_file_name_the_first_missing_byte(blob: tuple[str, bytes]) -> None:
    path, data = blob
    with MmapReader(path) as r:
        buf = r.alloc(3 * 4096)
        assert r.read_into(buf.view[:3 * 4096], 4096) == 3 * 4096 and bytes(buf.view[:3 * 4096]) == data[4096:4 * 4096]
        os.truncate(path, 2 * 4096 + 10)
        with pytest.raises(ReadError, match=f"file shrank to {2 * 4096 + 10} bytes while mapped") as err:
            r.read_into(buf.view[:3 * 4096], 4096)
        # process_vm_readv stops at the first page past the new end; the size check, at the read's start.
        assert err.value.offset == (3 * 4096 if r._vm_read is not None else 4096)
        buf.close()


@pytest.mark.parametrize("mode", MODES)
def test_a_directory_is_refused_as_one(tmp_path: Path, mode: str) -> None:
    # Windows refuses to open a folder with EACCES; the message says what it is on every OS.
    with pytest.raises(ReadError, match=r": is a directory$"):
        open_reader(str(tmp_path), mode).close()


@needs_fifo
def test_not_a_regular_file(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(ReadError, match="not a regular file"):
        BufferedReader(str(tmp_path / "fifo"))


def test_unknown_platform_has_no_direct_path(blob: tuple[str, bytes]) -> None:
    with pytest.raises(DirectIOUnavailable, match="sunos5"):
        open_reader(blob[0], "direct", system="sunos5")


# --- Windows, against the kernel32 stand-in ---------------------------------------------------------------

@pytest.mark.parametrize("sector", [512, 4096])
def test_windows_no_buffering_reads_rows(blob: tuple[str, bytes], sector: int) -> None:
    path, data = blob
    k = FakeKernel32(sector=sector)
    with open_reader(path, "direct", system="win32", kernel32=k) as r:
        assert isinstance(r, WindowsDirectReader)
        assert r.alignment == Alignment(sector, sector, "sector-size")
        assert next(iter(k.handles.values())).flags & FILE_FLAG_NO_BUFFERING
        for off, n in ROWS:
            assert read_row(r, off, n) == data[off:off + n], (sector, off, n)
        assert all(o % sector == 0 and n % sector == 0 for o, n in k.reads)
    assert not k.handles and not k.allocations


def test_windows_sector_size_prefers_the_physical_performance_size(blob: tuple[str, bytes]) -> None:
    with WindowsDirectReader(blob[0], FakeKernel32(sector=512, physical_sector=4096)) as r:
        assert r.alignment.offset == 4096


def test_windows_falls_back_to_4096_without_storage_info(blob: tuple[str, bytes]) -> None:
    with WindowsDirectReader(blob[0], FakeKernel32(storage_info_fails=True)) as r:
        assert r.alignment == Alignment(4096, 4096, "fallback")


def test_windows_misalignment_is_error_87(blob: tuple[str, bytes]) -> None:
    k = FakeKernel32(sector=512)
    with WindowsDirectReader(blob[0], k) as r:
        buf = r.alloc(2048)
        for view, offset in ((buf.view[:512], 100), (buf.view[:500], 0), (buf.view[8:520], 0)):
            with pytest.raises(ReadError) as info:
                r.read_into(view, offset)
            assert "Windows error 87" in str(info.value) and info.value.offset == offset
        assert r.read_into(buf.view[:512], 512) == 512
        buf.close()


@pytest.mark.parametrize("eof", ["error", "zero"])
def test_windows_end_of_file(blob: tuple[str, bytes], eof: str) -> None:
    path, data = blob
    k = FakeKernel32(sector=512, eof=eof)
    with WindowsDirectReader(path, k) as r:
        buf = r.alloc(4096)
        start = SIZE // 512 * 512
        assert r.read_into(buf.view[:1024], start) == SIZE - start
        assert bytes(buf.view[:SIZE - start]) == data[start:]
        assert r.read_into(buf.view[:512], start + 4096) == 0
        buf.close()


def test_windows_open_failure_names_the_error(tmp_path: Path) -> None:
    with pytest.raises(ReadError, match="CreateFileW failed: Windows error 2"):
        WindowsDirectReader(str(tmp_path / "missing"), FakeKernel32())


def test_windows_buffers_come_from_virtualalloc(blob: tuple[str, bytes]) -> None:
    k = FakeKernel32(sector=4096)
    with WindowsDirectReader(blob[0], k) as r:
        buf = r.alloc(5000)
        assert buf.size == 8192 and buf.address in k.allocations
        buf.close()
        assert not k.allocations


# --- macOS ---------------------------------------------------------------------------------------

def test_macos_sets_f_nocache(blob: tuple[str, bytes]) -> None:
    calls = []
    path, data = blob
    with MacNoCacheReader(path, fcntl_fn=lambda fd, cmd, arg: calls.append((fd, cmd, arg))) as r:
        assert calls == [(r.fd, readers.F_NOCACHE, 1)]
        assert r.mode == "direct" and r.alignment.offset == 1
        assert read_row(r, 4051, 90) == data[4051:4141]


def test_macos_without_f_nocache_is_unavailable(blob: tuple[str, bytes]) -> None:
    def refuse(fd: int, cmd: int, arg: int) -> None:
        raise OSError(errno.EINVAL, "Invalid argument")

    with pytest.raises(DirectIOUnavailable, match="F_NOCACHE"):
        MacNoCacheReader(blob[0], fcntl_fn=refuse)
