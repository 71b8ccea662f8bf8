"""The one walker of every store: what a store lists of a name (:class:`~ggaudit.stores.listing.StoreListing`),
checked in its order: each file against the digest (and size) it should have, what the store says is wrong
with one as its mismatch, a file with neither for its GGUF structure, and the warnings where the listing
puts them. A store says what to check; this says nothing of any store."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

from ...errors import FormatError
from ...format.layout import open_gguf
from ...io.fan_out import Progress
from ...stores.listing import ORPHAN, WARNING, Said, StoreEntry, StoreListing
from ..cache import DigestCache
from ..collect import Collector, check_entry, finish, problem_mismatch, regular_file
from ..report import Checked, Mismatch, VerifyReport


def verify_listing(listing: StoreListing, *, fail_fast: bool = False, progress: Progress | None = None,
                   digest_cache: DigestCache | None = None) -> VerifyReport:
    """Check what ``listing`` lists, in its order (``fail_fast``: stop checking files at the first mismatch;
    its warnings are said all the same), and report it as the listing names it. NothingChecked when
    nothing was checked (:func:`~ggaudit.verify.collect.finish`): the listing's ``empty`` says why."""
    out = Collector(fail_fast, digest_cache, progress=progress)
    out.plan(e.read for e in listing.entries() if e.problem is None and e.expected is not None)
    done: set[str] = set()
    for item in listing.items:
        if isinstance(item, Said):
            out.warnings.append(item.warning)
        elif out.full or (listing.once and item.problem is None and item.read in done):
            continue
        else:
            if item.problem is None:
                done.add(item.read)
            check_listed(item, out)
    out.warnings.extend(listing.warnings)
    return finish(out, listing.subject, listing.kind, empty=listing.empty, looked_at=listing.looked_at)


def check_listed(entry: StoreEntry, out: Collector) -> None:
    """One entry as its store lists it: what is wrong with it (a warning, or its mismatch: an orphan spanning
    the whole file), else its digest (a note on it said first), else its structure."""
    if entry.problem is not None and entry.problem.kind == WARNING:
        out.warnings.append(f"{entry.path}: {entry.problem.detail}")
    elif entry.problem is not None and entry.problem.kind == ORPHAN:
        out.mismatches.append(_whole_file(problem_mismatch(entry)))
    elif entry.problem is not None:
        out.mismatches.append(problem_mismatch(entry))
    elif entry.expected is not None:
        if entry.expected.note is not None:      # modified after its download: said, and still checked
            out.warnings.append(f"{entry.path}: {entry.expected.note}")
        check_entry(entry, out)
    else:
        _check_structure(Path(entry.read), entry.subject, out)


def _whole_file(mismatch: Mismatch) -> Mismatch:
    """``mismatch`` spanning its whole file, as it is now (no span if it cannot be looked at)."""
    try:
        size: int | None = os.lstat(mismatch.path).st_size
    except OSError:
        size = None
    return replace(mismatch, offset=None if size is None else 0, length=size)


def _check_structure(path: Path, subject: str, out: Collector) -> None:
    """The file opens as GGUF: its header parses and it holds every tensor's data (a ``header`` mismatch
    at the offending offset otherwise)."""
    identity = regular_file(path, subject, "", out)
    if identity is None:
        return
    try:
        open_gguf(path)
    except FormatError as err:
        out.mismatches.append(Mismatch(kind="header", path=os.fspath(path), subject=subject, offset=err.offset,
                                       detail=err.message))
        return
    out.checked.append(Checked(path=os.fspath(path), subject=subject, algorithm="gguf-layout", digest="",
                               size=identity.size, ok=True))
