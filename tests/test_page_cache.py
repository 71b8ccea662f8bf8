"""The page-cache calls of ggaudit.io on real files: what is cached (cache_state, by cachestat and by the
mincore fallback), dropping it (evict), and whether direct reads are independent of the cache
(direct_shares_page_cache, probe_direct_fills_cache). A real device under a changed byte: tests/test_loopdev.py."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from ggaudit.io import direct_shares_cache as direct
from ggaudit.io import page_cache as cache
from platforms import IS_ROOT, SETPRIV, needs_linux

pytestmark = needs_linux

PAGE = cache.PAGE_SIZE
SIZE = 16 * PAGE + 100          # 17 pages, the last one partial
State = cache.CacheState


def _written(path: Path, size: int = SIZE) -> Path:
    with open(path, "wb") as f:
        f.write(bytes(range(256)) * (size // 256) + bytes(size % 256))
        f.flush()
        os.fsync(f.fileno())
    return path


@pytest.fixture
def cold(ddir: Path) -> Iterator[tuple[Path, int]]:
    """A synced file on the disk's filesystem, evicted, open read-only without read-ahead (so a read caches
    exactly the pages it touches)."""
    path = _written(ddir / "model.bin")
    fd = os.open(path, os.O_RDONLY)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
    assert cache.evict(fd, 0, 0) is None
    yield path, fd
    os.close(fd)


def test_cache_state_counts_the_pages_a_read_brought_in(cold: tuple[Path, int]) -> None:
    _, fd = cold
    assert cache.cache_state(fd, 0, 0) == State(pages=17, cached=0, dirty=0)
    os.pread(fd, 100, PAGE + 4)                         # page 1 only
    assert cache.cache_state(fd, 0, 0) == State(pages=17, cached=1, dirty=0)
    assert cache.cache_state(fd, PAGE, 1) == State(pages=1, cached=1, dirty=0)
    assert cache.cache_state(fd, 0, PAGE) == State(pages=1, cached=0, dirty=0)
    assert cache.cache_state(fd, PAGE - 1, 2) == State(pages=2, cached=1, dirty=0)
    os.pread(fd, SIZE, 0)
    assert cache.cache_state(fd, 0, 0) == State(pages=17, cached=17, dirty=0)
    assert cache.cache_state(fd, 3 * PAGE, 10 ** 12) == State(pages=14, cached=14, dirty=0)   # cut at the end
    assert cache.cache_state(fd, SIZE, 10) == State(pages=0, cached=0, dirty=0)
    assert cache.evict(fd, 0, 0) is None
    assert cache.cache_state(fd, 0, 0) == State(pages=17, cached=0, dirty=0)


def test_evict_drops_only_the_range(cold: tuple[Path, int]) -> None:
    _, fd = cold
    os.pread(fd, SIZE, 0)
    assert cache.evict(fd, 4 * PAGE, 2 * PAGE) is None
    # A page read in by this test is a small folio: a range of it can go (a file written in one write()
    # may sit in one large folio, which a partial eviction cannot drop: evict the whole file then).
    assert [cache.cache_state(fd, 0, 0), cache.cache_state(fd, 4 * PAGE, 2 * PAGE)] == [
        State(pages=17, cached=15, dirty=0), State(pages=2, cached=0, dirty=0)]


def test_dirty_pages_are_counted_until_written(ddir: Path) -> None:
    # Dirty is counted by folio: one-page writes into an evicted file make one-page folios.
    path = _written(ddir / "model.bin", 4 * PAGE)
    fd = os.open(path, os.O_RDWR)
    try:
        assert cache.evict(fd, 0, 0) is None
        for page in (1, 3):
            os.pwrite(fd, b"\x01" * PAGE, page * PAGE)
        assert cache.cache_state(fd, 0, 0) == State(pages=4, cached=2, dirty=2)
        assert cache.cache_state(fd, 0, 2 * PAGE) == State(pages=2, cached=1, dirty=1)
        os.fsync(fd)
        assert cache.cache_state(fd, 0, 0) == State(pages=4, cached=2, dirty=0)
    finally:
        os.close(fd)


def test_without_cachestat_mincore_answers_the_same_without_dirty(cold: tuple[Path, int],
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    _, fd = cold
    os.pread(fd, 3 * PAGE, 5 * PAGE)
    with_cachestat = [cache.cache_state(fd, 0, 0), cache.cache_state(fd, 5 * PAGE, PAGE),
                      cache.cache_state(fd, 0, PAGE)]
    assert with_cachestat == [State(17, 3, 0), State(1, 1, 0), State(1, 0, 0)]
    monkeypatch.setattr(cache, "_SYS_CACHESTAT", 1023)     # no such system call: the kernel says ENOSYS
    assert cache._cachestat(fd, 0, PAGE) is None
    assert [cache.cache_state(fd, 0, 0), cache.cache_state(fd, 5 * PAGE, PAGE), cache.cache_state(fd, 0, PAGE)] == [
        State(17, 3, None), State(1, 1, None), State(1, 0, None)]


CHILD = r"""
import os, sys
from ggaudit.io import page_cache as cache
fd = int(sys.argv[1])
print(cache.cache_state(fd, 0, 0), cache._mincore(fd, 0, 1))
"""


@pytest.mark.skipif(not IS_ROOT or SETPRIV is None, reason="drops root's capabilities with setpriv")
def test_a_file_the_process_may_not_write_gets_no_guess(cold: tuple[Path, int]) -> None:
    # Linux tells page-cache residency only to a process that could write the file or owns it: cachestat says
    # EPERM, and mincore reports every page resident. ggaudit says it cannot tell rather than pass the lie on.
    path, fd = cold
    os.chown(path, 65534, 65534)
    os.chmod(path, 0o444)
    drop = "-fowner,-dac_override"
    done = subprocess.run([SETPRIV, f"--bounding-set={drop}", f"--inh-caps={drop}", sys.executable, "-c", CHILD,
                           str(fd)], pass_fds=[fd], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout, done.stderr) == (0, "None 1\n", "")
    assert cache.cache_state(fd, 0, 0) == State(pages=17, cached=0, dirty=0)     # root may: nothing is cached


def test_a_tmpfs_file_shares_the_page_cache_and_a_disk_file_does_not(cold: tuple[Path, int]) -> None:
    path, fd = cold
    assert direct.direct_shares_page_cache(str(path)) is None
    assert direct.direct_shares_page_cache(str(path), fd) is None
    assert direct.probe_direct_fills_cache(str(path), fd) is None
    assert cache.cache_state(fd, 0, 0) == State(pages=17, cached=0, dirty=0)    # the probe's reads left nothing
    shm = Path("/dev/shm")
    if not shm.is_dir() or not _is_tmpfs(shm):
        pytest.skip("no tmpfs at /dev/shm")
    in_memory = shm / f"ggaudit-test-{os.getpid()}.bin"
    try:
        _written(in_memory)
        assert direct.direct_shares_page_cache(str(in_memory)) == (
            "a tmpfs keeps files in the page cache: O_DIRECT reads there (Linux 6.6+) come from it")
        mem_fd = os.open(in_memory, os.O_RDONLY)
        try:
            assert cache.evict(mem_fd, 0, 0) is None
            assert cache.cache_state(mem_fd, 0, 0) == State(pages=17, cached=17, dirty=0)   # nothing to drop to
        finally:
            os.close(mem_fd)
    finally:
        in_memory.unlink()


def _is_tmpfs(folder: Path) -> bool:
    fd = os.open(folder, os.O_RDONLY)
    try:
        return direct._fs_magic(fd) == direct.TMPFS_MAGIC
    finally:
        os.close(fd)


@pytest.mark.parametrize(("version", "reason"), [
    ("2.2.4-1~bpo12+1\n", "OpenZFS 2.2.4-1~bpo12+1 (before 2.3) accepts O_DIRECT and serves it from its ARC cache"),
    ("2.3.0-1\n", None),
    ("2.10.1\n", None),
    (None, "ZFS before OpenZFS 2.3 serves O_DIRECT from its ARC cache, and this module's version is unknown"),
])
def test_zfs_before_2_3_serves_direct_reads_from_its_cache(tmp_path: Path, version: str | None,
                                                           reason: str | None) -> None:
    version_file = tmp_path / "version"
    if version is not None:
        version_file.write_text(version)
    assert direct._zfs_reason(str(version_file)) == reason


def test_where_the_os_cannot_evict_it_says_why(cold: tuple[Path, int], monkeypatch: pytest.MonkeyPatch) -> None:
    path, fd = cold
    for room in (cache, direct):
        monkeypatch.setattr(room, "LINUX", False)
    monkeypatch.setattr(cache, "WINDOWS", True)
    assert cache.evict(fd, 0, 0) == ("Windows has no call that drops one file's pages from its cache (the standby "
                                  "list can only be emptied whole, with a system privilege)")
    assert (cache.cache_state(fd, 0, 0), direct.direct_shares_page_cache(str(path), fd)) == (None, None)
    monkeypatch.setattr(direct, "MACOS", True)
    assert direct.direct_shares_page_cache(str(path), fd) == direct._MACOS_REASON
    assert direct._MACOS_REASON.startswith("macOS F_NOCACHE reads a page already in the unified buffer cache from it")
