"""One reference read per row for every read path: each row's first reference read, kept for the paths after
the first to be compared with.

Reading the reference again for each path would let a buffered stack that is wrong twice (the reference
read and the buffered path's own read agreeing, then right for the later paths' reference reads) pass for
clean: every path would match the reference it was compared with. So the first read's bytes are kept while
they fit in :data:`KEPT_BYTES`; past that, only their xxh3-64 is kept and a later read that differs is said
(:class:`Unstable`), never passed over. The digests are one uint64 per selected row, as the selection is.
A sweep of the whole table keeps of each chunk's first reference read its xxh3-64 and xxh3-128
(:class:`ChunkDigest`): a later path's chunk is compared with that first read by the xxh3-128, and the
reference is read again only for a chunk that differs (ggaudit.rows.gather.Sweep), so the table is read once
per path.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import xxhash

from ..arrays import distinct
from ..json_shape import json_key, json_record, to_json

__all__ = ["KEPT_BYTES", "ChunkDigest", "FirstReads", "Unstable", "chunk_digest"]

#: Bytes of first reference reads kept whole (every path compared with them); past this, digests only.
KEPT_BYTES = 64 << 20
#: Reads found unstable kept in full; beyond this they are only counted.
MAX_KEPT = 1000


def _hex64(digest: int) -> str:
    return f"{digest:016x}"


#: An xxh3-64 in the JSON: 16 hex digits.
_HEX64 = {"type": "string", "pattern": "^[0-9a-f]{16}$"}


@json_record
class Unstable:
    """A reference read of *rows* rows from *row* (one, or a sweep's chunk) whose first read is not kept
    delivered other bytes than that first read: their xxh3-64s."""

    row: int = json_key(minimum=0)
    rows: int = json_key(default=1, minimum=1)
    first: int = json_key(convert=_hex64, schema=_HEX64)
    later: int = json_key(convert=_hex64, schema=_HEX64)

    def to_json(self) -> dict[str, Any]:
        return to_json(self)


class ChunkDigest(NamedTuple):
    """What a sweep keeps of a reference read of a chunk: its xxh3-64 (named when a later read differs) and its
    xxh3-128 (what a later path's read of the chunk is compared with, so the reference is not read again)."""

    short: int
    full: int


def chunk_digest(data: memoryview) -> ChunkDigest:
    return ChunkDigest(xxhash.xxh3_64_intdigest(data), xxhash.xxh3_128_intdigest(data))


class FirstReads:
    """The first reference read of each row of *rows* (a selection's IDs; None: a sweep, which keeps none)."""

    def __init__(self, rows: np.ndarray | None, kept_bytes: int | None = None) -> None:
        self.order = distinct(rows) if rows is not None else np.zeros(0, np.int64)
        self.digests = np.zeros(self.order.size, np.uint64)
        self.seen = np.zeros(self.order.size, bool)
        self.kept: dict[int, bytes] = {}
        self.room = KEPT_BYTES if kept_bytes is None else kept_bytes
        self.unstable: list[Unstable] = []   # the first MAX_KEPT; unstable_count counts every one
        self.unstable_count = 0
        self._said_of: set[tuple[int, int]] = set()
        self.chunks: dict[int, ChunkDigest] = {}     # a sweep's first reference read of each chunk, by its first row

    def wanted(self, rows: list[int]) -> list[int]:
        """The rows of *rows* whose reference must still be read (those with no first read kept)."""
        return [r for r in rows if r not in self.kept]

    def taken(self, read: dict[int, bytes]) -> dict[int, bytes]:
        """*read* (a reference read of some rows) recorded; the bytes to compare each row with: its first
        read's where kept, else *read*'s (a differing one noted in :attr:`unstable`). A batch at a time: the
        lookups and comparisons are numpy's, only a row's first read and a differing one are Python's."""
        if not read or not self.order.size:
            return read
        rows = np.fromiter(read, np.int64, len(read))
        data = list(read.values())
        digests = np.fromiter((xxhash.xxh3_64_intdigest(d) for d in data), np.uint64, len(data))
        pos = np.minimum(np.searchsorted(self.order, rows), self.order.size - 1)
        selected = self.order[pos] == rows          # a prefetched neighbour is not a selected row: nothing kept
        seen = selected & self.seen[pos]
        for i in np.flatnonzero(seen & (self.digests[pos] != digests)).tolist():
            self._record_unstable(Unstable(row=int(rows[i]), first=int(self.digests[pos[i]]), later=int(digests[i])))
        for i in np.flatnonzero(selected & ~seen).tolist():
            self.seen[pos[i]], self.digests[pos[i]] = True, digests[i]
            if len(data[i]) <= self.room:
                self.kept[int(rows[i])] = data[i]
                self.room -= len(data[i])
        return read

    def chunk(self, first_row: int, rows: int, digest: ChunkDigest) -> None:
        """A sweep's reference read of the chunk of *rows* rows from *first_row*: the first one kept, a later one
        compared with it (a sweep keeps no bytes: a chunk read alike by both sides is not copied)."""
        known = self.chunks.setdefault(first_row, digest)
        if known != digest:
            self._record_unstable(Unstable(row=first_row, rows=rows, first=known.short, later=digest.short))

    def _record_unstable(self, found: Unstable) -> None:
        """Once per row (or chunk): every later read of it differs from the first alike."""
        if (found.row, found.rows) in self._said_of:
            return
        self._said_of.add((found.row, found.rows))
        self.unstable_count += 1
        if len(self.unstable) < MAX_KEPT:
            self.unstable.append(found)

    def of(self, rows: list[int], read: dict[int, bytes]) -> dict[int, bytes]:
        """The bytes to compare *rows* with: the kept first reads, and *read* (just read) for the others."""
        return {r: self.kept[r] if r in self.kept else read[r] for r in rows if r in self.kept or r in read}
