"""The expectation: the digest each file of a target should have, as its store (or the user) publishes it:
``--sha256``, a checksum file's line (``--sums``), else what :mod:`ggaudit.stores.published` finds.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from ..errors import UsageError
from ..stores.published import PublishedDigest, file_key, named_digests, store_digests
from ..stores.registry import Store
from ..stores.sums import read_sums
from .decide import PUBLISHED, Expectation
from .options import CheckOptions

__all__ = ["Published", "file_key", "published_digests"]

#: Published digests by file (the key of :func:`file_key`).
Published = dict[str, Expectation]


def published_digests(store: Store | None, files: Sequence[str], options: CheckOptions) -> Published:
    """The digest each of ``files`` should have (those with none are left out): ``--sha256`` or ``--sums``
    when given, else what the target's store keeps, else a blob's own name."""
    if options.sha256 is not None:
        if len(files) != 1:
            raise UsageError(None, f"is one file's digest, and the target has {len(files)} files: check each "
                                   "file on its own, or give --sums", field="sha256")
        return {file_key(files[0]): _sha256(options.sha256, "the sha256 given (--sha256)")}
    if options.sums is not None:
        return {file_key(e.path): _sha256(e.sha256, f"the checksum file's line {e.line}")
                for e in read_sums(options.sums) if e.problem is None and os.path.exists(e.path)}
    found = {**named_digests(files), **(store_digests(store) if store is not None else {})}
    return {key: _expectation(digest) for key, digest in found.items()}


def _sha256(digest: str, what: str) -> Expectation:
    return Expectation(algorithm="sha256", digest=digest.lower(), source=PUBLISHED, what=what)


def _expectation(p: PublishedDigest) -> Expectation:
    return Expectation(algorithm=p.algorithm, digest=p.digest, source=PUBLISHED, what=p.what)
