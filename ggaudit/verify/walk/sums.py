"""Files against digests given for them: a sha256 checksum file's lines, a blob's own name, one sha256."""

from __future__ import annotations

import os
from pathlib import Path

from ...errors import NothingChecked, Param, UsageError
from ...io.fan_out import Progress
from ...stores.expected import file_key, given_expectation, named_expectations, sums_entries
from ...stores.sums import read_sums
from ..cache import DigestCache
from ..collect import Collector, check_digest, finish
from ..report import VerifyReport
from .listing import check_listed


def verify_sums(sums: str | os.PathLike[str], *, ignore_missing: bool = False,
                base: str | os.PathLike[str] | None = None, fail_fast: bool = False,
                progress: Progress | None = None, digest_cache: DigestCache | None = None) -> VerifyReport:
    """Check every file a sha256 checksum file names (GNU, BSD --tag or OpenSSL format).

    Names resolve under ``base`` (default: the checksum file's folder) and never leave it. With
    ``ignore_missing`` (``sha256sum -c --ignore-missing``) an absent file is skipped, not a mismatch;
    a file naming only absent files is then NothingChecked. ``digest_cache``: the digest cache, or None.
    """
    out = Collector(fail_fast, digest_cache, progress=progress)
    entries = sums_entries(read_sums(sums, base))       # what check expects of each file too
    out.plan(e.read for e in entries if e.problem is None)
    skipped = 0
    for entry in entries:
        if out.full:
            break
        # A link out of the folder or a loop is one entry, its mismatch: never opened.
        if entry.problem is None and ignore_missing and not os.path.exists(entry.read):
            skipped += 1
        else:
            check_listed(entry, out)
    if skipped and skipped == len(entries):
        raise NothingChecked(sums, ("no file it names is present (", Param("ignore_missing", "True"),
                                    "): no file was verified"), field="ignore_missing")
    if skipped:
        out.warnings.append(f"{skipped} of {len(entries)} files named are absent, skipped (--ignore-missing)")
    return finish(out, os.fspath(sums), "sums", empty="no file it names was checked")


def verify_blob(path: str | os.PathLike[str], *, progress: Progress | None = None,
                digest_cache: DigestCache | None = None) -> VerifyReport:
    """Check a content-addressed blob (Ollama or Hugging Face) against the digest its name gives (the name
    of the file a link leads to, then the link's own if it gives another): what check expects of it too."""
    named = named_expectations([path]).get(file_key(path))
    if named is None:
        raise UsageError(path, ("the file name holds no sha256; give ", Param("manifest"), ", ", Param("sums"),
                                ", ollama:NAME or hf:ORG/NAME to say what to check it against"))
    out = Collector(False, digest_cache, progress=progress)
    out.plan([path])
    for expected in named.expected:
        check_digest(Path(path), "blob name", expected.digest, out)
    return finish(out, os.fspath(path), "blob", empty="the blob was not checked")


def verify_sha256(path: str | os.PathLike[str], sha256: str, *, progress: Progress | None = None,
                  digest_cache: DigestCache | None = None) -> VerifyReport:
    """Check one file against a sha256 given as 64 hex digits (any case)."""
    expected = given_expectation(sha256)
    out = Collector(False, digest_cache, progress=progress)
    out.plan([path])
    check_digest(Path(path), "--sha256", expected.digest, out)
    return finish(out, os.fspath(path), "file", empty="the file was not checked")
