"""The digest each file of a model should have, as its publisher gives it: an Ollama layer's sha256, a Hugging
Face blob's name (its sha256) or a ``--local-dir`` download's etag, GPT4All's catalogue md5, a
content-addressed blob's own name. LM Studio keeps none. Read from the stores' descriptions only, never a
model's bytes; ``check`` compares whole files with them, ``rows`` decides a disputed row by them.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import singledispatch

from ..errors import UsageError
from ..untrusted import quote
from .gpt4all import GPT4AllStore
from .hf_cache import HFStore, read_hf_snapshot
from .hf_local import HFLocalStore
from .ollama import OllamaStore, ollama_blob_path
from .registry import Roots, Store, find_store
from .small_files import HEX64

__all__ = ["BLOB_NAME", "PublishedDigest", "blob_name_digest", "file_key", "given_sha256", "named_digests",
           "published_digest", "store_digests"]

#: A content-addressed blob's name (Ollama's ``sha256-<hex>``, the older ``sha256:<hex>``, Hugging Face's
#: ``<hex>``): the sha256 it promises.
BLOB_NAME = re.compile(r"(?:sha256[-:])?([0-9a-fA-F]{64})")


@dataclass(frozen=True, kw_only=True)
class PublishedDigest:
    """A whole file's digest as published: ``algorithm`` (sha256, md5), ``digest`` (lowercase hex) and
    ``what`` gives it, in words (``the Ollama manifest's digest of its model layer``)."""

    algorithm: str
    digest: str
    what: str


def given_sha256(text: str, field: str) -> PublishedDigest:
    """A sha256 the user gives (``--sha256``): 64 hex digits, any case; else a UsageError naming *field*."""
    if not HEX64.fullmatch(text):
        raise UsageError(None, f"{quote(text)} is not a sha256: 64 hex digits", field=field)
    return PublishedDigest(algorithm="sha256", digest=text.lower(), what="the sha256 given (--sha256)")


def file_key(path: str | os.PathLike[str]) -> str:
    """One name for a file however it was reached (a snapshot's link, ``./``, another case on Windows)."""
    return os.path.normcase(os.path.realpath(path))


def blob_name_digest(path: str | os.PathLike[str]) -> str | None:
    """The sha256 a file's own name promises (``sha256-<hex>``, ``sha256:<hex>``, ``<hex>``), if any."""
    match = BLOB_NAME.fullmatch(os.path.basename(os.fspath(path)))
    return match[1].lower() if match else None


def published_digest(target: str | os.PathLike[str] | None, path: str,
                     roots: Roots | None = None) -> PublishedDigest | None:
    """What is published of *path*, a file of the model *target* names (a store name, or a path; None: only
    *path* is known): its store's digest, else the sha256 its (or its link's target's) name gives."""
    store = None if target is None else find_store(os.fspath(target), roots or Roots())
    found = store_digests(store) if store is not None else {}
    return found.get(file_key(path)) or named_digests([path]).get(file_key(path))


def named_digests(paths: Sequence[str]) -> dict[str, PublishedDigest]:
    """The sha256 each content-addressed blob of *paths* promises by its name (by :func:`file_key`)."""
    found = {}
    for path in paths:
        named = blob_name_digest(file_key(path)) or blob_name_digest(path)
        if named is not None:
            found[file_key(path)] = _digest("sha256", named, "the sha256 its file name gives (a content-addressed "
                                                             "blob)")
    return found


@singledispatch
def store_digests(store: Store) -> dict[str, PublishedDigest]:
    """What ``store`` keeps of its files' digests (by :func:`file_key`); none for a store that keeps none."""
    return {}


@store_digests.register
def _(store: OllamaStore) -> dict[str, PublishedDigest]:
    manifest = store.expectations()
    return {file_key(ollama_blob_path(manifest.store, layer.digest)):
            _digest("sha256", layer.digest, f"the Ollama manifest's digest of its {layer.subject} layer")
            for layer in manifest.model_layers()}


@store_digests.register
def _(store: HFStore) -> dict[str, PublishedDigest]:
    repo = store.name.partition(":")[0]
    snapshot = read_hf_snapshot(repo, store.roots.hf_cache)
    return {file_key(f.link): _digest(f.algorithm, f.expected, "the Hugging Face cache's blob name")
            for f in snapshot.files if f.problem is None and f.algorithm and f.expected}


@store_digests.register
def _(store: HFLocalStore) -> dict[str, PublishedDigest]:
    return {file_key(f.path): _digest(f.algorithm, f.expected, "the etag of its Hugging Face download metadata")
            for f in store.expectations().files
            if f.problem is None and not f.stale and f.algorithm and f.expected}


@store_digests.register
def _(store: GPT4AllStore) -> dict[str, PublishedDigest]:
    found = store.expectations()
    return {file_key(e.path): _digest("md5", listed.md5, "GPT4All's model list's md5")
            for e in found.folder.files if e.problem is None
            and (listed := found.listed.get(os.path.basename(e.name))) is not None and listed.md5}


def _digest(algorithm: str | None, digest: str | None, what: str) -> PublishedDigest:
    assert algorithm is not None and digest is not None     # filtered by the callers
    return PublishedDigest(algorithm=algorithm, digest=digest.lower(), what=what)
