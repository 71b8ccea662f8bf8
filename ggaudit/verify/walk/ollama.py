"""The Ollama store by name, for callers that name it: a model (``ollama:NAME``) and the whole store
(``ollama:*``), each the store's own listing through the one walker (:mod:`.listing`)."""

from __future__ import annotations

import os

from ...io.fan_out import Progress
from ...stores.ollama import OllamaStore
from ...stores.registry import Roots
from ..cache import DigestCache
from ..report import VerifyReport
from .listing import verify_listing


def verify_ollama(name: str, store: str | os.PathLike[str] | None = None, *,
                  fail_fast: bool = False, partials: bool = True, progress: Progress | None = None,
                  digest_cache: DigestCache | None = None) -> VerifyReport:
    """Check every layer and the config of an Ollama model (:meth:`OllamaStore.listing`). ``partials``:
    warn about the store's stray ``-partial`` downloads. ``progress(done, total)``: bytes hashed (or found
    in the digest cache) of the bytes to hash; ``digest_cache``: the digest cache, or None."""
    listing = OllamaStore(name, Roots(store), partials=partials).listing()
    return verify_listing(listing, fail_fast=fail_fast, progress=progress, digest_cache=digest_cache)


def verify_ollama_store(store: str | os.PathLike[str] | None = None, *, layers: bool = True,
                        fail_fast: bool = False, progress: Progress | None = None,
                        digest_cache: DigestCache | None = None) -> VerifyReport:
    """The whole Ollama store (``ollama:*``): every layer of every model (``layers``), and each blob no
    manifest names, as an ``orphan`` mismatch."""
    listing = OllamaStore(OllamaStore.EVERY_MODEL, Roots(store), layers=layers).listing()
    return verify_listing(listing, fail_fast=fail_fast, progress=progress, digest_cache=digest_cache)
