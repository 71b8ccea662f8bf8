"""What a replay collects as it goes: every mismatch counted, the first MAX_REPORTED of each sort kept in
full (with what settling the row's right bytes needs), short reads and failed reads."""

from __future__ import annotations

from array import array
from collections import Counter
from collections.abc import Callable, Iterable

from .classify import UNCLASSIFIED, RowMismatch
from .gather import Shortfall
from ..evidence.readers import ReadFailed, FailedRead
from .report import ReadFailure, ShortRead
from .select import MAX_SELECTED
from .recompare import Kept

__all__ = ["MAX_REPORTED", "Findings"]

#: Mismatches kept in full; beyond this they are only counted.
MAX_REPORTED = 1000


class Findings:
    """Collects findings: the first MAX_REPORTED of each sort in full, every one counted.

    Classifying a mismatch may read the file around the row, so beyond the cap rows are only counted
    (as "unclassified"): a path that is wrong everywhere must not cost a search per row of a 54 GB table.
    """

    def __init__(self, fail_fast: bool) -> None:
        self.fail_fast = fail_fast
        self.kept: list[Kept] = []
        self.count = 0
        self.kinds: Counter[str] = Counter()
        # Every mismatched row as 8 bytes (a set of Python ints costs ten times that), the first
        # MAX_SELECTED times one is found; repeats (one row wrong on several paths) are removed at the end.
        self.rows = array("q")
        self.short_reads: list[ShortRead] = []
        self.short_count = 0
        self.failures: list[ReadFailure] = []
        self.failure_count = 0
        self.captured = 0    # captured rows compared with the file
        self._failed_at: set[tuple[str, str, int]] = set()

    def add(self, row: int, make: Callable[[], RowMismatch], expected: bytes | None = None,
            actual: bytes | None = None, remake: Callable[[bytes], RowMismatch] | None = None) -> RowMismatch | None:
        """Count a mismatch; the one made (None past the cap)."""
        self.count += 1
        if len(self.rows) < MAX_SELECTED:
            self.rows.append(row)
        if len(self.kept) < MAX_REPORTED:
            m = make()
            self.kept.append(Kept(m, expected, actual, remake))
            self.kinds[m.kind] += 1
            return m
        self.kinds[UNCLASSIFIED] += 1
        return None

    def replace(self, kept: list[Kept]) -> None:
        """The kept mismatches, settled: counted again (those past the cap stay unclassified)."""
        unclassified = self.kinds[UNCLASSIFIED]
        self.kept = kept
        self.count = len(kept) + unclassified
        self.kinds = Counter(k.mismatch.kind for k in kept)
        if unclassified:
            self.kinds[UNCLASSIFIED] = unclassified

    @property
    def mismatches(self) -> list[RowMismatch]:
        return [k.mismatch for k in self.kept]

    def short(self, mode: str, stage: str, file: str, shortfalls: Iterable[Shortfall]) -> None:
        for s in shortfalls:
            self.short_count += 1
            if len(self.short_reads) < MAX_REPORTED:
                self.short_reads.append(ShortRead(mode=mode, stage=stage, file=file, offset=s.offset,
                                                  requested=s.requested, returned=s.returned))

    def failed(self, stage: str, errors: Iterable[FailedRead]) -> None:
        """Failed reads, once each: the reference read of a row fails again for every path that needs it."""
        for err in errors:
            failure = ReadFailure.of(err, stage)
            key = (failure.mode, failure.stage, failure.offset)
            if key in self._failed_at:
                continue
            self._failed_at.add(key)
            self.failure_count += 1
            if len(self.failures) < MAX_REPORTED:
                self.failures.append(failure)

    def failing(self, stage: str) -> ReadFailed:
        """For a read after (or around) the replay: its failure becomes a read error of *stage*, and the work
        that read for goes on with what it has."""
        return lambda err: self.failed(stage, [err])

    @property
    def stop(self) -> bool:
        return self.fail_fast and bool(self.count or self.short_count or self.failure_count)

