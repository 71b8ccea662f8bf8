"""Which bytes of a row are right, decided from what each read path delivered of it (pure: bytes in, a
decision out; nothing read here).

The vocabulary is the check command's (ggaudit.check.decide) for one row instead of a whole file. Buffered
reads (the reference read among them) and mmap reads come from the page cache; direct reads come from the
device. A tensor manifest's row-group digest decides when one is given and one delivery matches it; else
agreement of independent paths (a page-cache read and a direct read delivering the same bytes), or of every
replay path (two or more) against the reference read alone; else nothing decides and the reference
(buffered) read stands, with both explanations of what disagrees with it, until the file's published digest
decides it (:mod:`ggaudit.rows.published`: :func:`published_truth`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

__all__ = ["AGREEMENT", "BUFFERED", "MANIFEST", "PUBLISHED", "REFERENCE_READ", "RowTruth", "decide_row",
           "published_truth"]

#: What decided a row's bytes (a mismatch's ``reference``).
MANIFEST, PUBLISHED, AGREEMENT, BUFFERED = "manifest", "published", "agreement", "buffered"
#: The name of the reference read among the deliveries (a buffered read made to compare with).
REFERENCE_READ = "reference"
#: The deliveries served from the page cache; the direct path reads the device.
PAGE_CACHE = (REFERENCE_READ, "buffered", "mmap")


@dataclass(frozen=True)
class RowTruth:
    """The row's right bytes, what decided them (MANIFEST, PUBLISHED, AGREEMENT, or BUFFERED: nothing did and
    the reference read stands), the deliveries grouped by the bytes delivered, in the order first met, and
    ``basis``: how the published digest decided, or why it could not (words; "" when it was not asked)."""

    right: bytes
    reference: str
    groups: tuple[tuple[tuple[str, ...], bytes], ...]
    basis: str = ""

    @property
    def disputed(self) -> bool:
        """Nothing decided, and the deliveries disagree."""
        return not self.decided and len(self.groups) > 1

    @property
    def decided(self) -> bool:
        return self.reference != BUFFERED

    def paths_of(self, data: bytes) -> tuple[str, ...]:
        return next((paths for paths, got in self.groups if got == data), ())

    @property
    def explanation(self) -> str:
        """Why the reference read stands, or which delivery was the odd one, in words ("" when plain)."""
        return "; ".join(words for words in (self._which(), self.basis) if words)

    def _which(self) -> str:
        ref = self.paths_of(self.right)
        if self.reference == BUFFERED and "direct" in self._wrong() and set(ref) <= set(PAGE_CACHE):
            # The published digest, once tried (basis), decided nothing: only a manifest is left to name.
            published = "" if self.basis else ", or the file's published sha256 (rows --sha256),"
            return ("nothing decides which bytes are the file's: either the page cache holds other bytes than "
                    "the disk (RAM, a filter driver, a VM or storage layer) or direct reads are wrong on this "
                    f"machine; a tensor manifest made where the model works (rows --manifest){published} decides")
        if self.decided and REFERENCE_READ not in ref:
            held = f"{_and(ref)} delivered the row's bytes" if ref else "no read of the row delivered its bytes"
            return f"the reference read is the odd one: {held} (decided by {self.reference})"
        return ""

    def _wrong(self) -> tuple[str, ...]:
        return tuple(p for paths, got in self.groups if got != self.right for p in paths)


def decide_row(delivered: Mapping[str, bytes], matches_manifest: Callable[[bytes], bool] | None = None) -> RowTruth:
    """Decide from *delivered* (``reference`` and each read path that ran: the bytes it delivered of the
    row); *matches_manifest* tells whether a row's bytes agree with the manifest's row group."""
    groups = _groups(delivered)
    reference = delivered[REFERENCE_READ]
    if matches_manifest is not None:
        matching = [data for _, data in groups if matches_manifest(data)]
        if len(matching) == 1:
            return RowTruth(matching[0], MANIFEST, groups)
    for paths, data in groups:
        if "direct" in paths and any(p in PAGE_CACHE for p in paths):
            return RowTruth(data, AGREEMENT, groups)
    replayed = [paths for paths, _ in groups if REFERENCE_READ not in paths]
    if len(groups) == 2 and len(replayed) == 1 and len(replayed[0]) >= 2:
        # Every replay path (two or more) agrees against the reference read alone: that read was the odd one.
        return RowTruth(next(data for paths, data in groups if paths == replayed[0]), AGREEMENT, groups)
    return RowTruth(reference, BUFFERED, groups)


def published_truth(truth: RowTruth, proven: bytes | None, basis: str) -> RowTruth:
    """*truth*, decided by the published digest: *proven* (the row's bytes in a whole-file read that gave the
    digest; None: no read gave it, and the reference read still stands), told in *basis*."""
    if proven is None:
        return RowTruth(truth.right, truth.reference, truth.groups, basis)
    return RowTruth(proven, PUBLISHED, truth.groups, basis)


def _groups(delivered: Mapping[str, bytes]) -> tuple[tuple[tuple[str, ...], bytes], ...]:
    by_bytes: dict[bytes, list[str]] = {}
    for path, data in delivered.items():
        by_bytes.setdefault(data, []).append(path)
    return tuple((tuple(paths), data) for data, paths in by_bytes.items())


def _and(items: tuple[str, ...]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]
