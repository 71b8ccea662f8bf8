"""Digests of byte ranges and of whole files, fed by one read (:func:`ggaudit.io.fan_out.read_through`).

The read itself, the chunk-consumer protocol and the whole-file hashers (sha256, xxh3-128) live in
:mod:`ggaudit.io` (``fan_out``, ``hashing``), below every job, so that a scan shares the read without importing
verify. Here: what verify adds on top of it: per-range digests (a tensor manifest's), git's blob id, several
light consumers in one thread, a whole file hashed by algorithm name, and :class:`Tally`, several reads told
as one ``progress(done, total)``.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from collections.abc import Callable, Iterable, Sequence

import xxhash

from ..errors import ReadError, UsageError, one_or_many
from ..io.fan_out import DEFAULT_CHUNK_SIZE, ChunkConsumer, Progress, read_through
from ..io.hashing import ALGORITHMS, Hasher, Sha256

__all__ = ["PUBLISHED_HASHERS", "GitBlobSha1", "Segment", "SegmentDigest", "SegmentDigests", "Tally", "Tee",
           "hash_file", "published_hasher"]


class GitBlobSha1(Hasher):
    """git's blob id (sha1 of ``blob <size>\\0`` then the bytes), as the Hugging Face cache names small files."""

    name = "git-sha1"

    def __init__(self, size: int) -> None:
        super().__init__(hashlib.sha1(b"blob %d\0" % size))


#: The hasher of each algorithm a publisher gives a whole file's digest in (``check``'s expectations, ``rows``'
#: published digest), made for a file of the given size (git's blob id hashes it first).
PUBLISHED_HASHERS: dict[str, Callable[[int], Hasher]] = {
    "sha256": lambda size: Sha256(),
    "md5": lambda size: Hasher(hashlib.md5(usedforsecurity=False)),
    "git-sha1": GitBlobSha1,
}


def published_hasher(algorithm: str, size: int) -> Hasher:
    """A hasher of *algorithm* (a key of :data:`PUBLISHED_HASHERS`) for a file of *size* bytes."""
    made = PUBLISHED_HASHERS.get(algorithm)
    if made is None:
        raise UsageError(None, f"no hasher for the published algorithm {algorithm!r}", field="algorithm")
    return made(size)


class Tee:
    """Several light consumers that share one worker thread, called in the order given."""

    def __init__(self, consumers: Sequence[ChunkConsumer]) -> None:
        self.consumers = tuple(consumers)

    def update(self, offset: int, data: memoryview) -> None:
        for consumer in self.consumers:
            consumer.update(offset, data)


@dataclass(frozen=True)
class Segment:
    """A byte range of a file to digest on its own, cut into groups of ``group_bytes`` each.

    ``group_bytes`` must divide the segment's natural units (callers pass a whole number of rows);
    the last group may be shorter.
    """

    key: str
    offset: int
    length: int
    group_bytes: int


@dataclass(frozen=True)
class SegmentDigest:
    key: str
    digest: str                 # xxh3-128 hex of the whole segment
    groups: tuple[str, ...]     # xxh3-128 hex of each group, in order


class SegmentDigests:
    """xxh3-128 of each of several byte ranges, and of fixed-size groups inside each, in one pass.

    Segments may appear in any order and may overlap (each is hashed on its own); bytes outside every
    segment are skipped. Digests are available from ``results()`` once the whole file has been fed.
    """

    name = "segments"

    def __init__(self, segments: Iterable[Segment]) -> None:
        self._segments = sorted(segments, key=lambda s: (s.offset, s.length))
        for seg in self._segments:
            if seg.length < 0 or seg.offset < 0 or seg.group_bytes <= 0:
                raise ValueError(f"bad segment {seg}")
        self._next = 0                        # first segment not yet started
        self._open: list[_OpenSegment] = []   # segments overlapping the current position
        # A zero-length segment never overlaps a chunk: its digests are those of no bytes.
        self._done = {s.key: _OpenSegment(s).result() for s in self._segments if s.length == 0}

    def update(self, offset: int, data: memoryview) -> None:
        end = offset + len(data)
        while self._next < len(self._segments) and self._segments[self._next].offset < end:
            planned = self._segments[self._next]
            if planned.length:
                self._open.append(_OpenSegment(planned))
            self._next += 1
        still_open = []
        for seg in self._open:
            seg.feed(offset, data)
            if seg.finished:
                self._done[seg.segment.key] = seg.result()
            else:
                still_open.append(seg)
        self._open = still_open

    def results(self) -> dict[str, SegmentDigest]:
        """Digests by segment key; raises ReadError if the feed ended before a segment did."""
        missing = [s for s in self._segments if s.key not in self._done]
        if missing:
            seg = missing[0]
            raise ReadError(None, f"data of {seg.key} was not read to its end",
                            offset=seg.offset + seg.length)
        return dict(self._done)


class _OpenSegment:
    def __init__(self, segment: Segment) -> None:
        self.segment = segment
        self._whole = xxhash.xxh3_128()
        self._group = xxhash.xxh3_128()
        self._group_fill = 0
        self._groups: list[str] = []
        self._pos = segment.offset            # next byte of the segment still to hash
        # One group holds the whole segment: its digest is the segment's, hashed once.
        self._one_group = segment.group_bytes >= segment.length

    @property
    def finished(self) -> bool:
        return self._pos >= self.segment.offset + self.segment.length

    def feed(self, offset: int, data: memoryview) -> None:
        seg_end = self.segment.offset + self.segment.length
        lo = max(self._pos, offset)
        hi = min(seg_end, offset + len(data))
        if hi <= lo:
            return
        piece = data[lo - offset:hi - offset]
        self._whole.update(piece)
        self._pos = hi
        while len(piece) and not self._one_group:
            take = min(len(piece), self.segment.group_bytes - self._group_fill)
            self._group.update(piece[:take])
            self._group_fill += take
            piece = piece[take:]
            if self._group_fill == self.segment.group_bytes:
                self._close_group()

    def _close_group(self) -> None:
        self._groups.append(self._group.hexdigest())
        self._group.reset()
        self._group_fill = 0

    def result(self) -> SegmentDigest:
        whole = self._whole.hexdigest()
        if self._one_group:
            return SegmentDigest(self.segment.key, whole, (whole,) if self.segment.length else ())
        if self._group_fill:
            self._close_group()
        return SegmentDigest(self.segment.key, whole, tuple(self._groups))


def hash_file(path: str | os.PathLike[str], algorithms: str | Sequence[str] = ("sha256",), *,
              chunk_size: int = DEFAULT_CHUNK_SIZE, progress: Progress | None = None) -> dict[str, str]:
    """Hex digests of a whole file for each named algorithm (``sha256``, ``xxh3-128``; a str is one), one read."""
    algorithms = one_or_many("algorithms", algorithms)
    unknown = [name for name in algorithms if name not in ALGORITHMS]
    if unknown:
        raise UsageError(path, f"unknown digest algorithm {unknown[0]!r} (known: {', '.join(ALGORITHMS)})")
    hashers = [ALGORITHMS[name]() for name in algorithms]
    read_through(path, hashers, chunk_size=chunk_size, progress=progress)
    return {name: h.hexdigest() for name, h in zip(algorithms, hashers, strict=True)}


class Tally:
    """Several reads told as one ``progress(done, total)``: ``total`` bytes planned in all, each read's
    progress (:meth:`part`) added to what the reads before it did, and bytes that need no read (a digest
    taken from the cache, a file not read) counted done at once (:meth:`skip`). Without ``progress`` it
    does nothing; its count is clamped to ``total``, so a plan that was short never overshoots."""

    def __init__(self, progress: Progress | None, total: int = 0) -> None:
        self._progress, self.total, self.done = progress, total, 0

    @property
    def active(self) -> bool:
        """Whether anyone is told: planning is work only worth doing then."""
        return self._progress is not None

    def plan(self, total: int) -> None:
        """Set the bytes planned, and say so (0 done) before the first read."""
        self.total = total
        self._tell(0)

    def part(self) -> Progress | None:
        """The progress callback of the next read: its bytes are added to the count."""
        if self._progress is None:
            return None
        base = self.done

        def told(done: int, _total: int) -> None:
            self._tell(base + done)

        return told

    def skip(self, nbytes: int) -> None:
        """Count ``nbytes`` done without reading them."""
        if self._progress is not None:
            self._tell(self.done + nbytes)

    def _tell(self, done: int) -> None:
        if self._progress is not None:
            self.done = min(done, self.total)
            self._progress(self.done, self.total)
