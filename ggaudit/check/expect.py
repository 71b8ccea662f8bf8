"""The expectation: the digest each file of a target should have, as its store (or the user) publishes it.

Read from :mod:`ggaudit.stores` (descriptions only, never a model's bytes): an Ollama layer's sha256, a
Hugging Face blob's name (its sha256) or a ``--local-dir`` download's etag, GPT4All's catalogue md5, a
content-addressed blob's own name, a checksum file's line, ``--sha256``. LM Studio keeps none.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from functools import singledispatch

from ..errors import UsageError
from ..stores.gpt4all import GPT4AllStore
from ..stores.hf_cache import HFStore, read_hf_snapshot
from ..stores.hf_local import HFLocalStore
from ..stores.ollama import OllamaStore, ollama_blob_path
from ..stores.registry import Store
from ..stores.sums import read_sums
from ..verify.walk.sums import blob_name_digest
from .decide import PUBLISHED, Expectation
from .options import CheckOptions

#: Published digests by file (the key of :func:`file_key`).
Published = dict[str, Expectation]


def file_key(path: str | os.PathLike[str]) -> str:
    """One name for a file however it was reached (a snapshot's link, ``./``, another case on Windows)."""
    return os.path.normcase(os.path.realpath(path))


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
    found = store_digests(store) if store is not None else {}
    for path in files:
        named = blob_name_digest(path)
        if named is not None:
            found.setdefault(file_key(path), _sha256(named, "the sha256 its file name gives (a content-addressed "
                                                            "blob)"))
    return found


def _sha256(digest: str, what: str) -> Expectation:
    return Expectation(algorithm="sha256", digest=digest.lower(), source=PUBLISHED, what=what)


@singledispatch
def store_digests(store: Store) -> Published:
    """What ``store`` keeps of its files' digests; none for a store that keeps none (LM Studio)."""
    return {}


@store_digests.register
def _(store: OllamaStore) -> Published:
    manifest = store.expectations()
    return {file_key(ollama_blob_path(manifest.store, layer.digest)):
            _sha256(layer.digest, f"the Ollama manifest's digest of its {layer.subject} layer")
            for layer in manifest.model_layers()}


@store_digests.register
def _(store: HFStore) -> Published:
    repo = store.name.partition(":")[0]
    snapshot = read_hf_snapshot(repo, store.roots.hf_cache)
    return {file_key(f.link): _digest(f.algorithm, f.expected, "the Hugging Face cache's blob name")
            for f in snapshot.files if f.problem is None and f.algorithm and f.expected}


@store_digests.register
def _(store: HFLocalStore) -> Published:
    return {file_key(f.path): _digest(f.algorithm, f.expected, "the etag of its Hugging Face download metadata")
            for f in store.expectations().files
            if f.problem is None and not f.stale and f.algorithm and f.expected}


@store_digests.register
def _(store: GPT4AllStore) -> Published:
    found = store.expectations()
    return {file_key(e.path): _digest("md5", listed.md5, "GPT4All's model list's md5")
            for e in found.folder.files if e.problem is None
            and (listed := found.listed.get(os.path.basename(e.name))) is not None and listed.md5}


def _digest(algorithm: str | None, digest: str | None, what: str) -> Expectation:
    assert algorithm is not None and digest is not None     # filtered by the callers
    return Expectation(algorithm=algorithm, digest=digest.lower(), source=PUBLISHED, what=what)

