"""One entry point for every kind of verification: :func:`verify` picks the check from what it is given."""

from __future__ import annotations

import os

from ..errors import UsageError
from ..format.layout import Model
from ..format.locate import HF_PREFIX, OLLAMA_PREFIX, Target, resolve_model, target_text
from .cache import CacheChoice, using_cache
from .digests import Progress
from .run import (VerifyReport, verify_blob, verify_gpt4all, verify_hf, verify_hf_local, verify_lmstudio,
                  verify_manifest, verify_ollama, verify_ollama_store, verify_sha256, verify_sums)

#: Every model of the Ollama store: ``ollama:*``.
OLLAMA_ALL = OLLAMA_PREFIX + "*"
#: A folder written by ``huggingface-cli download --local-dir``.
HF_LOCAL_PREFIX = "hf-local:"
#: LM Studio's models: ``lmstudio:`` (all) or ``lmstudio:PUBLISHER/MODEL``.
LMSTUDIO_PREFIX = "lmstudio:"
#: GPT4All's model folder.
GPT4ALL_PREFIX = "gpt4all:"


def verify(target: Target | None = None, *, manifest: str | os.PathLike[str] | None = None,
           sums: str | os.PathLike[str] | None = None, store: str | os.PathLike[str] | None = None,
           hf_cache: str | os.PathLike[str] | None = None, fail_fast: bool = False, sha256: str | None = None,
           ignore_missing: bool = False, base: str | os.PathLike[str] | None = None, cache: CacheChoice = False,
           trust_cache: bool = False, quick: bool = False, progress: Progress | None = None) -> VerifyReport:
    """Check bytes against the digests they should have, and say where they differ.

    - ``verify(model, manifest=F)``: a model (path, ``ollama:NAME``, ``hf:ORG/NAME``, or a Model)
      against a manifest: ggaudit's tensor manifest (differences localised to tensors and row ranges)
      or llama.cpp's ``llama-gguf-hash`` lines (matched by tensor name), told apart by content.
    - ``verify("ollama:NAME")``: every layer and the config of an Ollama model (``store``: its root);
      ``verify("ollama:*")``: the whole store as one report, blobs no manifest names as ``orphan``.
    - ``verify("hf:ORG/NAME[@REV]")``: every file of a cached Hugging Face snapshot, offline.
    - ``verify("hf-local:D")``: a ``huggingface-cli download --local-dir D`` folder, by its metadata.
    - ``verify("lmstudio:")``, ``verify("lmstudio:PUBLISHER/MODEL")``, ``verify("gpt4all:")``: those
      apps' model folders (``store``: the folder; default per OS), by structure, and by size and md5
      where GPT4All's local model list gives them.
    - ``verify(sums=F)``: every file a sha256 checksum file names (``base``: the folder names resolve
      in; ``ignore_missing``: absent files are skipped).
    - ``verify(path, sha256=HEX)``: one file against a sha256.
    - ``verify(path)``: a content-addressed blob (``sha256-<hex>``) against the digest in its name.

    A file the expectations name that is absent is a "missing" mismatch, not an error; a file of the
    model that a manifest does not name (a shard, a projector) is a "file-extra" mismatch. A check that
    checks nothing (an empty store, folder or snapshot, an Ollama manifest listing no layers, a manifest
    naming nothing of the model, every sums entry skipped) raises NothingChecked, a UsageError: the
    report it would give could only be mistaken for a clean one.

    ``cache``: keep the whole-file digests computed in the digest cache (True: the user's cache folder,
    see :mod:`ggaudit.verify.cache`; or a folder). Every file is still read: no stamp sees bytes changed
    below the filesystem. ``trust_cache`` (needs ``cache``): take the cache's digest for a file unchanged
    since it was hashed (same device, inode, size, mtime and ctime) instead of reading it; such a file is
    ``Checked(source="cache", cached_at=...)`` and ``stats.cached`` counts them. ``quick`` (needs
    ``cache``; trusts it): check sizes and names, hash nothing, and leave a file without a cached digest
    unchecked (``stats.unchecked``, and a warning naming it); not with ``manifest``, whose check reads
    every tensor. A cache that is not private to the user is not used (a warning says why).

    ``progress(done, total)``: bytes hashed of the bytes to hash, told once per chunk read; a digest taken
    from the cache counts its file's bytes done at once.
    """
    if quick and manifest is not None:
        raise UsageError(None, "checks whole files' cached digests; a manifest's check reads every tensor",
                         field="quick")
    with using_cache(cache, trust=trust_cache, quick=quick):
        return _verify(target, manifest=manifest, sums=sums, store=store, hf_cache=hf_cache, fail_fast=fail_fast,
                       sha256=sha256, ignore_missing=ignore_missing, base=base, progress=progress)


def _verify(target: Target | None, *, manifest: str | os.PathLike[str] | None, sums: str | os.PathLike[str] | None,
            store: str | os.PathLike[str] | None, hf_cache: str | os.PathLike[str] | None, fail_fast: bool,
            sha256: str | None, ignore_missing: bool, base: str | os.PathLike[str] | None,
            progress: Progress | None) -> VerifyReport:
    if sums is not None:
        if target is not None or manifest is not None:
            raise UsageError(None, "takes no target and no manifest", field="sums")
        if sha256 is not None:
            raise UsageError(None, "checks one target file, not a checksum file's", field="sha256")
        return verify_sums(sums, ignore_missing=ignore_missing, base=base, fail_fast=fail_fast, progress=progress)
    if ignore_missing or base is not None:
        raise UsageError(None, "is for a checksum file: give sums", field="base" if base is not None
                         else "ignore_missing")
    if sha256 is not None:
        if target is None or manifest is not None or isinstance(target, Model):
            raise UsageError(None, "checks one file: give it as the target, and no manifest", field="sha256")
        return verify_sha256(target_text(target, "target"), sha256, progress=progress)
    if target is None:
        raise UsageError(None, "give a model (a path, ollama:NAME, hf:ORG/NAME or a Model) or sums",
                         field="target")
    if manifest is not None:
        if isinstance(target, Model):
            return verify_manifest(target, manifest, fail_fast=fail_fast, progress=progress)
        paths = resolve_model(target_text(target, "target"), store=store, hf_cache=hf_cache)
        return verify_manifest(paths[0], manifest, also=paths[1:], fail_fast=fail_fast, progress=progress)
    if isinstance(target, Model):
        raise UsageError(None, "an opened model is checked against a manifest: give manifest", field="target")
    text = target_text(target, "target")
    if text == OLLAMA_ALL:
        return verify_ollama_store(store, fail_fast=fail_fast, progress=progress)
    if text.startswith(OLLAMA_PREFIX):
        return verify_ollama(text[len(OLLAMA_PREFIX):], store, fail_fast=fail_fast, progress=progress)
    if text.startswith(HF_LOCAL_PREFIX):
        return verify_hf_local(text[len(HF_LOCAL_PREFIX):], fail_fast=fail_fast, progress=progress)
    if text.startswith(LMSTUDIO_PREFIX):
        return verify_lmstudio(text[len(LMSTUDIO_PREFIX):], store, fail_fast=fail_fast, progress=progress)
    if text.startswith(GPT4ALL_PREFIX):
        if text != GPT4ALL_PREFIX:
            raise UsageError(None, "gpt4all: names the whole folder and takes nothing after the colon",
                             field="target")
        return verify_gpt4all(store, fail_fast=fail_fast, progress=progress)
    if text.startswith(HF_PREFIX):
        return verify_hf(text[len(HF_PREFIX):], hf_cache, fail_fast=fail_fast, progress=progress)
    return verify_blob(text, progress=progress)
