"""The read paths as registered objects: each says where its bytes come from (the page cache or the device),
how a pass over a whole file reads it and whether engines read that way, so no job compares mode strings. A
new read path is one :class:`ReadPath` registered here and its reader in :mod:`.readers` (``open_reader``).

Where a path's bytes come from is a property of the path on a disk's filesystem (:attr:`ReadPath.reads`) and,
for one file, of the filesystem under it too: O_DIRECT on a tmpfs is served from the page cache
(:func:`source_of`), so there it is no independent witness of the device.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Literal, cast

__all__ = ["DEVICE", "MODES", "PAGE_CACHE", "PATHS", "Mode", "ReadPath", "Source", "digest_path", "proof_order",
           "read_path", "source_of"]

#: Where a read path's bytes come from.
PAGE_CACHE, DEVICE = "page-cache", "device"

#: Bytes per read of a pass through the page cache (a multiple of every direct-I/O alignment there is).
#: Small enough that a chunk stays in the CPU's cache from the read (a copy) through the poison before it and
#: every consumer after it: at 8 MiB the ring no longer fits and each of them goes to main memory instead.
CACHE_CHUNK_BYTES = 1 << 20
#: Bytes per request of the device's path: its bytes come from the device, not the CPU's cache, and a large
#: request is split by the kernel into several the device serves at once.
DEVICE_CHUNK_BYTES = 8 << 20


@dataclass(frozen=True)
class ReadPath:
    """One way of reading a file: ``name`` (as ``--modes`` takes it), where its bytes come from (``reads``:
    PAGE_CACHE or DEVICE), the bytes per request of a whole-file pass, and whether engines read weights this
    way (the scan rides on that pass)."""

    name: str
    reads: str
    chunk_bytes: int
    engines_read: bool


#: Every read path, in the order a check reads a file: the page cache's first (buffered is the reference).
PATHS: dict[str, ReadPath] = {}


def _register(*paths: ReadPath) -> None:
    for p in paths:
        if p.name in PATHS or p.reads not in (PAGE_CACHE, DEVICE):
            raise TypeError(f"read path {p.name!r} registered twice, or reads from {p.reads!r}")
        PATHS[p.name] = p


_register(
    ReadPath("buffered", PAGE_CACHE, CACHE_CHUNK_BYTES, False),     # positioned reads through the page cache
    ReadPath("mmap", PAGE_CACHE, CACHE_CHUNK_BYTES, True),          # a read-only mapping, as engines read weights
    ReadPath("direct", DEVICE, DEVICE_CHUNK_BYTES, False),          # direct I/O, past the page cache
)
#: A read path's name, for type checkers: the names registered above (tests/test_api.py holds them equal).
Mode = Literal["buffered", "mmap", "direct"]
#: The read paths' names, in the house order.
MODES = cast("tuple[Mode, ...]", tuple(PATHS))


def read_path(name: str) -> ReadPath:
    return PATHS[name]


@dataclass(frozen=True)
class Source:
    """Where one path's reads of one file come from, and why when that is not the path's own (``why``)."""

    reads: str
    why: str | None = None


def source_of(mode: str, file: str, probe: Callable[[str], str | None] | None = None) -> Source:
    """Where ``mode``'s reads of ``file`` come from: the path's own source, unless the filesystem serves a
    device path from the page cache (``probe``: why it does, or None; default
    :func:`ggaudit.io.direct_shares_cache.direct_shares_page_cache`)."""
    path = PATHS[mode]
    if path.reads == DEVICE:
        if probe is None:
            from ..io import direct_shares_cache    # not to name a path: the command line's help names them
            probe = direct_shares_cache.direct_shares_page_cache
        why = probe(file)
        if why is not None:
            return Source(PAGE_CACHE, why)
    return Source(path.reads)


def digest_path(modes: Sequence[str]) -> str:
    """The one path a whole-file digest (a published one's algorithm) rides on: the device's among ``modes``
    (its pass runs beside the page cache's, so the digest's time is spent while they read), else the first.
    Once is enough: a path that delivered the same bytes (their xxh3-128 alike) has that digest too, and one
    that delivered other bytes is hashed again only then (the decision's ``rehash`` test)."""
    return next((m for m in modes if PATHS[m].reads == DEVICE), modes[0])


def proof_order(modes: Iterable[str]) -> list[str]:
    """``modes`` in the order whole-file reads are tried to prove a published digest: the device's first (in
    the case left undecided the page cache's paths agree against it), then the page cache's."""
    return sorted(set(modes), key=lambda m: (PATHS[m].reads != DEVICE, MODES.index(m)))
