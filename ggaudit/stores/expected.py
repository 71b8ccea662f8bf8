"""Every digest a file should have, from every source at once, and what a store says is wrong with it.

The one place ``verify`` and ``check`` take their expectations from, so the two cannot disagree: a store's
(an Ollama layer's digest, a Hugging Face blob's name, a ``--local-dir`` download's etag, GPT4All's md5), a
content-addressed blob's own name, a checksum file's lines, a sha256 given. Nothing is dropped: a checksum
file listing a file twice gives two, an etag of a file modified since its download is kept with a note,
and expectations that disagree are all kept (:func:`conflicts` finds them; deciding is the caller's). What
verify reports of a file before reading a byte of it (a link out, a blob name that is no digest, a shard
missing) is a :class:`Problem` of the same kind and words.

Each store lists its files as :class:`~.listing.StoreEntry` objects in its own order, the order verify
walks them (the types are :mod:`.listing`'s, here too); :func:`by_file` groups them by file for check.
Reads descriptions (manifests, metadata, listings), never a model's bytes.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from ..errors import UsageError
from ..untrusted import quote
from .listing import WARNING, Expected, Problem, StoreEntry
from .small_files import HEX64
from .sums import SumsEntry, read_sums

if TYPE_CHECKING:
    from .registry import Store

_Item = TypeVar("_Item", "Expected", "Problem")

__all__ = ["BLOB_NAME", "GIVEN", "NAMED", "SOURCES", "STALE", "STORE", "SUMS", "WARNING", "Expected",
           "FileExpectations", "Problem", "StoreEntry", "blob_name_digest", "by_file", "conflicts", "file_key",
           "given_expectation", "merged", "named_expectations", "store_expectations", "sums_entries",
           "sums_expectations"]

#: The kinds of source an expectation comes from: the store's description, a blob's own name, a checksum
#: file (``--sums``), the user (``--sha256``).
STORE, NAMED, SUMS, GIVEN = "store", "blob-name", "sums", "given"
SOURCES = (STORE, NAMED, SUMS, GIVEN)
#: The note of an etag kept for a file modified after its download (verify's warning says it so).
STALE = "modified after it was downloaded (mtime later than its download metadata)"
#: A content-addressed blob's name (Ollama's ``sha256-<hex>``, the older ``sha256:<hex>``, Hugging Face's
#: ``<hex>``): the sha256 it promises.
BLOB_NAME = re.compile(r"(?:sha256[-:])?([0-9a-fA-F]{64})")


@dataclass(frozen=True, kw_only=True)
class FileExpectations:
    """Everything in play for one file: its path (as the store gives it) and every expectation and problem."""

    path: str
    expected: tuple[Expected, ...]
    problems: tuple[Problem, ...] = ()


def file_key(path: str | os.PathLike[str]) -> str:
    """One name for a file however it was reached (a snapshot's link, ``./``, another case on Windows)."""
    return os.path.normcase(_real(path))


def _real(path: str | os.PathLike[str]) -> str:
    """*path*, its links followed; as it is when it holds a NUL byte, which no file's name can (no OS call
    takes it: realpath raises ValueError)."""
    try:
        return os.path.realpath(path)
    except ValueError:
        return os.path.abspath(path)


def blob_name_digest(path: str | os.PathLike[str]) -> str | None:
    """The sha256 a file's own name promises (``sha256-<hex>``, ``sha256:<hex>``, ``<hex>``), if any."""
    match = BLOB_NAME.fullmatch(os.path.basename(os.fspath(path)))
    return match[1].lower() if match else None


def given_expectation(sha256: object, *, field: str = "sha256") -> Expected:
    """A sha256 the user gives (``--sha256``): 64 hex digits, any case; else a UsageError naming *field*."""
    if not isinstance(sha256, str) or not HEX64.fullmatch(sha256):
        shown = quote(sha256) if isinstance(sha256, str) else type(sha256).__name__
        raise UsageError(None, f"{shown} is not a sha256: 64 hex digits", field=field)
    return Expected(algorithm="sha256", digest=sha256.lower(), source=GIVEN, what="the sha256 given (--sha256)")


def named_expectations(paths: Iterable[str | os.PathLike[str]]) -> dict[str, FileExpectations]:
    """The sha256 each content-addressed blob of *paths* promises by its name (by :func:`file_key`): the name
    of the file its link leads to first (the bytes' own), then its own name when that says another."""
    found: dict[str, FileExpectations] = {}
    for path in paths:
        own, target = blob_name_digest(path), blob_name_digest(_real(path))
        named = [_named(target, "its file name gives")] if own == target else \
            [_named(target, "its link's target's file name gives"), _named(own, "its file name gives")]
        kept = tuple(e for e in named if e is not None)
        if kept:
            found[file_key(path)] = FileExpectations(path=os.fspath(path), expected=kept)
    return found


def _named(digest: str | None, gives: str) -> Expected | None:
    if digest is None:
        return None
    return Expected(algorithm="sha256", digest=digest, source=NAMED, what=f"the sha256 {gives} (a content-addressed "
                                                                           "blob)")


def sums_entries(entries: Iterable[SumsEntry]) -> list[StoreEntry]:
    """Every line of a checksum file, in its order, each its own expectation (a file listed twice has two);
    a line whose name is a link out of the folder also a problem, verify's ``link``, never opened."""
    return [StoreEntry(path=os.fspath(e.path), subject=e.name, read=os.fspath(e.path),
                       expected=Expected(algorithm="sha256", digest=e.sha256, source=SUMS,
                                         what=f"the checksum file's line {e.line}"),
                       problem=None if e.problem is None else Problem(kind="link", subject=e.name,
                                                                       detail=f"line {e.line}: {e.problem}"))
            for e in entries]


def sums_expectations(sums: str | os.PathLike[str], files: Iterable[str | os.PathLike[str]] | None = None, *,
                      base: str | os.PathLike[str] | None = None) -> dict[str, FileExpectations]:
    """What the checksum file *sums* says of each file it names (by :func:`file_key`; *files*: of those only),
    every line kept; names resolve under *base* (default: its folder) and never leave it."""
    only = None if files is None else {file_key(f) for f in files}
    return by_file(sums_entries(read_sums(sums, base)), only)


def by_file(entries: Iterable[StoreEntry], only: set[str] | None = None) -> dict[str, FileExpectations]:
    """*entries* grouped by file (:func:`file_key` of each path; *only*: those keys), as :func:`merged`
    merges them; an entry with neither an expectation nor a problem says nothing of its file: left out."""
    keys: dict[str, str] = {}        # 200k layers naming one blob: its path resolved once
    found = []
    for entry in entries:
        if entry.expected is None and entry.problem is None:
            continue
        key = keys.get(entry.path) or keys.setdefault(entry.path, file_key(entry.path))
        if only is None or key in only:
            found.append({key: FileExpectations(path=entry.path, expected=_one(entry.expected),
                                                problems=_one(entry.problem))})
    return merged(*found)


def _one(item: _Item | None) -> tuple[_Item, ...]:
    return () if item is None else (item,)


def merged(*maps: Mapping[str, FileExpectations]) -> dict[str, FileExpectations]:
    """The union of *maps* by file key, every Expected and Problem kept in the order given (the path: the
    first map's); one equal in every field to one kept says nothing more and is kept once."""
    paths: dict[str, str] = {}
    expected: dict[str, dict[Expected, None]] = {}
    problems: dict[str, dict[Problem, None]] = {}
    for found in maps:
        for key, one in found.items():
            paths.setdefault(key, one.path)
            expected.setdefault(key, {}).update(dict.fromkeys(one.expected))
            problems.setdefault(key, {}).update(dict.fromkeys(one.problems))
    return {key: FileExpectations(path=path, expected=tuple(expected[key]), problems=tuple(problems[key]))
            for key, path in paths.items()}


def conflicts(expected: Sequence[Expected]) -> list[tuple[Expected, Expected]]:
    """Every pair of *expected* of one algorithm and different digests, each pair in the order given (pure).
    Grouped by digest first: 200k layers naming one blob cost one pass, not 200k squared."""
    groups: dict[tuple[str, str], list[int]] = {}
    for i, e in enumerate(expected):
        groups.setdefault((e.algorithm, e.digest), []).append(i)
    pairs = [(i, j) for (algo_a, digest_a), a in groups.items() for (algo_b, digest_b), b in groups.items()
             if algo_a == algo_b and digest_a < digest_b for i in a for j in b]
    return [(expected[i], expected[j]) for i, j in sorted((min(p), max(p)) for p in pairs)]


def store_expectations(store: Store) -> dict[str, FileExpectations]:
    """What ``store`` keeps of the files of its name (by :func:`file_key`): every expectation and problem of
    its entries (:meth:`Store.entries <ggaudit.stores.registry.Store.entries>`); none for a store that keeps
    none."""
    return by_file(store.entries())
