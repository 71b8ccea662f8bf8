"""Files against digests given for them: a sha256 checksum file's lines, a blob's own name, one sha256."""

from __future__ import annotations

import os
import re
from pathlib import Path

from ...errors import NothingChecked, UsageError
from ...io import Progress
from ...stores.published import blob_name_digest
from ...stores.sums import read_sums
from ...untrusted import quote
from ..cache import DigestCache
from ..collect import Collector, check_digest, finish
from ..report import Mismatch, VerifyReport

_HEX64 = re.compile(r"[0-9a-fA-F]{64}")


def verify_sums(sums: str | os.PathLike[str], *, ignore_missing: bool = False,
                base: str | os.PathLike[str] | None = None, fail_fast: bool = False,
                progress: Progress | None = None, digest_cache: DigestCache | None = None) -> VerifyReport:
    """Check every file a sha256 checksum file names (GNU, BSD --tag or OpenSSL format).

    Names resolve under ``base`` (default: the checksum file's folder) and never leave it. With
    ``ignore_missing`` (``sha256sum -c --ignore-missing``) an absent file is skipped, not a mismatch;
    a file naming only absent files is then NothingChecked. ``digest_cache``: the digest cache, or None.
    """
    out = Collector(fail_fast, digest_cache, progress=progress)
    entries = read_sums(sums, base)
    out.plan(e.path for e in entries if e.problem is None)
    skipped = 0
    for entry in entries:
        if out.full:
            break
        if entry.problem is not None:    # a link out of the folder or a loop: one entry, never opened
            out.mismatches.append(Mismatch(kind="link", path=os.fspath(entry.path), subject=entry.name,
                                           expected=entry.sha256, detail=f"line {entry.line}: {entry.problem}"))
        elif ignore_missing and not os.path.exists(entry.path):
            skipped += 1
        else:
            check_digest(entry.path, entry.name, entry.sha256, out)
    if skipped and skipped == len(entries):
        raise NothingChecked(sums, "no file it names is present (--ignore-missing): no file was verified",
                             field="ignore_missing")
    if skipped:
        out.warnings.append(f"{skipped} of {len(entries)} files named are absent, skipped (--ignore-missing)")
    return finish(out, os.fspath(sums), "sums", empty="no file it names was checked")


def verify_blob(path: str | os.PathLike[str], *, progress: Progress | None = None,
                digest_cache: DigestCache | None = None) -> VerifyReport:
    """Check a content-addressed blob (Ollama or Hugging Face) against the digest in its name."""
    expected = blob_name_digest(path)
    if expected is None:
        raise UsageError(path, "the file name holds no sha256; give --manifest, --sums, ollama:NAME "
                         "or hf:ORG/NAME to say what to check it against")
    out = Collector(False, digest_cache, progress=progress)
    out.plan([path])
    check_digest(Path(path), "blob name", expected, out)
    return finish(out, os.fspath(path), "blob", empty="the blob was not checked")


def verify_sha256(path: str | os.PathLike[str], sha256: str, *, progress: Progress | None = None,
                  digest_cache: DigestCache | None = None) -> VerifyReport:
    """Check one file against a sha256 given as 64 hex digits (any case)."""
    if not isinstance(sha256, str) or not _HEX64.fullmatch(sha256):
        shown = quote(sha256) if isinstance(sha256, str) else type(sha256).__name__
        raise UsageError(None, f"{shown} is not a sha256: 64 hex digits", field="sha256")
    out = Collector(False, digest_cache, progress=progress)
    out.plan([path])
    check_digest(Path(path), "--sha256", sha256.lower(), out)
    return finish(out, os.fspath(path), "file", empty="the file was not checked")
