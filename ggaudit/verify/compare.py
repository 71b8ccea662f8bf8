"""The one comparison of verify: a map of what things should be against a map of what was found.

Two maps in, differences out, and nothing read or opened: as huggingface_hub's ``verify_maps``
(``huggingface_hub/utils/_verification.py``) compares a repository's expected files with a local folder's.
A walker (:mod:`ggaudit.verify.walk`) gathers the facts (a store's digests and sizes, a manifest's, the
file's own), this module says which differ, and the walker says so in its words (a :class:`Mismatch`).
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from typing import Generic, Literal, TypeVar

__all__ = ["Difference", "Facts", "compare_facts", "compare_maps"]

K = TypeVar("K", bound=Hashable)

#: What differs: a key expected and not found (missing), found and not expected (extra), or a fact of both.
DifferenceKind = Literal["missing", "extra", "size", "layout", "digest"]


@dataclass(frozen=True, kw_only=True)
class Facts:
    """What is known of one thing (a file, a tensor): what it should be, or what was found. A fact that
    is None is not known and not compared. ``layout``: its shape in words (a tensor's type, shape and
    rows); when layouts differ the digests are not compared, since digests of differently laid out
    bytes say nothing more."""

    size: int | None = None
    layout: str | None = None
    digest: str | None = None


@dataclass(frozen=True, kw_only=True)
class Difference(Generic[K]):
    """One thing that differs: its key, what, and the expected and the found fact (None for the side a
    missing or extra key lacks; for missing and extra, the facts are those of the side that has it)."""

    key: K
    kind: DifferenceKind
    expected: int | str | None = None
    actual: int | str | None = None


def compare_facts(key: K, expected: Facts, actual: Facts) -> list[Difference[K]]:
    """How ``actual`` differs from ``expected``: size, then layout, then (layouts alike) digest; a fact
    either side does not know is not compared."""
    found: list[Difference[K]] = []
    if expected.size is not None and actual.size is not None and expected.size != actual.size:
        found.append(Difference(key=key, kind="size", expected=expected.size, actual=actual.size))
    if expected.layout is not None and actual.layout is not None and expected.layout != actual.layout:
        found.append(Difference(key=key, kind="layout", expected=expected.layout, actual=actual.layout))
        return found
    if expected.digest is not None and actual.digest is not None and expected.digest != actual.digest:
        found.append(Difference(key=key, kind="digest", expected=expected.digest, actual=actual.digest))
    return found


def compare_maps(expected: Mapping[K, Facts], actual: Mapping[K, Facts]) -> list[Difference[K]]:
    """Every difference between the two maps: per key of ``expected``, in its order, ``missing`` (not in
    ``actual``) or how its facts differ; then each key of ``actual`` that ``expected`` lacks, in its
    order, as ``extra``."""
    found: list[Difference[K]] = []
    for key, want in expected.items():
        have = actual.get(key)
        if have is None:
            found.append(Difference(key=key, kind="missing", expected=want.digest))
        else:
            found.extend(compare_facts(key, want, have))
    found.extend(Difference(key=key, kind="extra", actual=have.digest) for key, have in actual.items()
                 if key not in expected)
    return found
