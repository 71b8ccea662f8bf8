"""The fault layer itself (tests/faultlayer.c): a child process reading a file through each read path sees
exactly the corrupted bytes at exactly the offsets on the faulted path, and the file's own bytes on every
other path and in every other file. The expectations are computed here from the file's bytes, not by the
layer."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fault_support import BAD_SETTING, below, faulted_env, layer_library, run_python
from platforms import needs_linux

pytestmark = needs_linux

SIZE = 32768
POISON = 0xA5

#: The child: runs a plan of reads (JSON in argv[1]) and prints what each delivered. Buffers are poisoned
#: with 0xa5 first, so bytes a read did not deliver show up; direct reads use a page-aligned mmap buffer.
#: Two steps are not reads: "evict" (posix_fadvise DONTNEED of the range) and "cache"
#: (ggaudit.io.page_cache.cache_state).
CHILD = r"""
import errno, json, mmap, os, sys, threading

def read(step):
    path, how, offset, length = step["file"], step["how"], step["offset"], step["length"]
    fd = os.open(path, os.O_RDONLY | (os.O_DIRECT if how == "direct" else 0))
    try:
        if how == "evict":
            os.posix_fadvise(fd, offset, length, os.POSIX_FADV_DONTNEED)
            return {"evicted": [offset, length]}
        if how == "cache":
            from ggaudit.io.page_cache import cache_state
            state = cache_state(fd, offset, length)
            return {"pages": state.pages, "cached": state.cached, "dirty": state.dirty}
        if how == "mmap":
            with mmap.mmap(fd, length, access=mmap.ACCESS_READ, offset=offset) as m:
                return {"count": length, "bytes": m[:].hex()}
        buf = mmap.mmap(-1, length)
        buf[:] = b"\xa5" * length
        out = {}
        if how == "read":
            with open(fd, "rb", buffering=0, closefd=False) as f:
                f.seek(offset)
                n = f.readinto(buf)
                out["pos"] = f.tell()
        elif how == "pread":
            data = os.pread(fd, length, offset)
            buf[:len(data)], n = data, len(data)
        else:
            n = os.preadv(fd, [buf], offset)
        return dict(out, count=n, bytes=buf[:].hex())
    except OSError as err:
        return {"errno": errno.errorcode[err.errno]}
    finally:
        os.close(fd)

def in_threads(step):
    seen, lock = {}, threading.Lock()
    def work():
        for _ in range(step["repeat"]):
            got = read(step)["bytes"]
            with lock:
                seen[got] = seen.get(got, 0) + 1
    threads = [threading.Thread(target=work) for _ in range(step["threads"])]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return {"seen": seen}

print(json.dumps([in_threads(s) if "threads" in s else read(s) for s in json.loads(sys.argv[1])]))
"""

#: How the child reads on each read path; "pagecache" is buffered and mmap together.
HOWS = {"buffered": ("pread", "read", "preadv"), "direct": ("direct",), "mmap": ("mmap",)}
#: "device" with nothing evicted: only direct reads see the device's other bytes.
FAULTED = {"buffered": {"buffered"}, "direct": {"direct"}, "mmap": {"mmap"}, "pagecache": {"buffered", "mmap"},
           "device": {"direct"}}
#: (offset, length) windows each way of reading reads: whole file, unaligned, and windows inside it.
WINDOWS = {"pread": [(0, SIZE), (4000, 5100)], "read": [(4000, 5100)], "preadv": [(0, SIZE)],
           "direct": [(0, SIZE), (8192, 4096)], "mmap": [(0, SIZE), (8192, 8192)]}
#: Each data fault, with ranges that cross a page boundary and that two windows see differently.
DATA = {
    "flip": {"offset": [4095, 9000], "length": 2, "mask": 0x5A},
    "zero": {"offset": [512, 8704], "length": 512},
    "fill": {"offset": [9000], "length": 600, "byte": 0xFF},
    "shift": {"offset": [4000, 31000], "length": 300, "shift": 1500},
}


def faulted_bytes(data: bytes, fault: str, params: dict[str, Any]) -> bytes:
    """What the file reads as under a data fault, computed from its bytes."""
    out = bytearray(data)
    for o in params["offset"]:
        for p in range(o, o + params["length"]):
            if fault == "flip":
                out[p] ^= params["mask"]
            elif fault == "zero":
                out[p] = 0
            elif fault == "fill":
                out[p] = params["byte"]
            else:
                src = p + params["shift"]
                out[p] = data[src] if 0 <= src < len(data) else 0
    return bytes(out)


def child(plan: list[dict[str, Any]], env: dict[str, str]) -> list[dict[str, Any]]:
    done = run_python(["-c", CHILD, json.dumps(plan)], env)
    assert done.code == 0, done.stderr
    result: list[dict[str, Any]] = json.loads(done.stdout)
    return result


def step(path: Path, how: str, offset: int, length: int, **more: int) -> dict[str, Any]:
    return {"file": str(path), "how": how, "offset": offset, "length": length, **more}


@pytest.fixture
def files(ddir: Path) -> tuple[Path, Path, bytes]:
    """The faulted file and another one with the same bytes (another inode), on a disk (direct reads)."""
    data = np.random.default_rng(25).integers(0, 256, SIZE, dtype=np.uint8).tobytes()
    (ddir / "sub").mkdir()
    (ddir / "model.bin").write_bytes(data)
    (ddir / "other.bin").write_bytes(data)
    return ddir / "model.bin", ddir / "other.bin", data


@pytest.mark.parametrize("fault", sorted(DATA))
@pytest.mark.parametrize("path_kind", ["buffered", "direct", "mmap", "pagecache", "device"])
def test_data_fault_reaches_only_its_path_and_file(files: tuple[Path, Path, bytes], path_kind: str,
                                                   fault: str) -> None:
    target, other, data = files
    wrong = faulted_bytes(data, fault, DATA[fault])
    assert wrong != data
    # Another spelling of the same file: the layer matches the inode, not the name.
    env = faulted_env(target.parent / "sub" / ".." / target.name, path_kind, fault, **DATA[fault])
    plan, expected = [], []
    for path_name, hows in HOWS.items():
        for how in hows:
            for offset, length in WINDOWS[how]:
                for f in (target, other):
                    plan.append(step(f, how, offset, length))
                    source = wrong if f == target and path_name in FAULTED[path_kind] else data
                    expected.append(source[offset:offset + length])
    got = child(plan, env)
    for s, g, e in zip(plan, got, expected, strict=True):
        assert (g["count"], bytes.fromhex(g["bytes"])) == (len(e), e), s


@pytest.mark.parametrize("path_kind", ["buffered", "direct"])
def test_short_returns_the_bytes_before_the_offset_and_leaves_the_rest(files: tuple[Path, Path, bytes],
                                                                       path_kind: str) -> None:
    target, other, data = files
    how, other_how = ("preadv", "direct") if path_kind == "buffered" else ("direct", "preadv")
    plan = [step(target, how, 4096, 4096), step(target, how, 0, 4096), step(target, other_how, 4096, 4096),
            step(other, how, 4096, 4096)]
    got = child(plan, faulted_env(target, path_kind, "short", offset=5000))
    assert got[0] == {"count": 904, "bytes": (data[4096:5000] + bytes([POISON]) * 3192).hex()}
    assert got[1:] == [{"count": 4096, "bytes": data[a:a + 4096].hex()} for a in (0, 4096, 4096)]


def test_short_read_leaves_the_file_position_where_it_stopped(files: tuple[Path, Path, bytes]) -> None:
    target, _, data = files
    got = child([step(target, "read", 4096, 4096)], faulted_env(target, "buffered", "short", offset=5000))
    assert got == [{"count": 904, "pos": 5000, "bytes": (data[4096:5000] + bytes([POISON]) * 3192).hex()}]


@pytest.mark.parametrize("path_kind", ["buffered", "direct"])
def test_stale_delivers_the_previous_requests_bytes(files: tuple[Path, Path, bytes], path_kind: str) -> None:
    target, _, data = files
    how, other_how = ("preadv", "direct") if path_kind == "buffered" else ("direct", "preadv")
    plan = [step(target, how, a, 4096) for a in (0, 8192, 12288, 8192)] + [step(target, other_how, 8192, 4096)]
    got = child(plan, faulted_env(target, path_kind, "stale", offset=9000))
    # 8192 covers the offset: first it delivers the request before it (0), then the one before it (12288).
    assert [bytes.fromhex(g["bytes"]) for g in got] == [data[a:a + 4096] for a in (0, 0, 12288, 12288, 8192)]


@pytest.mark.parametrize("fault, name", [("eio", "EIO"), ("eagain", "EAGAIN")])
@pytest.mark.parametrize("path_kind", ["buffered", "direct"])
def test_errno_fails_reads_over_the_offset_as_many_times_as_asked(files: tuple[Path, Path, bytes], path_kind: str,
                                                                  fault: str, name: str) -> None:
    target, _, data = files
    how, other_how = ("pread", "direct") if path_kind == "buffered" else ("direct", "pread")
    plan = [step(target, how, 8192, 4096) for _ in range(3)] + [step(target, how, 0, 4096),
                                                                step(target, other_how, 8192, 4096)]
    got = child(plan, faulted_env(target, path_kind, fault, offset=9000, times=2))
    assert got == [{"errno": name}, {"errno": name}] + [{"count": 4096, "bytes": data[a:a + 4096].hex()}
                                                        for a in (8192, 0, 8192)]


@pytest.mark.parametrize("path_kind", ["buffered", "direct"])
def test_eintr_is_injected_and_python_retries_it(files: tuple[Path, Path, bytes], path_kind: str,
                                                 tmp_path: Path) -> None:
    target, _, data = files
    log = tmp_path / "faults.log"
    how = "pread" if path_kind == "buffered" else "direct"
    got = child([step(target, how, 8192, 4096)], faulted_env(target, path_kind, "eintr", offset=9000, times=3,
                                                             log=log))
    # CPython retries a read that failed with EINTR (PEP 475): the bytes are right, the log shows the fault.
    assert got == [{"count": 4096, "bytes": data[8192:12288].hex()}]
    assert log.read_text().splitlines() == [f"{path_kind} eintr 8192 4096"] * 3


def test_times_counts_exactly_across_threads(files: tuple[Path, Path, bytes]) -> None:
    target, _, data = files
    env = faulted_env(target, "buffered", "flip", offset=9000, mask=0x01, times=100)
    got = child([step(target, "pread", 8192, 4096, threads=8, repeat=50)], env)
    wrong = faulted_bytes(data, "flip", {"offset": [9000], "length": 1, "mask": 0x01})
    assert got == [{"seen": {wrong[8192:12288].hex(): 100, data[8192:12288].hex(): 300}}]


def test_a_setting_the_layer_cannot_apply_ends_the_process(tmp_path: Path) -> None:
    (tmp_path / "model.bin").write_bytes(b"\0" * 4096)
    env = faulted_env(tmp_path / "model.bin", "mmap", "short", offset=0)
    done = run_python(["-c", "pass"], env)
    assert (done.code, done.stderr) == (BAD_SETTING, "faultlayer: bad FAULT_ON (a mapping takes data faults, "
                                                     "eio, eintr and eagain only): mmap\n")


def test_without_a_fault_path_the_layer_changes_nothing(files: tuple[Path, Path, bytes]) -> None:
    target, _, data = files
    env = dict(os.environ, LD_PRELOAD=str(layer_library()))
    got = child([step(target, how, 0, SIZE) for how in ("pread", "direct", "mmap")], env)
    assert got == [{"count": SIZE, "bytes": data.hex()}] * 3


def test_min_length_faults_and_counts_only_requests_that_long(files: tuple[Path, Path, bytes]) -> None:
    target, _, data = files
    plan = [step(target, "pread", 8192, 4096), step(target, "pread", 4096, 8192), step(target, "pread", 0, SIZE),
            step(target, "pread", 8192, 4096)]
    got = child(plan, faulted_env(target, "buffered", "eio", offset=9000, min_length=8192, times=1))
    # The 4096-byte reads of the offset pass and are not counted: the first long read is the one that fails.
    assert got == [{"count": 4096, "bytes": data[8192:12288].hex()}, {"errno": "EIO"},
                   {"count": SIZE, "bytes": data.hex()}, {"count": 4096, "bytes": data[8192:12288].hex()}]


def test_a_second_layer_below_adds_its_own_fault_on_another_path(files: tuple[Path, Path, bytes]) -> None:
    target, other, data = files
    flip = {"offset": [9000], "length": 1, "mask": 0x5A}
    env = below(faulted_env(target, "direct", "flip", **flip), "buffered", "eio", offset=9000, min_length=8192)
    plan = [step(target, "direct", 8192, 4096), step(target, "pread", 8192, 4096), step(target, "pread", 8192, 8192),
            step(other, "pread", 8192, 8192)]
    wrong = faulted_bytes(data, "flip", flip)
    assert child(plan, env) == [{"count": 4096, "bytes": wrong[8192:12288].hex()},
                                {"count": 4096, "bytes": data[8192:12288].hex()}, {"errno": "EIO"},
                                {"count": 8192, "bytes": data[8192:16384].hex()}]


@pytest.fixture
def paged(files: tuple[Path, Path, bytes]) -> tuple[Path, Path, bytes]:
    """*files*, the faulted one rewritten a page per write() and synced: posix_fadvise drops only clean pages
    and only whole folios, and one write() of the whole file makes it one large folio that no partial
    eviction can drop."""
    target, other, data = files
    with open(target, "wb", buffering=0) as f:
        for at in range(0, SIZE, 4096):
            f.write(data[at:at + 4096])
        os.fsync(f.fileno())
    return target, other, data


def test_device_faults_direct_reads_and_the_page_cache_only_once_evicted(paged: tuple[Path, Path, bytes],
                                                                        tmp_path: Path) -> None:
    # A lost write under a cached file: the device holds flipped bytes at 9000 (page 2) and 20000 (page 4).
    # Direct reads see them at once; pread and mmap see the cache's (right) bytes until page 2 is evicted,
    # then page 2's device bytes, and page 4 stays the cache's.
    target, other, data = paged
    flip = {"offset": [9000, 20000], "length": 2, "mask": 0x5A}
    log = tmp_path / "faults.log"
    env = faulted_env(target, "device", "flip", **flip, log=log)
    wrong = faulted_bytes(data, "flip", flip)
    evicted = bytearray(data)
    evicted[8192:12288] = wrong[8192:12288]             # the right bytes, but page 2 from the device
    plan = [step(target, "direct", 8192, 4096), step(target, "pread", 8192, 4096), step(target, "mmap", 0, SIZE),
            step(target, "cache", 8192, 4096), step(target, "evict", 8192, 4096), step(target, "cache", 8192, 4096),
            step(target, "pread", 8192, 4096), step(target, "mmap", 0, SIZE), step(target, "pread", 16384, 4096),
            step(target, "direct", 16384, 4096), step(target, "preadv", 0, SIZE), step(other, "pread", 8192, 4096)]
    got = child(plan, env)
    read = lambda source, a, n: {"count": n, "bytes": source[a:a + n].hex()}  # noqa: E731
    assert got == [read(wrong, 8192, 4096), read(data, 8192, 4096), read(data, 0, SIZE),
                   {"pages": 1, "cached": 1, "dirty": 0}, {"evicted": [8192, 4096]},
                   {"pages": 1, "cached": 0, "dirty": 0},     # the kernel really dropped the page
                   read(wrong, 8192, 4096), read(bytes(evicted), 0, SIZE), read(data, 16384, 4096),
                   read(wrong, 16384, 4096), read(bytes(evicted), 0, SIZE), read(data, 8192, 4096)]
    assert log.read_text().splitlines() == ["direct flip 8192 4096", "buffered flip 8192 4096", "mmap flip 0 32768",
                                            "direct flip 16384 4096", "buffered flip 0 32768"]


def test_device_evicts_the_pages_the_kernel_drops(paged: tuple[Path, Path, bytes]) -> None:
    # posix_fadvise drops only whole pages inside the range, and the file's last partial page when the range
    # runs to the end: the layer's idea of what was evicted is the kernel's (cache_state shows it).
    target, _, data = paged
    flip = {"offset": [100, 4096, SIZE - 1], "length": 1, "mask": 0x01}
    wrong = faulted_bytes(data, "flip", flip)
    plan = [step(target, "pread", 0, SIZE), step(target, "evict", 50, 8000),     # no whole page: nothing goes
            step(target, "cache", 0, 8192), step(target, "pread", 0, 8192),
            step(target, "evict", 4000, 4192),               # ends at a page's end: page 1 goes, page 0 stays
            step(target, "cache", 0, 8192), step(target, "pread", 0, 8192),
            step(target, "evict", SIZE - 4106, 0),         # to the end: the last page (7) goes, page 6 stays
            step(target, "cache", SIZE - 8192, 8192), step(target, "pread", SIZE - 8192, 8192)]
    got = child(plan, faulted_env(target, "device", "flip", **flip))
    page1 = data[:4096] + wrong[4096:8192]
    assert got[2:] == [{"pages": 2, "cached": 2, "dirty": 0}, {"count": 8192, "bytes": data[:8192].hex()},
                       {"evicted": [4000, 4192]}, {"pages": 2, "cached": 1, "dirty": 0},
                       {"count": 8192, "bytes": page1.hex()}, {"evicted": [SIZE - 4106, 0]},
                       {"pages": 2, "cached": 1, "dirty": 0},
                       {"count": 8192, "bytes": (data[SIZE - 8192:SIZE - 1] + wrong[SIZE - 1:]).hex()}]


def test_device_counts_faults_across_paths(paged: tuple[Path, Path, bytes]) -> None:
    target, _, data = paged
    flip = {"offset": [9000], "length": 1, "mask": 0x01}
    wrong = faulted_bytes(data, "flip", flip)
    plan = [step(target, "direct", 8192, 4096), step(target, "evict", 0, 0), step(target, "pread", 8192, 4096),
            step(target, "pread", 8192, 4096), step(target, "direct", 8192, 4096)]
    got = child(plan, faulted_env(target, "device", "flip", **flip, times=2))
    assert [g.get("bytes") for g in got] == [wrong[8192:12288].hex(), None, wrong[8192:12288].hex(),
                                             data[8192:12288].hex(), data[8192:12288].hex()]


def test_device_takes_data_faults_only(tmp_path: Path) -> None:
    (tmp_path / "model.bin").write_bytes(b"\0" * 4096)
    done = run_python(["-c", "pass"], faulted_env(tmp_path / "model.bin", "device", "eio", offset=0))
    assert (done.code, done.stderr) == (BAD_SETTING, "faultlayer: bad FAULT_ON (device takes data faults only): eio\n")
