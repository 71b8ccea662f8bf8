"""The active tests: what the reads alone leave open, decided by reading again.

* :func:`read_range`: the exact bytes of a range through any read path (aligned as the path demands), so two
  paths that disagree about a span can be compared byte for byte;
* :func:`first_difference`: where two paths first differ, among spans whose digests differed;
* :func:`evict_and_read`: a page-cache read of a range from the device: the range's clean pages evicted from
  the page cache (and shown gone), then read through a page-cache path, which must now fetch them from the
  device. When the page cache held the published bytes and direct reads deliver others, this tells a device
  that holds other bytes (a write that never reached it) from direct reads that are wrong.

Nothing is evicted unless the file is opened read-only here and the range holds no page waiting to be written
(the kernel would not drop it anyway, and then the read would come from the cache again).
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..io import opening, page_cache
from ..errors import ReadError
from .readers import POISON, Reader, align_up

__all__ = ["Evicted", "evict_and_read", "first_difference", "read_range"]

#: The page: what the page cache keeps and evicts.
PAGE = mmap.PAGESIZE
#: The largest span re-read whole to find where two paths differ (a tensor's row group is 1 MiB).
MAX_COMPARED = 64 << 20


def read_range(reader: Reader, offset: int, length: int) -> bytes:
    """``length`` bytes at ``offset`` through ``reader``: the aligned span it demands, read into a poisoned
    buffer until complete; a read that ends before the end of the file is a ReadError."""
    start, span = reader.span(offset, length)
    span = min(span, max(0, align_up(reader.size, reader.alignment.offset) - start))
    buf = reader.alloc(span)
    try:
        view = buf.view[:span]
        view[:] = bytes([POISON]) * span
        done = 0
        while start + done < min(offset + length, reader.size):
            got = reader.read_into(view[done:], start + done)
            if got <= 0:
                raise ReadError(reader.path, f"{reader.mode} read returned no bytes before the end of the range",
                                offset=start + done)
            done += got
        return bytes(view[offset - start:offset - start + length])
    finally:
        buf.close()


def first_difference(a: Reader, b: Reader, spans: Sequence[tuple[int, int]]) -> tuple[int, bytes, bytes] | None:
    """The first offset where ``a`` and ``b`` deliver other bytes, among ``spans`` (offset, length: where their
    digests differed), and the page holding it as each delivered it; None when every span now reads alike."""
    for offset, length in sorted(spans):
        for at in range(offset, offset + length, MAX_COMPARED):
            n = min(MAX_COMPARED, offset + length - at)
            x, y = read_range(a, at, n), read_range(b, at, n)
            if x != y:
                first = at + next(i for i in range(n) if x[i] != y[i])
                page = first - first % PAGE
                return first, read_range(a, page, PAGE), read_range(b, page, PAGE)
    return None


@dataclass(frozen=True)
class Evicted:
    """A page-cache read of a range after its pages were evicted: the bytes (None when it could not be made,
    and ``why``)."""

    data: bytes | None
    why: str | None = None


#: The spans tried in turn around a page to evict it: the page cache keeps a file in folios of up to 2 MiB
#: (ext4 and xfs use large folios), and a folio leaves only whole, so a single page often stays.
EVICT_SPANS = (PAGE, 64 << 10, 2 << 20)


def evict_and_read(path: str, offset: int, length: int, open_path: Callable[[str], Reader]) -> Evicted:
    """Evict the clean pages of [offset, offset + length) of ``path`` from the page cache (with the folio
    around them: :data:`EVICT_SPANS`), make sure they are gone, and read the range again through a reader
    ``open_path`` opens afterwards (a page-cache path): its bytes now come from the device."""
    fd, st = opening.open_readonly(path)
    after = None
    try:
        for unit in EVICT_SPANS:
            start = offset - offset % unit
            span = min(align_up(offset + length, unit), align_up(st.st_size, PAGE)) - start
            before = page_cache.cache_state(fd, start, span)
            if before is not None and before.dirty:
                return Evicted(None, f"{before.dirty} of its pages are not yet written to the disk: not evicted")
            refused = page_cache.evict(fd, start, span)
            if refused is not None:
                return Evicted(None, refused)
            after = page_cache.cache_state(fd, offset, length)
            if after is None:
                return Evicted(None, "this system cannot tell whether the pages left the page cache")
            if not after.cached:
                break
    except OSError as err:
        return Evicted(None, f"evicting its pages failed: {err.strerror or err}")
    finally:
        os.close(fd)
    if after is None:
        return Evicted(None, "nothing was evicted")
    if after.cached:
        return Evicted(None, f"{after.cached} of its {after.pages} pages stayed in the page cache (another process "
                             "maps the file, or writes it)")
    with open_path(path) as reader:
        return Evicted(read_range(reader, offset, length))
