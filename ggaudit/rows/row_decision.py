"""Which bytes of a row are right, decided from what each read path delivered of it (pure: bytes in, a
decision out; nothing read here).

The decision is the one ``check`` makes of a whole file (:func:`ggaudit.evidence.decide.decide`), here for
one row. Buffered reads (the reference read among them) and mmap reads come from the page cache; direct reads
come from the device, unless the filesystem serves them from the page cache too. A tensor manifest's row-group
digest decides when one is given and one delivery matches it; else
agreement of independent paths (a page-cache read and a direct read delivering the same bytes), or of every
replay path (two or more) against the reference read alone; else nothing decides and the reference
(buffered) read stands, with both explanations of what disagrees with it, until the file's published digest
decides it (:mod:`ggaudit.rows.digest_proof`: :func:`published_truth`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from ..evidence.decide import AGREEMENT, MANIFEST, PUBLISHED, Reading, decide
from ..evidence.paths import DEVICE, PAGE_CACHE, read_path
from ..wording import joined

__all__ = ["AGREEMENT", "BUFFERED", "MANIFEST", "PUBLISHED", "REFERENCE_READ", "RowTruth", "decide_row",
           "published_truth"]

#: What decided a row's bytes when nothing did: the reference (buffered) read stands (a mismatch's ``reference``).
BUFFERED = "buffered"
#: The name of the reference read among the deliveries (a buffered read made to compare with).
REFERENCE_READ = "reference"


@dataclass(frozen=True)
class RowTruth:
    """The row's right bytes, what decided them (MANIFEST, PUBLISHED, AGREEMENT, or BUFFERED: nothing did and
    the reference read stands), the deliveries grouped by the bytes delivered, in the order first met, and
    ``basis``: how the published digest decided, or why it could not (words; "" when it was not asked)."""

    right: bytes
    reference: str
    groups: tuple[tuple[tuple[str, ...], bytes], ...]
    basis: str = ""
    #: The deliveries whose bytes came from the device (the direct path, where the filesystem does not serve
    #: it from the page cache).
    from_device: frozenset[str] = field(default=frozenset({"direct"}))
    #: A tensor manifest was given and decided nothing: no delivery matched its row group.
    manifest_tried: bool = False

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
        if self.reference == BUFFERED and self.from_device & set(self._wrong()) and not self.from_device & set(ref):
            # What would decide (the commands) is the report's next step, said once for every such row.
            manifest = "; the tensor manifest decides nothing: no delivery of the row, put in its row group, " \
                       "gives the group's digest" if self.manifest_tried else ""
            return ("nothing decides which bytes are the file's: either the page cache holds other bytes than "
                    "the disk (RAM, a filter driver, a VM or storage layer) or direct reads are wrong on this "
                    f"machine{manifest}")
        if self.decided and REFERENCE_READ not in ref:
            held = f"{joined(ref)} delivered the row's bytes" if ref else "no read of the row delivered its bytes"
            return f"the reference read is the odd one: {held} (decided by {self.reference})"
        return ""

    def _wrong(self) -> tuple[str, ...]:
        return tuple(p for paths, got in self.groups if got != self.right for p in paths)


def decide_row(delivered: Mapping[str, bytes], matches_manifest: Callable[[bytes], bool] | None = None,
               sources: Mapping[str, str] | None = None) -> RowTruth:
    """Decide from *delivered* (``reference`` and each read path that ran: the bytes it delivered of the
    row), by :func:`ggaudit.evidence.decide.decide`; *matches_manifest* tells whether a row's bytes agree with
    the manifest's row group (a group no delivery matches decides nothing: agreement does then); *sources*:
    where each delivery's bytes came from (PAGE_CACHE or DEVICE; default each read path's own)."""
    found = {name: (sources or {}).get(name) or _source(name) for name in delivered}
    readings = [Reading(name, found[name], data) for name, data in delivered.items()]
    device = frozenset(name for name, source in found.items() if source == DEVICE)
    groups = tuple((d.names, _bytes(d.value)) for d in decide(readings).groups)
    if matches_manifest is not None:
        by_manifest = decide(readings, expected={data: matches_manifest(data) for data in set(delivered.values())},
                             by=MANIFEST)
        if by_manifest.right is not None:
            return RowTruth(_bytes(by_manifest.right.value), MANIFEST, groups, from_device=device)
    d = decide(readings, odd_one=REFERENCE_READ)
    if d.right is not None and d.reference == AGREEMENT:
        return RowTruth(_bytes(d.right.value), AGREEMENT, groups, from_device=device)
    return RowTruth(delivered[REFERENCE_READ], BUFFERED, groups, from_device=device,
                    manifest_tried=matches_manifest is not None)


def _source(name: str) -> str:
    return PAGE_CACHE if name == REFERENCE_READ else read_path(name).reads


def _bytes(value: object) -> bytes:
    assert isinstance(value, bytes)
    return value


def published_truth(truth: RowTruth, proven: bytes | None, basis: str) -> RowTruth:
    """*truth*, decided by the published digest: *proven* (the row's bytes in a whole-file read that gave the
    digest; None: no read gave it, and the reference read still stands), told in *basis*."""
    if proven is None:
        return dataclasses.replace(truth, basis=basis)
    return dataclasses.replace(truth, right=proven, reference=PUBLISHED, basis=basis)


