"""Hugging Face's two layouts, offline: a cache snapshot (``hf:ORG/NAME[@REV]``: each file against its
blob's name) and a ``huggingface-cli download --local-dir`` folder (``hf-local:DIR``: each file against the
etag its download metadata keeps, sha256 or git's blob sha1)."""

from __future__ import annotations

import os

from ...io import Progress
from ...stores.expected import WARNING
from ...stores.hf_cache import hf_entries, read_hf_snapshot
from ...stores.hf_local import LocalDownload, hf_local_entries, read_hf_local
from ..cache import DigestCache
from ..collect import Collector, check_entry, finish, problem_mismatch
from ..report import VerifyReport


def verify_hf(spec: str, cache: str | os.PathLike[str] | None = None, *,
              fail_fast: bool = False, progress: Progress | None = None,
              digest_cache: DigestCache | None = None) -> VerifyReport:
    """Check every file of a cached Hugging Face snapshot against its blob's name, offline."""
    snapshot = read_hf_snapshot(spec, cache)
    entries = hf_entries(snapshot)      # what check expects of each file too
    out = Collector(fail_fast, digest_cache, progress=progress)
    out.plan(e.read for e in entries if e.problem is None)
    done: set[str] = set()              # a blob several links name is read once, said once
    for entry in entries:
        if out.full:
            break
        if entry.problem is not None:
            out.mismatches.append(problem_mismatch(entry))
        elif entry.read not in done:
            done.add(entry.read)
            check_entry(entry, out)
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
    entries = hf_local_entries(download)        # what check expects of each file too
    out = Collector(fail_fast, digest_cache, progress=progress)
    out.plan(e.read for e in entries if e.problem is None)
    for entry in entries:
        if out.full:
            break
        if entry.problem is not None and entry.problem.kind == WARNING:
            out.warnings.append(f"{entry.path}: {entry.problem.detail}")
        elif entry.problem is not None:
            out.mismatches.append(problem_mismatch(entry))
        elif entry.expected is not None:
            if entry.expected.note is not None:      # modified after its download: said, and still checked
                out.warnings.append(f"{entry.path}: {entry.expected.note}")
            check_entry(entry, out)
    out.warnings.extend(f"leftover of an interrupted download: {os.fspath(p)}" for p in download.incomplete)
    return finish(out, os.fspath(folder), "hf-local", empty=_local_empty(download))


def _local_empty(download: LocalDownload) -> str:
    """Why a ``--local-dir`` folder checked nothing, in words."""
    if not download.files:
        return "the folder holds no downloaded file"
    count = len(download.files)
    return f"none of its {count} file{'s' if count > 1 else ''} has download metadata giving a digest"
