"""Rows decided by the file's published digest, when the read paths disagree about them and nothing else
decides (no tensor manifest, no agreement of independent paths).

A published digest covers the whole file, not a row: so the whole file is read through one read path at a
time (:func:`ggaudit.evidence.read_pass.read_pass`), hashed with the published algorithm while the disputed rows'
bytes are kept as that same read delivered them. A path whose read gives the published digest delivered the
published file, and with it those rows' right bytes: they are proven, whatever any other read delivered.
Paths are tried in the order most likely to decide (the device's first, then the page cache's) and the
first that gives the digest ends the search: a disagreement costs one or two reads of the file.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import ReadError
from ..io.fan_out import ChunkConsumer
from ..stores.published_digest import PublishedDigest
from ..verify.digests import published_hasher
from . import WHOLE_FILE
from ..evidence.paths import MODES, proof_order
from ..json_shape import json_key, json_record, to_json
from .options import ReadPathProgress
from ..evidence.readers import Reader
from .table import RowTable
from ..evidence.read_pass import read_pass

__all__ = ["PathDigest", "Proof", "prove_rows"]


@json_record
class PathDigest:
    """One whole-file read made to compare with the published digest: its read path, the digest it gave
    (None: it could not read the file, ``error`` says why)."""

    mode: str = json_key(values=MODES)
    digest: str | None
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        return to_json(self)


@dataclass(frozen=True, kw_only=True)
class Proof:
    """What the published digest proved: the rows the read paths disputed, the path whose read of the whole
    file gave it (None: none did), those rows' bytes as that read delivered them, and every read tried."""

    published: PublishedDigest
    disputed: tuple[int, ...]
    mode: str | None
    rows: dict[int, bytes]
    tried: tuple[PathDigest, ...]

    @property
    def basis(self) -> str:
        """How the published digest decided the disputed rows, or why it could not, in words."""
        p = self.published
        if self.mode is not None:
            return f"decided by {p.what}: the whole file read through {self.mode} gives its {p.algorithm}"
        return (f"{p.what} decides nothing: no whole-file read gives it ({self.reads_text}): the file on disk is "
                "not the published one, or every path reads it wrong")

    @property
    def reads_text(self) -> str:
        """What each whole-file read tried gave, in words: ``direct gives another, buffered could not read it``."""
        return ", ".join(f"{t.mode} {'gives another' if t.digest else 'could not read it'}" for t in self.tried)

    def to_json(self) -> dict[str, Any]:
        p = self.published
        return {"algorithm": p.algorithm, "digest": p.digest, "what": p.what, "proven_by": self.mode,
                "rows": list(self.disputed), "reads": [t.to_json() for t in self.tried]}


class RowCopies:
    """A chunk consumer keeping the bytes of some rows of a table as a pass over the file delivers them."""

    def __init__(self, table: RowTable, rows: Sequence[int]) -> None:
        self.row_bytes = table.row_bytes
        self.spans = sorted((table.row_offset(r), r) for r in set(rows))
        self.starts = [start for start, _ in self.spans]
        self.got = {row: bytearray(self.row_bytes) for _, row in self.spans}

    def update(self, offset: int, data: memoryview) -> None:
        end = offset + len(data)
        i = bisect.bisect_right(self.starts, offset - self.row_bytes)    # the first row ending past offset
        while i < len(self.spans) and self.spans[i][0] < end:
            start, row = self.spans[i]
            lo, hi = max(start, offset), min(start + self.row_bytes, end)
            if lo < hi:
                self.got[row][lo - start:hi - start] = data[lo - offset:hi - offset]
            i += 1


def prove_rows(table: RowTable, published: PublishedDigest, rows: Sequence[int], modes: Sequence[str],
               open_path: Callable[[str, str], Reader],
               progress: ReadPathProgress | None = None) -> Proof:
    """Read the whole file through each of *modes* (the device's first: :func:`ggaudit.evidence.paths.proof_order`)
    until one gives *published*;
    *rows*' bytes as that read delivered them. A path that cannot open or read the file is passed over
    (its ``error``): the paths after it may still decide. *progress* is called as ("MODE whole file",
    bytes read, the file's size)."""
    tried: list[PathDigest] = []
    disputed = tuple(sorted(set(rows)))
    for mode in proof_order(modes):
        copies = RowCopies(table, rows)
        try:
            digest = _whole_file_digest(open_path, table.path, mode, published.algorithm,
                                        [copies, *_counted(progress, mode, table.file_size)])
        except ReadError as err:     # FailedRead, DirectIOUnavailable, a file that ended early
            tried.append(PathDigest(mode=mode, digest=None, error=str(err)))
            continue
        tried.append(PathDigest(mode=mode, digest=digest))
        if digest == published.digest:
            return Proof(published=published, disputed=disputed, mode=mode,
                         rows={r: bytes(b) for r, b in copies.got.items()}, tried=tuple(tried))
    return Proof(published=published, disputed=disputed, mode=None, rows={}, tried=tuple(tried))


def _whole_file_digest(open_path: Callable[[str, str], Reader], path: str, mode: str, algorithm: str,
                       consumers: Sequence[ChunkConsumer]) -> str:
    with open_path(path, mode) as reader:
        hasher = published_hasher(algorithm, reader.size)
        read_pass(reader, [hasher, *consumers])
    return hasher.hexdigest()


class _Counted:
    """A chunk consumer telling *progress* how far a whole-file pass has read."""

    def __init__(self, progress: ReadPathProgress, label: str, size: int) -> None:
        self.progress, self.label, self.size = progress, label, size
        progress(label, 0, size)

    def update(self, offset: int, data: memoryview) -> None:
        self.progress(self.label, offset + len(data), self.size)


def _counted(progress: ReadPathProgress | None, mode: str, size: int) -> list[_Counted]:
    return [] if progress is None else [_Counted(progress, f"{mode} {WHOLE_FILE}", size)]
