"""Hugging Face's two layouts, offline: a cache snapshot (``hf:ORG/NAME[@REV]``: each file against its
blob's name) and a ``huggingface-cli download --local-dir`` folder (``hf-local:DIR``: each file against the
etag its download metadata keeps, sha256 or git's blob sha1)."""

from __future__ import annotations

import os
from pathlib import Path

from ...io import Progress
from ...stores.hf_cache import read_hf_snapshot
from ...stores.hf_local import LocalDownload, read_hf_local
from ..cache import DigestCache
from ..collect import Collector, check_digest, finish
from ..report import Mismatch, VerifyReport


def verify_hf(spec: str, cache: str | os.PathLike[str] | None = None, *,
              fail_fast: bool = False, progress: Progress | None = None,
              digest_cache: DigestCache | None = None) -> VerifyReport:
    """Check every file of a cached Hugging Face snapshot against its blob's name, offline."""
    snapshot = read_hf_snapshot(spec, cache)
    out = Collector(fail_fast, digest_cache, progress=progress)
    out.plan(e.blob for e in snapshot.files if e.problem is None and e.blob is not None and e.expected is not None)
    done: set[Path] = set()
    for entry in snapshot.files:
        if out.full:
            break
        if entry.problem is not None:
            out.mismatches.append(Mismatch(kind="link", path=os.fspath(entry.link), subject=entry.name,
                                           detail=entry.problem))
        elif entry.blob not in done and entry.blob is not None and entry.expected is not None:
            done.add(entry.blob)
            check_digest(entry.blob, entry.name, entry.expected, out, algorithm=entry.algorithm or "")
    out.warnings.extend(f"leftover of an interrupted download: {os.fspath(p)}" for p in snapshot.incomplete)
    return finish(out, f"{snapshot.spec.repo_id}@{snapshot.commit}", "hf", empty="the snapshot holds no file")


def verify_hf_local(folder: str | os.PathLike[str], *, fail_fast: bool = False,
                    progress: Progress | None = None, digest_cache: DigestCache | None = None) -> VerifyReport:
    """Check a ``huggingface-cli download --local-dir`` folder against its download metadata, offline.

    Each file whose metadata holds a digest etag (sha256 for LFS files, git's blob sha1 for the others)
    is hashed; a file modified after its metadata was written, and one with no usable metadata, is a
    warning; a file the metadata names that is absent is a ``missing`` mismatch.
    """
    download = read_hf_local(folder)
    out = Collector(fail_fast, digest_cache, progress=progress)
    out.plan(e.path for e in download.files + download.absent
             if not e.linked_out and e.problem is None and e.expected is not None)
    for entry in download.files + download.absent:
        if out.full:
            break
        if entry.linked_out:
            out.mismatches.append(Mismatch(kind="link", path=os.fspath(entry.path), subject=entry.name,
                                           detail=entry.problem or ""))
        elif entry.problem is not None:
            out.warnings.append(f"{os.fspath(entry.path)}: {entry.problem}")
        elif entry.expected is not None:
            if entry.stale:
                out.warnings.append(f"{os.fspath(entry.path)}: modified after it was downloaded (mtime later "
                                    "than its download metadata)")
            check_digest(entry.path, entry.name, entry.expected, out, algorithm=entry.algorithm or "sha256")
    out.warnings.extend(f"leftover of an interrupted download: {os.fspath(p)}" for p in download.incomplete)
    return finish(out, os.fspath(folder), "hf-local", empty=_local_empty(download))


def _local_empty(download: LocalDownload) -> str:
    """Why a ``--local-dir`` folder checked nothing, in words."""
    if not download.files:
        return "the folder holds no downloaded file"
    count = len(download.files)
    return f"none of its {count} file{'s' if count > 1 else ''} has download metadata giving a digest"
