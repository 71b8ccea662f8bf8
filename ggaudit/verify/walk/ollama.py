"""The Ollama store: a model's layers against its manifest (``ollama:NAME``), and the whole store
(``ollama:*``), whose blobs no manifest names are orphans."""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from dataclasses import replace
from pathlib import Path

from ...errors import ManifestError, NothingChecked
from ...io import Progress
from ...stores.expected import BLOB_NAME, StoreEntry
from ...stores.ollama import (OllamaManifest, list_ollama_models, ollama_blobs, ollama_entries, ollama_orphans,
                              ollama_partial_files, read_ollama_manifest)
from ..cache import DigestCache
from ..collect import Collector, check_entry, finish, problem_mismatch
from ..report import Mismatch, VerifyReport


def verify_ollama(name: str, store: str | os.PathLike[str] | None = None, *,
                  fail_fast: bool = False, partials: bool = True, progress: Progress | None = None,
                  digest_cache: DigestCache | None = None) -> VerifyReport:
    """Check every layer (of any kind: model, projector, tensor, draft, ...) and the config of an Ollama
    model: present, right size, right sha256. A model without an ``image.model`` layer is checked by the
    layers it has. ``partials``: warn about the store's stray ``-partial`` downloads. ``progress(done,
    total)``: bytes hashed (or found in the digest cache) of the bytes to hash, as in every verify_*;
    ``digest_cache``: the digest cache, or None.
    A manifest listing no layer is NothingChecked: its config alone is no model."""
    manifest = read_ollama_manifest(name, store)
    if not manifest.layers:
        raise NothingChecked(manifest.path, f"{_NO_LAYERS.format(name=manifest.name)}; nothing was checked")
    out = Collector(fail_fast, digest_cache, progress=progress)
    entries = ollama_entries(manifest)
    out.plan(e.read for e in entries if e.problem is None)
    _check_entries(entries, out)
    if partials:
        _warn_partials(manifest.store, {layer.digest for layer in manifest.blobs}, out)
    return finish(out, str(manifest.name), "ollama", empty="its manifest names no blob")


#: An Ollama manifest whose ``layers`` is empty: what verify says of it.
_NO_LAYERS = "model {name} lists no layers"


def _check_entries(entries: Iterable[StoreEntry], out: Collector) -> None:
    """Check each blob of a manifest as the store lists it (:func:`ollama_entries`: what check expects of it
    too). Each layer is reported, but 200k layers naming one blob cost one read (the digest memo), not 200k."""
    for entry in entries:
        if out.full:
            break
        if entry.problem is not None:     # a blob linking out of the store: reported, not followed
            out.mismatches.append(problem_mismatch(entry))
        else:
            check_entry(entry, out)


def _blob_paths(manifests: Iterable[OllamaManifest]) -> Iterator[str]:
    """The blob of each layer of ``manifests`` that stays in the store (for the progress, which counts each once)."""
    for manifest in manifests:
        yield from (e.read for e in ollama_entries(manifest) if e.problem is None)


def _warn_partials(store: Path, ours: set[str], out: Collector, whose: str = "this model") -> None:
    for partial in ollama_partial_files(store):
        digest = BLOB_NAME.match(partial.name)     # sha256-<hex>-partial: the name starts as a blob's
        mine = f" (a blob of {whose})" if digest and digest[1].lower() in ours else ""
        out.warnings.append(f"stray partial download: {os.fspath(partial)}{mine}")


def verify_ollama_store(store: str | os.PathLike[str] | None = None, *, layers: bool = True,
                        fail_fast: bool = False, progress: Progress | None = None,
                        digest_cache: DigestCache | None = None) -> VerifyReport:
    """The whole Ollama store (``ollama:*``): every layer of every model (``layers``; subjects begin with
    the model's name), and each blob no manifest names, as an ``orphan`` mismatch. A manifest that cannot
    be read is a warning (its blobs may then be listed as orphans); stray partial downloads too; and a
    manifest listing no layer. A store in which no model lists layers (and, with ``layers`` False, that
    holds no blob to search for orphans) is NothingChecked."""
    listing = list_ollama_models(store)
    out = Collector(fail_fast, digest_cache, progress=progress)
    out.warnings.extend(listing.skipped)
    if layers and out.tally.active:
        out.plan(_blob_paths(_readable_manifests(listing.names, listing.store)))
    referenced: set[str] = set()
    models = 0      # with layers: each is checked (here, or as its own target of ollama:*)
    for name in listing.names:
        try:
            manifest = read_ollama_manifest(name, listing.store)
        except ManifestError as err:
            out.warnings.append(f"manifest of {name} unreadable, its blobs may show as orphans: {err}")
            continue
        referenced.update(layer.digest for layer in manifest.blobs)
        if not manifest.layers:     # without layers, the model's own target says so
            if layers:
                out.warnings.append(f"{_NO_LAYERS.format(name=name)}: nothing of it checked")
            continue
        models += 1
        if layers and not out.full:
            _check_entries(ollama_entries(manifest, prefix=f"{name}: "), out)
    orphans = ollama_orphans(listing.store, referenced)
    for orphan in orphans:
        if out.full:
            break
        out.mismatches.append(_orphan(orphan))
    _warn_partials(listing.store, referenced, out, "a model")
    # Without layers (ollama:* on the command line: each model is its own target) the store's own check
    # is the search for orphans; with them, that search alone is no check of a model.
    blobs = len(ollama_blobs(listing.store))
    empty = "no model of the store lists layers" if listing.names or blobs else "the store holds no model and no blob"
    return finish(out, os.fspath(listing.store), "ollama-store", empty=empty,
                  looked_at=models + (0 if layers else blobs))


def _readable_manifests(names: Iterable[object], store: Path) -> Iterator[OllamaManifest]:
    """The manifests of ``names`` that can be read (read again by the check, which reports the others)."""
    for name in names:
        try:
            yield read_ollama_manifest(str(name), store)
        except ManifestError:
            continue


def _orphan(entry: StoreEntry) -> Mismatch:
    """A blob no manifest names, as the store lists it, spanning the whole blob."""
    try:
        size: int | None = os.lstat(entry.path).st_size
    except OSError:
        size = None
    return replace(problem_mismatch(entry), offset=None if size is None else 0, length=size)
