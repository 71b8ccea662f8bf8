"""The expectations: every digest each file of a target should have, from every source in play at once
(``--sha256``, ``--sums``, the target's store, a blob's own name) and what the store says is wrong with it,
all from :mod:`ggaudit.stores.expected`, where ``verify`` takes its own: so the two cannot disagree.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..errors import Param, UsageError
from ..stores.expected import (FileExpectations, file_key, given_expectation, merged, named_expectations,
                               store_expectations, sums_expectations)
from ..stores.registry import Store
from .options import CheckOptions

__all__ = ["expectations_for", "file_key"]


def expectations_for(store: Store | None, files: Sequence[str], options: CheckOptions) -> dict[str, FileExpectations]:
    """Everything in play for each of ``files`` (by :func:`file_key`; every file, its ``expected`` empty when
    no source has one): ``--sha256``, then each ``--sums`` line naming it, then what the store keeps of it,
    then the sha256 its blob's name gives, each kept with its source (the user's first: they decide first).
    ``--sha256`` is one file's digest: a UsageError for a target of several files."""
    if options.sha256 is not None and len(files) != 1:
        raise UsageError(None, (f"is one file's digest, and the target has {len(files)} files: check each "
                                "file on its own, or give ", Param("sums")), field="sha256")
    given = {} if options.sha256 is None else {
        file_key(files[0]): FileExpectations(path=files[0], expected=(given_expectation(options.sha256),))}
    sums = {} if options.sums is None else sums_expectations(options.sums, files)
    found = merged(given, sums, store_expectations(store) if store is not None else {}, named_expectations(files))
    return {key: FileExpectations(path=path, expected=found[key].expected if key in found else (),
                                  problems=found[key].problems if key in found else ())
            for key, path in {file_key(f): f for f in files}.items()}
