"""What a store lists of a name, as plain frozen data: each file (:class:`StoreEntry`) with the digest it
should have (:class:`Expected`) or what is wrong with it before a byte is read (:class:`Problem`), and, for
``verify``, the whole :class:`StoreListing`: the files in the order it reports them, the warnings said between
and after them, and how its report is named. Every store returns one; one walker in :mod:`ggaudit.verify`
checks any of them, so a store never names verify and verify never names a store.

Below the registry and :mod:`.expected`, which both use these types: nothing here imports either.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["ORPHAN", "WARNING", "Expected", "Problem", "Said", "StoreEntry", "StoreListing"]

#: A :class:`Problem` verify says as a warning, not a mismatch (a file without download metadata): no finding.
WARNING = "warning"
#: A :class:`Problem` of a file no description of the store names: verify's mismatch spans the whole file.
ORPHAN = "orphan"


@dataclass(frozen=True, kw_only=True)
class Expected:
    """One digest a whole file should have, from one source: ``algorithm`` (sha256, md5, git-sha1),
    ``digest`` (lowercase hex), ``source`` (one of :data:`~ggaudit.stores.expected.SOURCES`), ``what`` it is
    in words (``the checksum file's line 3``), ``note``: what qualifies it in words
    (:data:`~ggaudit.stores.expected.STALE`), and ``size``: the size the source gives (an Ollama layer's,
    GPT4All's list's), else None."""

    algorithm: str
    digest: str
    source: str
    what: str
    note: str | None = None
    size: int | None = None


@dataclass(frozen=True, kw_only=True)
class Problem:
    """What a store says is wrong with a file before any byte is read, as verify says it: ``kind`` (verify's
    Mismatch kind for it: "link", "missing", :data:`ORPHAN`; :data:`WARNING` for what verify only warns of),
    ``subject`` (the file as the store names it: untrusted text) and ``detail`` in words."""

    kind: str
    subject: str
    detail: str


@dataclass(frozen=True, kw_only=True)
class StoreEntry:
    """One file as a store lists it, in the store's order (verify reports each: a layer, a snapshot's link):
    ``path`` as the store gives it, ``subject`` what verify names it by, ``read`` the file whose bytes are
    checked (a snapshot link's blob, else ``path``), and what the store says of it (neither: only its
    structure can be checked)."""

    path: str
    subject: str
    read: str
    expected: Expected | None = None
    problem: Problem | None = None


@dataclass(frozen=True)
class Said:
    """A warning said at its place among the files, whatever ``--fail-fast`` stopped (a manifest of the store
    that cannot be read, an odd entry of its folders)."""

    warning: str


@dataclass(frozen=True, kw_only=True)
class StoreListing:
    """Everything ``verify`` checks of a store's name, in the order it reports it.

    ``subject`` and ``kind``: the report's source and kind (one of the JSON Schema's verify kinds);
    ``items``: each file (checked in turn, until ``--fail-fast`` stops) and the warnings said among them;
    ``warnings``: those said after every file's own (leftovers of interrupted downloads); ``empty``: what the
    name held, in words, when nothing was checked; ``looked_at``: what else was looked at that counts as a
    check (the models and blobs of a store searched for orphans); ``once``: a file several entries read is
    checked and reported once (the links of a snapshot to one blob), else once per entry (each layer of a
    manifest is reported, though the digest of a blob is computed once)."""

    subject: str
    kind: str
    items: tuple[StoreEntry | Said, ...]
    empty: str
    warnings: tuple[str, ...] = ()
    looked_at: int = 0
    once: bool = False

    def entries(self) -> list[StoreEntry]:
        """The files alone, in order."""
        return [item for item in self.items if isinstance(item, StoreEntry)]


def leftovers(paths: Iterable[str | os.PathLike[str]]) -> tuple[str, ...]:
    """A listing's warnings for what interrupted downloads left (``*.incomplete``): said, never checked."""
    return tuple(f"leftover of an interrupted download: {os.fspath(p)}" for p in paths)
