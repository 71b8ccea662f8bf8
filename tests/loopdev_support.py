"""A real device under a real filesystem, for tests: a 64 MiB ext4 image in pytest's temporary folder, attached
to a loop device and mounted on a folder beside it. ``flip_on_device(file, offset, mask)`` changes one byte of
the file ON THE DEVICE (an O_DIRECT read-modify-write of its 4096-byte block on the loop device), so the file's
page cache keeps the old byte: the lost write under a cached file that ``check``'s eviction test must tell
from a wrong direct read.

    with ext4_loop(tmp_path) as loop:           # skips the test where it cannot be had (not root, ...)
        (loop.mount / "f").write_bytes(data)
        loop.flip_on_device(loop.mount / "f", 123456, 0x01)

Only as root on Linux with losetup, mkfs.ext4 and a usable /dev/loop-control; elsewhere the test is skipped
with the reason. Teardown (umount, losetup -d) runs however the test ends. ``options`` are mount options
(``data=journal``); the filesystem is made with 4096-byte blocks and inline data, so a tiny file is stored
in its inode.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import shutil
import struct
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

IMAGE_SIZE = 64 << 20
BLOCK = 4096
FS_IOC_FIEMAP = 0xC020660B
FIEMAP_FLAG_SYNC = 0x1
#: Extents whose bytes do not lie plainly at fe_physical: unknown, delayed, encoded, inline, packed, unwritten.
FIEMAP_NOT_PLAIN = 0x2 | 0x4 | 0x8 | 0x200 | 0x400 | 0x800
TOOLS = ("losetup", "mkfs.ext4", "mount", "umount")


def _run(cmd: Sequence[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(cmd), capture_output=True, text=True, timeout=60)


def _why_not() -> str | None:
    """Why no loop device can be had here, or None."""
    if not sys.platform.startswith("linux"):
        return "loop devices are Linux's"
    if os.geteuid() != 0:
        return "making a loop device and mounting it needs root"
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if missing:
        return f"no {', '.join(missing)} on PATH"
    try:
        os.close(os.open("/dev/loop-control", os.O_RDWR | os.O_CLOEXEC))
    except OSError as err:
        return f"/dev/loop-control is not usable: {err}"
    return None


class Ext4Loop:
    """An ext4 filesystem on a loop device, mounted: ``mount`` (its folder), ``device`` (/dev/loopN)."""

    def __init__(self, image: Path, device: str, mount: Path, options: str) -> None:
        self.image, self.device, self.mount, self.options = image, device, mount, options

    def flip_on_device(self, file: Path, offset: int, mask: int) -> None:
        """XOR the byte at *offset* of *file* with *mask* where it lies on the device, leaving the file's page
        cache as it was (a direct write to the loop device never touches the filesystem's cache)."""
        assert 0 < mask < 256, mask
        physical = physical_offset(file, offset)
        block = physical - physical % BLOCK
        fd = os.open(self.device, os.O_RDWR | os.O_DIRECT | os.O_CLOEXEC)
        buf = mmap.mmap(-1, BLOCK)          # page-aligned, as O_DIRECT needs
        try:
            assert os.preadv(fd, [buf], block) == BLOCK
            buf[physical - block] ^= mask
            assert os.pwritev(fd, [buf], block) == BLOCK
            os.fsync(fd)
        finally:
            buf.close()
            os.close(fd)

    def remount(self) -> None:
        """Unmount and mount again: everything the journal holds goes to its place, and the cache is cold."""
        _check(_run(["umount", str(self.mount)]), "umount")
        _check(_run(self._mount_cmd()), "mount")

    def _mount_cmd(self) -> list[str]:
        return ["mount", "-t", "ext4", *(["-o", self.options] if self.options else []), self.device,
                str(self.mount)]


def _check(done: subprocess.CompletedProcess[str], what: str) -> None:
    assert done.returncode == 0, f"{what} failed: {done.stderr.strip()}"


def physical_offset(file: Path, offset: int) -> int:
    """Where byte *offset* of *file* lies on its device (FS_IOC_FIEMAP, after syncing the file's data so every
    extent is allocated): fe_physical + (offset - fe_logical) of the extent holding it."""
    import fcntl        # POSIX only: the module is imported on Windows too, where every test of it is skipped

    fd = os.open(file, os.O_RDONLY | os.O_CLOEXEC)
    try:
        buf = bytearray(32 + 56)            # struct fiemap with room for one extent
        struct.pack_into("=QQIIII", buf, 0, offset, 1, FIEMAP_FLAG_SYNC, 0, 1, 0)
        fcntl.ioctl(fd, FS_IOC_FIEMAP, buf, True)
    finally:
        os.close(fd)
    assert struct.unpack_from("=I", buf, 20)[0] == 1, f"no extent holds offset {offset} of {file}"
    logical, physical, length, _, _, flags = struct.unpack_from("=QQQQQI", buf, 32)
    assert logical <= offset < logical + length, (logical, length, offset)
    assert not flags & FIEMAP_NOT_PLAIN, f"the extent at {logical} has flags {flags:#x}: its bytes are not plain"
    return physical + (offset - logical)


@contextlib.contextmanager
def ext4_loop(folder: Path, options: str = "") -> Iterator[Ext4Loop]:
    """A fresh ext4 filesystem on a loop device, mounted on ``folder / "mnt"``; skips the test where it cannot
    be had (the reason says why, with the tool's error)."""
    why = _why_not()
    if why is not None:
        pytest.skip(why)
    image, mount = folder / "ext4.img", folder / "mnt"
    with open(image, "wb") as f:
        f.truncate(IMAGE_SIZE)
    made = _run(["mkfs.ext4", "-q", "-F", "-b", str(BLOCK), "-O", "inline_data", str(image)])
    if made.returncode != 0:
        pytest.skip(f"mkfs.ext4 failed: {made.stderr.strip()}")
    attached = _run(["losetup", "--find", "--show", str(image)])
    if attached.returncode != 0:
        pytest.skip(f"the loop device was refused: losetup: {attached.stderr.strip()}")
    loop = Ext4Loop(image, attached.stdout.strip(), mount, options)
    try:
        mount.mkdir()
        mounted = _run(loop._mount_cmd())
        if mounted.returncode != 0:
            pytest.skip(f"mounting the loop device was refused: mount: {mounted.stderr.strip()}")
        try:
            yield loop
        finally:
            if _run(["umount", str(mount)]).returncode != 0:
                _run(["umount", "-l", str(mount)])      # still busy (a test left a file open): detach it
    finally:
        _run(["losetup", "-d", loop.device])
