"""One entry point for every kind of verification: :func:`verify` picks the check from what it is given."""

from __future__ import annotations

import contextlib
import os

from ..errors import UsageError, option_keywords, options_from
from ..format.layout import Model
from ..io.fan_out import Progress
from ..stores.locate import Target, find_target, resolve_model, target_text
from ..stores.registry import Part, Roots, Store
from .cache import CacheChoice, DigestCache, open_cache
from .options import VerifyOptions
from .report import VerifyReport
from .walk.listing import verify_listing
from .walk.manifest import verify_manifest
from .walk.sums import verify_blob, verify_sha256, verify_sums


def verify(target: Target | None = None, *, manifest: str | os.PathLike[str] | None = None,
           sums: str | os.PathLike[str] | None = None, store: str | os.PathLike[str] | None = None,
           hf_cache: str | os.PathLike[str] | None = None, fail_fast: bool = False, sha256: str | None = None,
           ignore_missing: bool = False, base: str | os.PathLike[str] | None = None, cache: CacheChoice = False,
           trust_cache: bool = False, quick: bool = False, options: VerifyOptions | None = None,
           progress: Progress | None = None) -> VerifyReport:
    """Check bytes against the digests they should have, and say where they differ.

    The options are a :class:`ggaudit.verify.options.VerifyOptions` (``options=``) or its fields as these
    keyword parameters (``verify(model, manifest=F, fail_fast=True)``), not both.

    - ``verify(model, manifest=F)``: a model (path, ``ollama:NAME``, ``hf:ORG/NAME``, or a Model)
      against a manifest: ggaudit's tensor manifest (differences localised to tensors and row ranges)
      or llama.cpp's ``llama-gguf-hash`` lines (matched by tensor name), told apart by content.
    - ``verify("ollama:NAME")``: every layer and the config of an Ollama model (``store``: its root);
      ``verify("ollama:*")``: the whole store as one report, blobs no manifest names as ``orphan``.
    - ``verify("hf:ORG/NAME[@REV]")``: every file of a cached Hugging Face snapshot, offline.
    - ``verify("hf-local:D")``: a ``huggingface-cli download --local-dir D`` folder, by its metadata.
    - ``verify("lmstudio:")``, ``verify("lmstudio:PUBLISHER/MODEL")``, ``verify("gpt4all:")``,
      ``verify("gpt4all:FILE")``: those apps' model folders, or one model of them (``store``: the folder;
      default per OS), by structure, and by size and md5 where GPT4All's local model list gives them.
    - A name whose prefix is no store's (``foo:bar``) and that is no file is a UsageError listing the
      prefixes (:func:`ggaudit.stores.registry.known_prefixes`).
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

    Raises:
        UsageError: an option of the wrong type or value, options that do not go together (``quick`` with
            ``manifest``), no expectation to check a plain file against (saying the parameters that give one:
            ``manifest=``, ``sums=``), a name of no known store. Its subclass NothingChecked: a check that
            checked nothing (above).
        ManifestError: a manifest, checksum file or store entry that cannot be read, is malformed or is
            unsafe; one the OS refused is also ``FileNotFoundError``, ``PermissionError`` or ``OSError``
            (with ``errno``, ``strerror`` and ``filename``).
        ReadError: a file that cannot be read, or that changed while it was read; one the OS refused is also
            the standard exception of that error, as above. A file an expectation names that is absent is a
            "missing" mismatch of the report, and a model that is no well-formed GGUF a "header" one: not
            errors.
    """
    o = options_from(VerifyOptions, options, option_keywords(VerifyOptions, locals()))
    with open_cache(o.cache, trust=o.trust_cache, quick=o.quick) as digest_cache:
        return _verify(target, manifest=o.manifest, sums=o.sums, store=o.store, hf_cache=o.hf_cache,
                       fail_fast=o.fail_fast, sha256=o.sha256, ignore_missing=o.ignore_missing, base=o.base,
                       progress=progress, digest_cache=digest_cache)


def _verify(target: Target | None, *, manifest: str | os.PathLike[str] | None, sums: str | os.PathLike[str] | None,
            store: str | os.PathLike[str] | None, hf_cache: str | os.PathLike[str] | None, fail_fast: bool,
            sha256: str | None, ignore_missing: bool, base: str | os.PathLike[str] | None,
            progress: Progress | None, digest_cache: DigestCache | None) -> VerifyReport:
    if sums is not None:
        if target is not None or manifest is not None:
            raise UsageError(None, "takes no target and no manifest", field="sums")
        if sha256 is not None:
            raise UsageError(None, "checks one target file, not a checksum file's", field="sha256")
        return verify_sums(sums, ignore_missing=ignore_missing, base=base, fail_fast=fail_fast, progress=progress,
                           digest_cache=digest_cache)
    if ignore_missing or base is not None:
        raise UsageError(None, "is for a checksum file: give sums", field="base" if base is not None
                         else "ignore_missing")
    if sha256 is not None:
        if target is None or manifest is not None or isinstance(target, Model):
            raise UsageError(None, "checks one file: give it as the target, and no manifest", field="sha256")
        return verify_sha256(target_text(target, "target"), sha256, progress=progress, digest_cache=digest_cache)
    if target is None:
        raise UsageError(None, "give a model (a path, ollama:NAME, hf:ORG/NAME or a Model) or sums",
                         field="target")
    if manifest is not None:
        if isinstance(target, Model):
            return verify_manifest(target, manifest, fail_fast=fail_fast, progress=progress,
                                   digest_cache=digest_cache)
        paths = resolve_model(target_text(target, "target"), store=store, hf_cache=hf_cache)
        return verify_manifest(paths[0], manifest, also=paths[1:], fail_fast=fail_fast, progress=progress,
                               digest_cache=digest_cache)
    if isinstance(target, Model):
        raise UsageError(None, "an opened model is checked against a manifest: give manifest", field="target")
    text = target_text(target, "target")
    found = find_target(text, Roots(store, hf_cache), field="target")
    if found is None:
        return verify_blob(text, progress=progress, digest_cache=digest_cache)
    return verify_store(found, fail_fast=fail_fast, progress=progress, digest_cache=digest_cache)


def verify_store(store: Store, *, fail_fast: bool, progress: Progress | None,
                 digest_cache: DigestCache | None = None) -> VerifyReport:
    """Check what ``store``'s name stands for against what the store lists of it (:meth:`Store.listing`),
    through the one walker; ``digest_cache``: the run's digest cache, or None."""
    return verify_listing(store.listing(), fail_fast=fail_fast, progress=progress, digest_cache=digest_cache)


def verify_part(part: Part, *, options: VerifyOptions, progress: Progress | None = None) -> VerifyReport:
    """One target of a name standing for every model of its store (:meth:`Store.each_model`), with the run's
    options; a part whose check reads no file's bytes opens no digest cache."""
    cache: contextlib.AbstractContextManager[DigestCache | None] = contextlib.nullcontext(None)
    if part.reads:
        cache = open_cache(options.cache, trust=options.trust_cache, quick=options.quick)
    with cache as digest_cache:
        return verify_store(part.store, fail_fast=options.fail_fast, progress=progress, digest_cache=digest_cache)
