"""The one digest ``rows`` decides a disputed row by: the first of what :mod:`.expected` finds of a file (its
store's, else the sha256 its blob's name gives), or a sha256 the user gives. A whole file's digest decides
rows only as a whole, so one is enough here; ``check`` and ``verify`` take every expectation from
:mod:`.expected` itself.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from .expected import BLOB_NAME, Expected, blob_name_digest, file_key, given_expectation, merged, named_expectations
from .expected import store_expectations
from .registry import Roots, find_store

__all__ = ["BLOB_NAME", "PublishedDigest", "blob_name_digest", "file_key", "given_sha256", "published_digest"]


@dataclass(frozen=True, kw_only=True)
class PublishedDigest:
    """A whole file's digest as published: ``algorithm`` (sha256, md5), ``digest`` (lowercase hex) and
    ``what`` gives it, in words (``the Ollama manifest's digest of its model layer``)."""

    algorithm: str
    digest: str
    what: str

    @classmethod
    def of(cls, expected: Expected) -> PublishedDigest:
        return cls(algorithm=expected.algorithm, digest=expected.digest, what=expected.what)


def given_sha256(text: str, field: str) -> PublishedDigest:
    """A sha256 the user gives (``--sha256``): 64 hex digits, any case; else a UsageError naming *field*."""
    return PublishedDigest.of(given_expectation(text, field=field))


def published_digest(target: str | os.PathLike[str] | None, path: str,
                     roots: Roots | None = None) -> PublishedDigest | None:
    """What is published of *path*, a file of the model *target* names (a store name, or a path; None: only
    *path* is known): its store's digest, else the sha256 its (or its link's target's) name gives."""
    store = None if target is None else find_store(os.fspath(target), roots or Roots())
    found = merged(store_expectations(store) if store is not None else {}, named_expectations([path]))
    expected = found.get(file_key(path))
    return PublishedDigest.of(expected.expected[0]) if expected is not None and expected.expected else None
