"""How :func:`ggaudit.rows.replay.check_rows` replays: :class:`RowsOptions`, and the factories that put
other readers, caches and buffer pools under it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..errors import UsageError, check_arg
from .gather import BufferPool, PoolFactory, RowCache
from ..evidence.readers import Reader
from .select import int_text
from .table import RowTable

__all__ = ["CacheFactory", "ReadPathProgress", "ReaderFactory", "RowsOptions", "default_cache"]

ReaderFactory = Callable[[str, str], Reader]
#: Called as (read path, rows done, rows in all) after each batch or sweep chunk: :data:`ggaudit.io.fan_out.Progress`
#: with the read path first, since each path's pass over the rows is counted from 0. A whole-file pass made
#: for the published digest is named "MODE whole file" (:data:`ggaudit.rows.WHOLE_FILE`) and counts bytes.
ReadPathProgress = Callable[[str, int, int], None]


CacheFactory = Callable[[int, RowTable], RowCache]


def default_cache(capacity: int, table: RowTable) -> RowCache:
    return RowCache(capacity)


@dataclass(frozen=True, kw_only=True)
class RowsOptions:
    """How check_rows replays: *workers* threads per gather (reads in flight for a sweep of all rows),
    *batch* rows per gather, a row cache of *cache_rows* rows in front (0: no cache passes), a *prefetch*
    stage after each read path's gather, *fp8* for an I8 table holding FP8 E4M3 bytes, *fail_fast* to stop
    at the first finding. The factories put other readers (called as (file, read path)), caches and buffer
    pools under the replay, as tests do with faulty ones; *progress* is called as (read path, rows done,
    rows in all) after each batch or sweep chunk (see :data:`ReadPathProgress`)."""

    workers: int = 4
    batch: int = 256
    cache_rows: int = 0
    prefetch: bool = False
    fp8: bool = False
    fail_fast: bool = False
    reader_factory: ReaderFactory | None = None
    cache_factory: CacheFactory = default_cache
    pool_factory: PoolFactory = BufferPool
    progress: ReadPathProgress | None = None
    #: The capture's (IDs, rows) array or field names, when they are neither ``ids`` and one other nor
    #: told apart by shape.
    capture_arrays: tuple[str, str] | None = None

    def __post_init__(self) -> None:
        for name, least in (("workers", 1), ("batch", 1), ("cache_rows", 0)):
            value = getattr(self, name)
            check_arg(name, value, int, "an integer")
            if value < least:
                raise UsageError(None, f"must be at least {least}, not {int_text(value)}", field=name)
        for name in ("prefetch", "fp8", "fail_fast"):
            check_arg(name, getattr(self, name), bool, "True or False")
        names = self.capture_arrays
        if names is not None and not (isinstance(names, tuple) and len(names) == 2
                                      and all(isinstance(n, str) and n for n in names)):
            raise UsageError(None, "must be None or two names, (IDs, rows)", field="capture_arrays")
        for name, optional in (("reader_factory", True), ("cache_factory", False), ("pool_factory", False),
                               ("progress", True)):
            value = getattr(self, name)
            if not callable(value) and not (optional and value is None):
                raise UsageError(None, f"must be callable{' or None' if optional else ''}, not "
                                       f"{type(value).__name__}", field=name)


