"""Which bytes are right, decided from what each read delivered: the one decision ``check`` (a whole file) and
``rows`` (a row) both make. Pure: deliveries in, a decision out; nothing is read here.

Buffered and mmap reads come from the page cache, direct reads from the device (where the filesystem does
not serve them from the page cache too: :func:`ggaudit.evidence.paths.source_of`). The right bytes are those
an expectation describes (a published digest, else a manifest's) when a read delivered them; else those of
independent reads that agree (one from the page cache, one from the device). Two reads of the page cache
agreeing say nothing of the device, and no single read is the truth.

What stays open is said with the test that could close it: a group of reads whose match with the
expectation none of them computed (``unknown``: hash one of them), and the page cache against the device
(evict the file's pages and read again: the read after the eviction is a delivery from the device).
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass

from .paths import DEVICE, PAGE_CACHE

__all__ = ["AGREEMENT", "MANIFEST", "PUBLISHED", "Decision", "ReadGroup", "Reading", "decide"]

#: What decided which bytes are right.
PUBLISHED, MANIFEST, AGREEMENT = "published", "manifest", "agreement"


@dataclass(frozen=True)
class Reading:
    """One read: its ``name`` (a read path, or another read such as rows' ``reference`` read or the read
    after an eviction), where its bytes came from (``source``: PAGE_CACHE or DEVICE) and what it delivered
    (``value``: the bytes, or a digest of them)."""

    name: str
    source: str
    value: Hashable


@dataclass(frozen=True)
class ReadGroup:
    """The reads that delivered the same ``value``, in the order first met, and where their bytes came from."""

    names: tuple[str, ...]
    sources: frozenset[str]
    value: Hashable

    @property
    def independent(self) -> bool:
        """The page cache and the device agree on these bytes."""
        return PAGE_CACHE in self.sources and DEVICE in self.sources

    @property
    def from_device(self) -> bool:
        return DEVICE in self.sources


@dataclass(frozen=True)
class Decision:
    """The groups of reads; the group whose bytes are right (``right``: None when undecided, or when no read
    delivered what the expectation describes); what decided (``reference``: PUBLISHED, MANIFEST, AGREEMENT,
    or None); whether a read delivered the expectation (``met``: None without one, or while ``unknown``
    groups, whose match no read computed, could still hold it)."""

    groups: tuple[ReadGroup, ...]
    right: ReadGroup | None
    reference: str | None
    met: bool | None = None
    unknown: tuple[ReadGroup, ...] = ()

    @property
    def wrong(self) -> tuple[str, ...]:
        """The reads whose bytes are not the right ones (every read when none delivered them)."""
        if self.right is None and self.met is not False:
            return ()
        return tuple(n for g in self.groups if g is not self.right for n in g.names)

    @property
    def agree(self) -> bool:
        return len(self.groups) == 1

    @property
    def device(self) -> ReadGroup | None:
        """The one group a read from the device delivered, or None (the device was not read, or its reads
        disagree: direct against the read after an eviction)."""
        found = [g for g in self.groups if g.from_device]
        return found[0] if len(found) == 1 else None


def decide(deliveries: Sequence[Reading], *, expected: Mapping[Hashable, bool | None] | None = None,
           by: str = PUBLISHED, odd_one: str | None = None) -> Decision:
    """Decide from ``deliveries``.

    ``expected``: per value delivered, whether it is what the expectation describes (None: no read of it
    computed the expectation's digest); ``by`` names the expectation (PUBLISHED or MANIFEST). Without one,
    agreement decides: of independent reads, or (``odd_one``, rows' reference read) of two or more reads
    against that one read alone.
    """
    if not deliveries:
        raise ValueError("no read delivered anything to decide on")
    groups = _groups(deliveries)
    if expected is not None:
        matched = [g for g in groups if expected.get(g.value) is True]
        unknown = tuple(g for g in groups if expected.get(g.value) is None)
        if matched:
            return Decision(groups, matched[0], by, True)
        if unknown:
            return Decision(groups, None, None, None, unknown)
        return Decision(groups, None, by, False)
    return _by_agreement(groups, odd_one)


def _by_agreement(groups: tuple[ReadGroup, ...], odd_one: str | None) -> Decision:
    independent = [g for g in groups if g.independent]
    if independent:
        return Decision(groups, independent[0], AGREEMENT)
    if len(groups) == 1:
        return Decision(groups, groups[0], None)
    others = [g for g in groups if odd_one not in g.names]
    if odd_one is not None and len(groups) == 2 and len(others) == 1 and len(others[0].names) >= 2:
        return Decision(groups, others[0], AGREEMENT)    # every other read agrees against that one read
    return Decision(groups, None, None)


def _groups(deliveries: Sequence[Reading]) -> tuple[ReadGroup, ...]:
    by_value: dict[Hashable, list[Reading]] = {}
    for d in deliveries:
        by_value.setdefault(d.value, []).append(d)
    return tuple(ReadGroup(tuple(d.name for d in ds), frozenset(d.source for d in ds), value)
                 for value, ds in by_value.items())
