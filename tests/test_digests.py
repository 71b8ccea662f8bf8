"""Streaming digests: one read feeds every consumer, in order, with correct hashes."""

from __future__ import annotations

import hashlib
import os
import threading
from pathlib import Path

import pytest
import xxhash
from hypothesis import given, settings
from hypothesis import strategies as st

from ggaudit.io.fan_out import read_through
from ggaudit.io.hashing import Sha256, Xxh3_128
from ggaudit.verify.digests import GitBlobSha1, Segment, SegmentDigests, Tee, hash_file
from ggaudit.errors import ReadError, UsageError


def _data(n: int, seed: int = 7) -> bytes:
    return bytes((i * 131 + seed * 17 + (i >> 8)) & 0xFF for i in range(n))


class Recorder:
    """Keeps copies of what it was fed, and in which thread."""

    def __init__(self) -> None:
        self.chunks: list[tuple[int, bytes]] = []
        self.threads: set[str] = set()

    def update(self, offset: int, data: memoryview) -> None:
        self.chunks.append((offset, bytes(data)))
        self.threads.add(threading.current_thread().name)


@pytest.mark.parametrize("threaded", [True, False])
def test_read_through_feeds_every_byte_once_in_order(tmp_path: Path, threaded: bool) -> None:
    data = _data(10_000)
    path = tmp_path / "f.bin"
    path.write_bytes(data)
    first, second = Recorder(), Recorder()
    n = read_through(path, [first, second], start=100, end=9_000, chunk_size=1024, threaded=threaded)
    assert n == 8_900
    for rec in (first, second):
        assert [off for off, _ in rec.chunks] == list(range(100, 9_000, 1024))
        assert b"".join(c for _, c in rec.chunks) == data[100:9_000]
    if threaded:
        assert first.threads.isdisjoint(second.threads)


def test_read_through_passes_read_only_views(tmp_path: Path) -> None:
    path = tmp_path / "f.bin"
    path.write_bytes(b"abc")

    class Writer:
        def update(self, offset: int, data: memoryview) -> None:
            data[0] = 0

    with pytest.raises(TypeError):
        read_through(path, [Writer()])


def test_sha256_and_xxh3_match_reference_libraries(tmp_path: Path) -> None:
    data = _data(300_000)
    path = tmp_path / "f.bin"
    path.write_bytes(data)
    got = hash_file(path, ("sha256", "xxh3-128"), chunk_size=4096)
    assert got == {"sha256": hashlib.sha256(data).hexdigest(), "xxh3-128": xxhash.xxh3_128(data).hexdigest()}


def test_unknown_algorithm_is_a_usage_error(tmp_path: Path) -> None:
    path = tmp_path / "f.bin"
    path.write_bytes(b"x")
    with pytest.raises(UsageError, match="unknown digest algorithm 'md5'"):
        hash_file(path, ("sha256", "md5"))


def test_git_blob_sha1_is_gits_blob_id(tmp_path: Path) -> None:
    path = tmp_path / "hello.txt"
    path.write_bytes(b"hello\n")
    h = GitBlobSha1(6)
    read_through(path, [h])
    assert h.hexdigest() == "ce013625030ba8dba906f756967f9e9ca394464a"  # `git hash-object` of "hello\n"


def test_tee_runs_consumers_in_one_thread_in_order(tmp_path: Path) -> None:
    path = tmp_path / "f.bin"
    path.write_bytes(_data(5000))
    order: list[str] = []

    class Named:
        def __init__(self, name: str) -> None:
            self.name = name

        def update(self, offset: int, data: memoryview) -> None:
            order.append(self.name)

    read_through(path, [Tee([Named("a"), Named("b")])], chunk_size=2048)
    assert order == ["a", "b"] * 3


def test_consumer_error_stops_the_read_and_is_reraised(tmp_path: Path) -> None:
    path = tmp_path / "f.bin"
    path.write_bytes(_data(64 * 1024))
    seen: list[int] = []

    class Boom:
        def update(self, offset: int, data: memoryview) -> None:
            seen.append(offset)
            if offset >= 2048:
                raise ValueError("consumer failed at 2048")

    with pytest.raises(ValueError, match="consumer failed at 2048"):
        read_through(path, [Boom(), Sha256()], chunk_size=1024, depth=2)
    assert seen == [0, 1024, 2048]


@pytest.mark.parametrize("threaded", [True, False])
def test_file_shorter_than_requested_end_is_a_read_error(tmp_path: Path, threaded: bool) -> None:
    path = tmp_path / "f.bin"
    path.write_bytes(_data(5000))
    with pytest.raises(ReadError) as err:
        read_through(path, [Sha256()], end=6000, chunk_size=4096, threaded=threaded)
    assert err.value.offset == 5000
    assert "file ended early" in str(err.value)


def test_empty_file_and_empty_range(tmp_path: Path) -> None:
    path = tmp_path / "empty.bin"
    path.write_bytes(b"")
    sha = Sha256()
    assert read_through(path, [sha]) == 0
    assert sha.hexdigest() == hashlib.sha256(b"").hexdigest()


def test_segment_digests_cover_ranges_and_whole_groups(tmp_path: Path) -> None:
    data = _data(20_000)
    path = tmp_path / "f.bin"
    path.write_bytes(data)
    segs = SegmentDigests([Segment("b", 5_000, 10_000, 3_000), Segment("a", 100, 1_000, 400),
                           Segment("overlap", 900, 300, 1000), Segment("empty", 64, 0, 16)])
    read_through(path, [segs], chunk_size=777)
    out = segs.results()
    assert out["a"].digest == xxhash.xxh3_128(data[100:1100]).hexdigest()
    assert out["a"].groups == tuple(xxhash.xxh3_128(data[s:min(s + 400, 1100)]).hexdigest()
                                    for s in range(100, 1100, 400))
    assert len(out["b"].groups) == 4                   # 3000, 3000, 3000, 1000
    assert out["b"].groups[-1] == xxhash.xxh3_128(data[14_000:15_000]).hexdigest()
    assert out["overlap"].digest == xxhash.xxh3_128(data[900:1200]).hexdigest()
    assert out["overlap"].groups == (out["overlap"].digest,)     # one group, hashed once: the segment's digest
    assert out["empty"].digest == xxhash.xxh3_128(b"").hexdigest() and out["empty"].groups == ()


def test_segment_past_end_of_feed_is_a_read_error(tmp_path: Path) -> None:
    path = tmp_path / "f.bin"
    path.write_bytes(_data(1000))
    segs = SegmentDigests([Segment("t", 900, 200, 100)])
    read_through(path, [segs])
    with pytest.raises(ReadError, match="data of t was not read to its end"):
        segs.results()


@settings(max_examples=40, deadline=None)
@given(size=st.integers(1, 5000), chunk=st.integers(1, 3000),
       spans=st.lists(st.tuples(st.integers(0, 4999), st.integers(0, 2000), st.integers(1, 700)), max_size=5))
def test_segment_digests_agree_with_direct_hashing_for_any_chunking(tmp_path_factory: pytest.TempPathFactory,
                                                                    size: int, chunk: int,
                                                                    spans: list[tuple[int, int, int]]) -> None:
    data = _data(size, seed=size)
    path = tmp_path_factory.mktemp("seg") / "f.bin"
    path.write_bytes(data)
    segments = [Segment(str(i), off, min(length, size - off), group)
                for i, (off, length, group) in enumerate(spans) if off < size]
    consumer = SegmentDigests(segments)
    whole = Xxh3_128()
    read_through(path, [consumer, whole], chunk_size=chunk, threaded=chunk % 2 == 0)
    assert whole.hexdigest() == xxhash.xxh3_128(data).hexdigest()
    results = consumer.results()
    for seg in segments:
        piece = data[seg.offset:seg.offset + seg.length]
        assert results[seg.key].digest == xxhash.xxh3_128(piece).hexdigest()
        assert results[seg.key].groups == tuple(xxhash.xxh3_128(piece[g:g + seg.group_bytes]).hexdigest()
                                                for g in range(0, len(piece), seg.group_bytes))


def test_missing_file_raises_oserror(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        read_through(tmp_path / "nope", [Sha256()])
    assert not os.path.exists(tmp_path / "nope")

