"""The real thing: a byte changed on a real (loop) device under a cached file. Buffered reads keep giving the
page cache's byte, direct reads the device's, and evicting the file's clean pages makes buffered reads give the
device's too: the test ``check`` runs to tell a lost write from a wrong direct path. On an ext4 mounted with
data=journal, O_DIRECT is served from the page cache, and ggaudit.io says so."""

from __future__ import annotations

import mmap
import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from ggaudit.io import direct_shares_cache as direct
from ggaudit.io import page_cache as cache
from loopdev_support import Ext4Loop, ext4_loop
from platforms import needs_linux

pytestmark = needs_linux

SIZE = 1 << 20
AT, MASK = 123456, 0x5A
BLOCK_AT = AT - AT % 4096


@pytest.fixture
def loop(tmp_path: Path) -> Iterator[Ext4Loop]:
    with ext4_loop(tmp_path) as mounted:
        yield mounted


@pytest.fixture
def journaled(tmp_path: Path) -> Iterator[Ext4Loop]:
    with ext4_loop(tmp_path, "data=journal") as mounted:
        yield mounted


def _write(path: Path) -> bytes:
    data = np.random.default_rng(7).integers(0, 256, SIZE, dtype=np.uint8).tobytes()
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    return data


def _direct_block(path: Path, offset: int) -> bytes:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    buf = mmap.mmap(-1, 4096)
    try:
        assert os.preadv(fd, [buf], offset) == 4096
        return bytes(buf)
    finally:
        buf.close()
        os.close(fd)


def test_a_byte_changed_on_the_device_shows_through_the_cache_only_once_evicted(loop: Ext4Loop) -> None:
    path = loop.mount / "model.bin"
    data = _write(path)
    flipped = bytearray(data)
    flipped[AT] ^= MASK
    fd = os.open(path, os.O_RDONLY)
    try:
        assert os.pread(fd, SIZE, 0) == data                          # the whole file in the page cache
        assert cache.cache_state(fd, 0, 0) == cache.CacheState(pages=256, cached=256, dirty=0)
        loop.flip_on_device(path, AT, MASK)
        assert os.pread(fd, 1, AT) == data[AT:AT + 1]                 # the cache still has the old byte
        assert cache.cache_state(fd, 0, 0) == cache.CacheState(pages=256, cached=256, dirty=0)
        assert _direct_block(path, BLOCK_AT) == bytes(flipped[BLOCK_AT:BLOCK_AT + 4096])   # the device the new
        assert direct.direct_shares_page_cache(str(path), fd) is None
        assert cache.evict(fd, 0, 0) is None
        assert cache.cache_state(fd, 0, 0) == cache.CacheState(pages=256, cached=0, dirty=0)
        assert os.pread(fd, SIZE, 0) == bytes(flipped)               # re-read from the device
        assert cache.cache_state(fd, BLOCK_AT, 4096) == cache.CacheState(pages=1, cached=1, dirty=0)
    finally:
        os.close(fd)


def test_data_journal_serves_direct_reads_from_the_page_cache(journaled: Ext4Loop) -> None:
    path = journaled.mount / "model.bin"
    data = _write(path)
    journaled.remount()                 # the journal written to its place, the cache cold
    fd = os.open(path, os.O_RDONLY)
    try:
        assert os.pread(fd, SIZE, 0) == data
        journaled.flip_on_device(path, AT, MASK)
        # O_DIRECT is accepted and answered from the page cache: the old byte, not the device's.
        assert _direct_block(path, BLOCK_AT) == data[BLOCK_AT:BLOCK_AT + 4096]
        assert direct.direct_shares_page_cache(str(path), fd) == (
            "the filesystem reports no direct I/O for this file (statx STATX_DIOALIGN: 0) yet accepts O_DIRECT: "
            "ext4 and f2fs then serve direct reads through the page cache (data journaling, inline data, "
            "fs-verity, encryption, compression)")
        options = direct._mount_options(os.fstat(fd).st_dev)
        assert direct._mount_reason(direct.EXT4_MAGIC, options) == (
            "ext4 mounted with data=journal serves O_DIRECT reads through the page cache")
        assert cache.evict(fd, 0, 0) is None
        assert cache.cache_state(fd, 0, 0) == cache.CacheState(pages=256, cached=0, dirty=0)
        assert direct.probe_direct_fills_cache(str(path), fd) == (
            "a direct read of uncached pages (file offsets 0, 16384) left them in the page cache: the filesystem "
            "serves O_DIRECT reads of this file through it")
        assert [cache.cache_state(fd, at, 4096) for at in (0, 16384)] == [
            cache.CacheState(pages=1, cached=1, dirty=0)] * 2
        assert _direct_block(path, BLOCK_AT)[AT - BLOCK_AT] == data[AT] ^ MASK     # now from the device
    finally:
        os.close(fd)


def test_file_flags_and_extents_that_make_ext4_fall_back_are_named(loop: Ext4Loop) -> None:
    # A file small enough for its inode (the filesystem has inline_data): ext4 keeps it there, and reads it
    # through the page cache under O_DIRECT. Its flag, its extent and statx all say so; a plain file's do not.
    tiny, plain = loop.mount / "tiny.bin", loop.mount / "plain.bin"
    _write(plain)
    tiny.write_bytes(b"inline bytes")
    options = direct._mount_options(os.stat(plain).st_dev)
    fd_tiny, fd_plain = os.open(tiny, os.O_RDONLY), os.open(plain, os.O_RDONLY)
    try:
        assert direct._flags_reason(fd_tiny, direct.EXT4_MAGIC, options) == (
            "the file keeps its data inline: ext4 serves O_DIRECT reads of it through the page cache")
        assert direct._fiemap_reason(fd_tiny, options) == (
            "the extent at file offset 0 is stored inline in the metadata (FIEMAP_EXTENT_DATA_INLINE): the "
            "filesystem reads it through the page cache even under O_DIRECT")
        assert direct.direct_shares_page_cache(str(tiny)) == direct._statx_reason(str(tiny), fd_tiny) == (
            "the filesystem reports no direct I/O for this file (statx STATX_DIOALIGN: 0) yet accepts O_DIRECT: "
            "ext4 and f2fs then serve direct reads through the page cache (data journaling, inline data, "
            "fs-verity, encryption, compression)")
        assert [direct._flags_reason(fd_plain, direct.EXT4_MAGIC, options), direct._fiemap_reason(fd_plain, options),
                direct._statx_reason(str(plain), fd_plain), direct._mount_reason(direct.EXT4_MAGIC, options),
                direct.direct_shares_page_cache(str(plain))] == [None] * 5
        # A plain file: direct reads of uncached pages leave them uncached.
        assert cache.evict(fd_plain, 0, 0) is None
        assert cache.cache_state(fd_plain, 0, 0) == cache.CacheState(pages=256, cached=0, dirty=0)
        assert direct.probe_direct_fills_cache(str(plain)) is None
        assert cache.cache_state(fd_plain, 0, 0) == cache.CacheState(pages=256, cached=0, dirty=0)
    finally:
        os.close(fd_tiny)
        os.close(fd_plain)
