"""Check files against the digests they are supposed to have; findings come back as frozen data.

Sources of expected digests (see ``manifests``): an Ollama model's manifest, a Hugging Face cache
snapshot, a sha256 checksum file, a blob's own name, and ggaudit's tensor manifest, which narrows a
damaged file down to the tensor and the rows that changed.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import stat
import time
from dataclasses import InitVar, dataclass, field
from pathlib import Path
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from .._version import __version__
from ..diagnostic import Diagnostic
from .lines import describe_mismatch
from .cache import DigestCache, active_cache
from .digests import GitBlobSha1, Tally
from ..errors import FormatError, GGAuditError, ManifestError, NothingChecked, ReadError, UsageError
from ..format.layout import GGUFFile, Model, named_shards, open_gguf, open_model
from ..format.structure import check_structure
from ..io import FileIdentity, Progress, Sha256, read_through
from ..stores.gpt4all import read_gpt4all
from ..stores.hf_cache import read_hf_snapshot
from ..stores.hf_local import LocalDownload, read_hf_local
from ..stores.lmstudio import GGUFFolder, read_lmstudio
from ..stores.ollama import (OllamaManifest, list_ollama_models, ollama_blob_path, ollama_blobs,
                            ollama_partial_files, read_ollama_manifest)
from ..stores.sums import read_sums
from .manifests.tensor import FileDigest, TensorDigest, TensorManifest, digest_gguf_file, read_tensor_manifest
from .manifests.llama_hash import FORMAT as LLAMA_HASH
from .manifests.llama_hash import (FilePlan, hash_gguf_file, manifest_format, plan_llama_check, read_llama_hash,
                                   tensor_data_span)
from ..untrusted import OUTSIDE, confine, quote, shorten, sibling_roots

log = logging.getLogger(__name__)

#: The ``schema`` of :meth:`VerifyReport.to_json`.
SCHEMA = "ggaudit/verify-report/1"

#: A model whose tensors differ from a manifest's nearly all (this share of those checked, and at least
#: this many) is another model, or another build of it, rather than a damaged copy: VerifyReport.another_model.
ANOTHER_MODEL_SHARE = 0.9
ANOTHER_MODEL_MIN_TENSORS = 8


#: Every kind of Mismatch (see its docstring); its diagnostic's kind is ``verify/`` and this.
MISMATCH_KINDS = ("missing", "not-a-file", "size", "sha256", "git-sha1", "md5", "link", "header", "orphan",
                  "file-extra", "tensor-data", "tensor-missing", "tensor-extra", "tensor-layout", "model-data",
                  "structure")
#: Every kind of diagnostic a verify report yields (ggaudit.kinds ids).
DIAGNOSTIC_KINDS = tuple(f"verify/{k}" for k in MISMATCH_KINDS)


@dataclass(frozen=True, kw_only=True)
class Mismatch:
    """One thing that is not as expected. Where, then what was expected and what was found.

    ``kind`` is one of: missing, not-a-file, size, sha256, git-sha1, md5, link, header, orphan, file-extra,
    tensor-data, tensor-missing, tensor-extra, tensor-layout, model-data, structure. file-extra: a file of
    the model that the manifest does not name (not read: ``offset``/``length`` span the whole file).
    ``expected``/``actual`` hold hex digests (or sizes, types, shapes as text). For tensor-data,
    ``offset``/``length`` give the absolute span of the differing row groups and ``rows`` the first and
    last row (inclusive). model-data is a llama-gguf-hash model line: the digest of all of a file's tensor
    data, spanning its first to its last tensor.
    """

    kind: str
    path: str
    subject: str
    expected: str | None = None
    actual: str | None = None
    offset: int | None = None
    length: int | None = None
    tensor: str | None = None
    rows: tuple[int, int] | None = None
    detail: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "path": self.path, "subject": self.subject, "expected": self.expected,
                "actual": self.actual, "offset": self.offset, "length": self.length, "tensor": self.tensor,
                "rows": None if self.rows is None else list(self.rows), "detail": self.detail}


#: Where a Checked file's digest came from: its bytes, read now, or the digest cache (not read again).
READ, CACHE = "read", "cache"


@dataclass(frozen=True, kw_only=True)
class Checked:
    """A file checked; ``ok`` says whether its digest matched. ``source``: READ (its bytes were read now)
    or CACHE (the digest cache's digest, computed at ``cached_at``, UTC ISO 8601: the file was not read
    again, so damage below the filesystem since then is not seen)."""

    path: str
    subject: str
    algorithm: str
    digest: str
    size: int
    ok: bool
    source: str = READ
    cached_at: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "subject": self.subject, "algorithm": self.algorithm, "digest": self.digest,
                "size": self.size, "ok": self.ok, "source": self.source, "cached_at": self.cached_at}


@dataclass(frozen=True, kw_only=True)
class VerifyStats:
    """``files`` checked (``cached``: of these, how many by a digest from the digest cache, not read again:
    only when the caller trusts the cache, ``trust_cache`` or ``quick``);
    ``unchecked``: files ``quick`` left unhashed for want of a cached digest, neither passed nor failed;
    against a manifest of tensors, ``tensors`` it names that were checked (in the files that opened) and
    of these, ``tensors_differing``: missing, re-shaped or with other data."""

    files: int
    bytes_hashed: int
    seconds: float
    cached: int = 0
    unchecked: int = 0
    tensors: int = 0
    tensors_differing: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"files": self.files, "bytes_hashed": self.bytes_hashed, "seconds": round(self.seconds, 6),
                "cached": self.cached, "unchecked": self.unchecked, "tensors": self.tensors,
                "tensors_differing": self.tensors_differing}


@dataclass(frozen=True, kw_only=True)
class VerifyReport:
    """The result of a verify_* call; ``ok`` when nothing differs from what was expected."""

    source: str
    kind: str                               # ollama, hf, sums, blob, manifest
    checked: tuple[Checked, ...]
    mismatches: tuple[Mismatch, ...]
    warnings: tuple[str, ...]
    stats: VerifyStats
    stopped_early: bool = False

    @property
    def ok(self) -> bool:
        return not self.mismatches

    @property
    def another_model(self) -> bool:
        """Nearly every tensor checked against the manifest differs: the manifest is another model's (or
        another build's), not this model damaged."""
        n, differing = self.stats.tensors, self.stats.tensors_differing
        return differing >= ANOTHER_MODEL_MIN_TENSORS and differing >= ANOTHER_MODEL_SHARE * n

    def diagnostics(self) -> Iterator[Diagnostic]:
        """Each mismatch, in the order found."""
        for m in self.mismatches:
            yield Diagnostic(kind=f"verify/{m.kind}", message="\n".join(describe_mismatch(m)), file=m.path,
                             offset=m.offset, length=m.length, tensor=m.tensor,
                             row=None if m.rows is None else m.rows[0], extras=m.to_json())

    def to_json(self) -> dict[str, Any]:
        return {"schema": SCHEMA, "tool_version": __version__, "ok": self.ok, "source": self.source,
                "kind": self.kind, "stopped_early": self.stopped_early, "another_model": self.another_model,
                "checked": [c.to_json() for c in self.checked],
                "mismatches": [m.to_json() for m in self.mismatches], "warnings": list(self.warnings),
                "stats": self.stats.to_json()}


@dataclass
class _Collector:
    """Accumulates a report; ``full`` turns true when --fail-fast should stop the walk."""

    fail_fast: bool
    checked: list[Checked] = field(default_factory=list)
    mismatches: list[Mismatch] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    bytes_hashed: int = 0
    started: float = field(default_factory=time.perf_counter)
    #: Digests already computed (and the cache's date, for one taken from it), per file and algorithm: a
    #: file named by many lines (or layers) is read once.
    digests: dict[tuple[Any, ...], tuple[str, str | None]] = field(default_factory=dict)
    #: stat (or its error) per path: 200k layers naming one blob stat it once (a stat costs ~1 ms in Wine).
    stats: dict[str, os.stat_result | OSError] = field(default_factory=dict)
    #: The persistent digest cache of this run (verify(cache=...)), and what it saved (trusted) or left
    #: unchecked (quick).
    cache: DigestCache | None = field(default_factory=active_cache)
    cached: int = 0
    unchecked: int = 0
    tensors: int = 0
    tensors_differing: int = 0
    #: The caller's progress callback: bytes read (or taken from the cache) of the bytes planned.
    progress: InitVar[Progress | None] = None
    tally: Tally = field(init=False)

    def __post_init__(self, progress: Progress | None) -> None:
        self.tally = Tally(progress)

    @property
    def full(self) -> bool:
        return self.fail_fast and bool(self.mismatches)

    def plan(self, paths: Iterable[str | os.PathLike[str]]) -> None:
        """Plan the progress: the bytes of the regular files at ``paths``, each file once. Only with a
        progress callback, and with stats of its own: the checks' stats and results stay as without."""
        if not self.tally.active:
            return
        sizes: dict[object, int] = {}
        for path in dict.fromkeys(os.fspath(p) for p in paths):
            try:
                st = os.stat(path)
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode):
                sizes[(st.st_dev, st.st_ino) if st.st_ino else path] = st.st_size
        self.tally.plan(sum(sizes.values()))

    def report(self, source: str, kind: str) -> VerifyReport:
        if self.cache is not None:
            self.cache.flush()
            self.warnings.extend(self.cache.take_warnings())
        stats = VerifyStats(files=len(self.checked), bytes_hashed=self.bytes_hashed,
                            seconds=time.perf_counter() - self.started, cached=self.cached,
                            unchecked=self.unchecked, tensors=self.tensors, tensors_differing=self.tensors_differing)
        return VerifyReport(source=source, kind=kind, checked=tuple(self.checked), mismatches=tuple(self.mismatches),
                            warnings=tuple(self.warnings), stats=stats, stopped_early=self.full)


def _report(out: _Collector, source: str, kind: str, *, empty: str, looked_at: int = 0) -> VerifyReport:
    """``out``'s report; NothingChecked when it checked nothing (the one rule of every verify_*): no file
    hashed or opened, no tensor compared, no size checked (``quick``), no mismatch found, and nothing else
    ``looked_at`` (the blobs and models of a store searched for orphans). ``empty`` says, in words, what
    the target held; the warnings (a file without metadata, say) are counted in the message, which is
    all the caller sees."""
    report = out.report(source, kind)
    if report.checked or report.mismatches or report.stats.tensors or report.stats.unchecked or looked_at:
        return report
    said = ""
    if report.warnings:
        said = (f" ({len(report.warnings)} warning{'s' if len(report.warnings) > 1 else ''}, the first: "
                f"{shorten(report.warnings[0], 200)})")
    raise NothingChecked(source, f"{empty}{said}; nothing was checked")


def _identity(path: Path, subject: str, expected: str, out: _Collector) -> FileIdentity | None:
    """Identity (size included) of a regular file, or None after recording why it cannot be checked."""
    key = os.fspath(path)
    if key not in out.stats:
        try:
            out.stats[key] = os.stat(path)
        except OSError as err:
            out.stats[key] = err
    st = out.stats[key]
    if isinstance(st, FileNotFoundError):
        out.mismatches.append(Mismatch(kind="missing", path=os.fspath(path), subject=subject, expected=expected,
                                       detail="file not found"))
        return None
    if isinstance(st, OSError):
        raise ReadError(path, f"cannot stat: {st.strerror}")
    if not stat.S_ISREG(st.st_mode):
        out.mismatches.append(Mismatch(kind="not-a-file", path=os.fspath(path), subject=subject, expected=expected,
                                       detail="not a regular file"))
        return None
    return FileIdentity.of(st)


def _hash(path: str | os.PathLike[str], hasher: Sha256 | GitBlobSha1 | _Md5, identity: FileIdentity,
          progress: Progress | None = None) -> str:
    """Digest of the file ``identity`` describes; ReadError if it is replaced or resized meanwhile,
    since a digest of bytes no longer there would be a wrong answer."""
    read_through(path, [hasher], end=identity.size, progress=progress)
    identity.check(path, "while it was being hashed")
    return hasher.hexdigest()


def _size_mismatch(path: str, subject: str, expected: int, actual: int) -> Mismatch:
    return Mismatch(kind="size", path=path, subject=subject, expected=str(expected), actual=str(actual),
                    offset=0, length=actual, detail="size differs")


def _digest_mismatch(algorithm: str, path: str, subject: str, expected: str, actual: str,
                     size: int, note: str = "") -> Mismatch:
    return Mismatch(kind=algorithm, path=path, subject=subject, expected=expected, actual=actual, offset=0,
                    length=size, detail=f"{algorithm} differs{note}")


def _check_digest(path: Path, subject: str, expected: str, out: _Collector, *,
                  algorithm: str = "sha256", expected_size: int | None = None) -> None:
    """Check one file's size (when known) and digest, recording the outcome in ``out``."""
    identity = _identity(path, subject, expected, out)
    if identity is None:
        return
    size = identity.size
    if expected_size is not None and size != expected_size:
        out.mismatches.append(_size_mismatch(os.fspath(path), subject, expected_size, size))
        out.tally.skip(size)
        return
    # The same file (device and inode, or its path where the OS gives no inode) unchanged since.
    where = (identity.device, identity.inode) if identity.inode else os.fspath(path)
    key = (where, identity.size, identity.mtime_ns, algorithm)
    found = out.digests.get(key)
    if found is None:
        found = _cached_or_hashed(path, algorithm, identity, out)
        if found is None:
            return
        out.digests[key] = found
    actual, cached_at = found
    out.checked.append(Checked(path=os.fspath(path), subject=subject, algorithm=algorithm, digest=actual, size=size,
                               ok=actual == expected, source=READ if cached_at is None else CACHE,
                               cached_at=cached_at))
    if actual != expected:
        out.mismatches.append(_digest_mismatch(algorithm, os.fspath(path), subject, expected, actual, size,
                                               "" if cached_at is None else f" ({not_read_again(cached_at)})"))


def not_read_again(cached_at: str) -> str:
    """What every report says of a file whose digest came from the digest cache."""
    return f"digest from the cache of {cached_at}, not read again"


def _cached_or_hashed(path: Path, algorithm: str, identity: FileIdentity,
                      out: _Collector) -> tuple[str, str | None] | None:
    """The file's digest and, when it is the digest cache's, when that was computed: the cache's only when
    the caller trusts it (``trust_cache``, ``quick``) and it holds one for the file unchanged, else hashed
    (and given to the cache); None, counted unchecked, when ``quick`` finds none in the cache."""
    before = out.stats[os.fspath(path)]
    assert isinstance(before, os.stat_result)       # _identity has stat'ed it
    cache = out.cache
    found = None if cache is None else cache.lookup(path, algorithm, before)
    if cache is not None and cache.trust:
        if found is not None:
            out.cached += 1
            out.tally.skip(identity.size)
            return found.digest, found.computed
        if cache.quick:
            out.unchecked += 1
            out.tally.skip(identity.size)
            out.warnings.append(f"not hashed (quick): {os.fspath(path)}: no cached digest")
            return None
    started = time.time_ns()
    actual = _hash(path, _hasher(algorithm, identity.size), identity, out.tally.part())
    out.bytes_hashed += identity.size
    if cache is not None:
        if found is not None and found.digest != actual:
            # The very damage the cache cannot see: bytes changed and every stamp kept.
            out.warnings.append(f"{os.fspath(path)}: its {algorithm} read now differs from the one the digest "
                                f"cache kept on {found.computed} for the same device, inode, size, mtime and "
                                "ctime: its bytes changed with no write the filesystem saw (media damage, a lost "
                                "write), or the cache was altered")
        cache.store(path, algorithm, before, actual, started)
    return actual, None


def _hasher(algorithm: str, size: int) -> Sha256 | GitBlobSha1 | _Md5:
    return GitBlobSha1(size) if algorithm == "git-sha1" else _Md5() if algorithm == "md5" else Sha256()


_BLOB_NAME = re.compile(r"(?:sha256[-:])?([0-9a-fA-F]{64})")


def verify_ollama(name: str, store: str | os.PathLike[str] | None = None, *,
                  fail_fast: bool = False, partials: bool = True, progress: Progress | None = None) -> VerifyReport:
    """Check every layer (of any kind: model, projector, tensor, draft, ...) and the config of an Ollama
    model: present, right size, right sha256. A model without an ``image.model`` layer is checked by the
    layers it has. ``partials``: warn about the store's stray ``-partial`` downloads. ``progress(done,
    total)``: bytes hashed (or found in the digest cache) of the bytes to hash, as in every verify_*.
    A manifest listing no layer is NothingChecked: its config alone is no model."""
    manifest = read_ollama_manifest(name, store)
    if not manifest.layers:
        raise NothingChecked(manifest.path, f"{_NO_LAYERS.format(name=manifest.name)}; nothing was checked")
    out = _Collector(fail_fast, progress=progress)
    out.plan(_blob_paths([manifest]))
    _check_ollama_layers(manifest, out)
    if partials:
        _warn_partials(manifest.store, {layer.digest for layer in manifest.blobs}, out)
    return _report(out, str(manifest.name), "ollama", empty="its manifest names no blob")


#: An Ollama manifest whose ``layers`` is empty: what verify says of it.
_NO_LAYERS = "model {name} lists no layers"


def _check_ollama_layers(manifest: OllamaManifest, out: _Collector, prefix: str = "") -> None:
    """Check each blob of ``manifest``; subjects are its layers' (after ``prefix``: the model's name)."""
    # Per distinct digest: where its blob is, or why it must not be opened. Each layer is still reported,
    # but 200k layers naming one blob cost one lookup and one read (the digest memo), not 200k.
    located: dict[str, Path | ManifestError] = {}
    for layer in manifest.blobs:
        if out.full:
            break
        if layer.digest not in located:
            try:
                located[layer.digest] = ollama_blob_path(manifest.store, layer.digest)
            except ManifestError as err:     # a blob linking out of the store: reported, not followed
                located[layer.digest] = err
        path = located[layer.digest]
        if isinstance(path, ManifestError):
            out.mismatches.append(Mismatch(kind="link", path=os.fspath(path.path or ""),
                                           subject=prefix + layer.subject, detail=path.message))
            continue
        _check_digest(path, prefix + layer.subject, layer.digest, out, expected_size=layer.size)


def _blob_paths(manifests: Iterable[OllamaManifest]) -> Iterator[Path]:
    """The blob of each distinct layer digest of ``manifests`` that stays in the store (for the progress)."""
    for manifest in manifests:
        for digest in {layer.digest for layer in manifest.blobs}:
            try:
                yield ollama_blob_path(manifest.store, digest)
            except ManifestError:
                continue


def _warn_partials(store: Path, ours: set[str], out: _Collector, whose: str = "this model") -> None:
    for partial in ollama_partial_files(store):
        digest = _BLOB_NAME.match(partial.name)     # sha256-<hex>-partial: the name starts as a blob's
        mine = f" (a blob of {whose})" if digest and digest[1].lower() in ours else ""
        out.warnings.append(f"stray partial download: {os.fspath(partial)}{mine}")


def verify_ollama_store(store: str | os.PathLike[str] | None = None, *, layers: bool = True,
                        fail_fast: bool = False, progress: Progress | None = None) -> VerifyReport:
    """The whole Ollama store (``ollama:*``): every layer of every model (``layers``; subjects begin with
    the model's name), and each blob no manifest names, as an ``orphan`` mismatch. A manifest that cannot
    be read is a warning (its blobs may then be listed as orphans); stray partial downloads too; and a
    manifest listing no layer. A store in which no model lists layers (and, with ``layers`` False, that
    holds no blob to search for orphans) is NothingChecked."""
    listing = list_ollama_models(store)
    out = _Collector(fail_fast, progress=progress)
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
            _check_ollama_layers(manifest, out, prefix=f"{name}: ")
    blobs = ollama_blobs(listing.store)
    for digest, path in blobs.items():
        if digest not in referenced and not out.full:
            out.mismatches.append(_orphan(path, out))
    _warn_partials(listing.store, referenced, out, "a model")
    # Without layers (ollama:* on the command line: each model is its own target) the store's own check
    # is the search for orphans; with them, that search alone is no check of a model.
    empty = "no model of the store lists layers" if listing.names or blobs else "the store holds no model and no blob"
    return _report(out, os.fspath(listing.store), "ollama-store", empty=empty,
                   looked_at=models + (0 if layers else len(blobs)))


def _readable_manifests(names: Iterable[object], store: Path) -> Iterator[OllamaManifest]:
    """The manifests of ``names`` that can be read (read again by the check, which reports the others)."""
    for name in names:
        try:
            yield read_ollama_manifest(str(name), store)
        except ManifestError:
            continue


def _orphan(path: Path, out: _Collector) -> Mismatch:
    try:
        size: int | None = os.lstat(path).st_size
    except OSError:
        size = None
    return Mismatch(kind="orphan", path=os.fspath(path), subject="blob", offset=None if size is None else 0,
                    length=size, detail="no manifest of the store names this blob")


def verify_hf(spec: str, cache: str | os.PathLike[str] | None = None, *,
              fail_fast: bool = False, progress: Progress | None = None) -> VerifyReport:
    """Check every file of a cached Hugging Face snapshot against its blob's name, offline."""
    snapshot = read_hf_snapshot(spec, cache)
    out = _Collector(fail_fast, progress=progress)
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
            _check_digest(entry.blob, entry.name, entry.expected, out, algorithm=entry.algorithm or "")
    out.warnings.extend(f"leftover of an interrupted download: {os.fspath(p)}" for p in snapshot.incomplete)
    return _report(out, f"{snapshot.spec.repo_id}@{snapshot.commit}", "hf", empty="the snapshot holds no file")


def verify_sums(sums: str | os.PathLike[str], *, ignore_missing: bool = False,
                base: str | os.PathLike[str] | None = None, fail_fast: bool = False,
                progress: Progress | None = None) -> VerifyReport:
    """Check every file a sha256 checksum file names (GNU, BSD --tag or OpenSSL format).

    Names resolve under ``base`` (default: the checksum file's folder) and never leave it. With
    ``ignore_missing`` (``sha256sum -c --ignore-missing``) an absent file is skipped, not a mismatch;
    a file naming only absent files is then NothingChecked.
    """
    out = _Collector(fail_fast, progress=progress)
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
            _check_digest(entry.path, entry.name, entry.sha256, out)
    if skipped and skipped == len(entries):
        raise NothingChecked(sums, "no file it names is present (--ignore-missing): no file was verified",
                             field="ignore_missing")
    if skipped:
        out.warnings.append(f"{skipped} of {len(entries)} files named are absent, skipped (--ignore-missing)")
    return _report(out, os.fspath(sums), "sums", empty="no file it names was checked")


def blob_name_digest(path: str | os.PathLike[str]) -> str | None:
    """The sha256 a file's own name promises (``sha256-<hex>``, ``sha256:<hex>``, ``<hex>``), if any."""
    match = _BLOB_NAME.fullmatch(os.path.basename(os.fspath(path)))
    return match[1].lower() if match else None


def verify_blob(path: str | os.PathLike[str], *, progress: Progress | None = None) -> VerifyReport:
    """Check a content-addressed blob (Ollama or Hugging Face) against the digest in its name."""
    expected = blob_name_digest(path)
    if expected is None:
        raise UsageError(path, "the file name holds no sha256; give --manifest, --sums, ollama:NAME "
                         "or hf:ORG/NAME to say what to check it against")
    out = _Collector(False, progress=progress)
    out.plan([path])
    _check_digest(Path(path), "blob name", expected, out)
    return _report(out, os.fspath(path), "blob", empty="the blob was not checked")


def verify_sha256(path: str | os.PathLike[str], sha256: str, *, progress: Progress | None = None) -> VerifyReport:
    """Check one file against a sha256 given as 64 hex digits (any case)."""
    if not isinstance(sha256, str) or not _HEX64.fullmatch(sha256):
        shown = quote(sha256) if isinstance(sha256, str) else type(sha256).__name__
        raise UsageError(None, f"{shown} is not a sha256: 64 hex digits", field="sha256")
    out = _Collector(False, progress=progress)
    out.plan([path])
    _check_digest(Path(path), "--sha256", sha256.lower(), out)
    return _report(out, os.fspath(path), "file", empty="the file was not checked")


_HEX64 = re.compile(r"[0-9a-fA-F]{64}")


def verify_hf_local(folder: str | os.PathLike[str], *, fail_fast: bool = False,
                    progress: Progress | None = None) -> VerifyReport:
    """Check a ``huggingface-cli download --local-dir`` folder against its download metadata, offline.

    Each file whose metadata holds a digest etag (sha256 for LFS files, git's blob sha1 for the others)
    is hashed; a file modified after its metadata was written, and one with no usable metadata, is a
    warning; a file the metadata names that is absent is a ``missing`` mismatch.
    """
    download = read_hf_local(folder)
    out = _Collector(fail_fast, progress=progress)
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
            _check_digest(entry.path, entry.name, entry.expected, out, algorithm=entry.algorithm or "sha256")
    out.warnings.extend(f"leftover of an interrupted download: {os.fspath(p)}" for p in download.incomplete)
    return _report(out, os.fspath(folder), "hf-local", empty=_local_empty(download))


def _local_empty(download: LocalDownload) -> str:
    """Why a ``--local-dir`` folder checked nothing, in words."""
    if not download.files:
        return "the folder holds no downloaded file"
    count = len(download.files)
    return f"none of its {count} file{'s' if count > 1 else ''} has download metadata giving a digest"


def verify_lmstudio(spec: str = "", store: str | os.PathLike[str] | None = None, *,
                    fail_fast: bool = False, progress: Progress | None = None) -> VerifyReport:
    """Check LM Studio's models (``spec`` empty: all; else ``PUBLISHER/MODEL``) offline. LM Studio keeps
    no digests, so each GGUF is checked for structure: the header parses and the file holds every
    tensor's data; and each split set for its shards."""
    folder = read_lmstudio(spec, store)
    out = _Collector(fail_fast, progress=progress)
    _check_folder(folder, out, {})
    return _report(out, os.fspath(folder.root) + (f" {spec}" if spec else ""), "lmstudio",
                   empty="the folder holds no GGUF file")


def verify_gpt4all(store: str | os.PathLike[str] | None = None, *, name: str = "", fail_fast: bool = False,
                   progress: Progress | None = None) -> VerifyReport:
    """Check GPT4All's model folder offline (``name``: only that model, a file of it): a file its local
    model list (``models3.json``) describes against that size and md5; any other GGUF for structure, as
    :func:`verify_lmstudio`."""
    found = read_gpt4all(store, name)
    out = _Collector(fail_fast, progress=progress)
    digests = {name: (item.md5, item.size) for name, item in found.listed.items() if item.md5 is not None}
    _check_folder(found.folder, out, digests)
    if found.listing is None:
        out.warnings.append(f"no model list ({', '.join(('models3.json', 'models2.json', 'models.json'))}) in "
                            f"{os.fspath(found.folder.root)}: structure checked, no digests")
    return _report(out, os.fspath(found.folder.root) + (f" {name}" if name else ""), "gpt4all",
                   empty="the folder holds no GGUF file")


def _check_folder(folder: GGUFFolder, out: _Collector, md5s: dict[str, tuple[str, int | None]]) -> None:
    """Each GGUF of ``folder``: against its md5 and size when ``md5s`` has its name, else its structure;
    then the shards its split sets lack, as ``missing``."""
    out.plan(e.path for e in folder.files if e.problem is None and e.name in md5s)
    for entry in folder.files:
        if out.full:
            return
        if entry.problem is not None:
            out.mismatches.append(Mismatch(kind="link", path=os.fspath(entry.path), subject=entry.name,
                                           detail=entry.problem))
        elif entry.name in md5s:
            _check_md5(entry.path, entry.name, *md5s[entry.name], out)
        else:
            _check_structure(entry.path, entry.name, out)
    for shard in folder.missing:
        if out.full:
            return
        out.mismatches.append(Mismatch(kind="missing", path=os.fspath(shard.path), subject=shard.name,
                                       detail=f"shard {shard.number} of {shard.count} of a split set not found"))


def _check_structure(path: Path, subject: str, out: _Collector) -> None:
    """The file opens as GGUF: its header parses and it holds every tensor's data (a ``header`` mismatch
    at the offending offset otherwise)."""
    identity = _identity(path, subject, "", out)
    if identity is None:
        return
    try:
        open_gguf(path)
    except FormatError as err:
        out.mismatches.append(Mismatch(kind="header", path=os.fspath(path), subject=subject, offset=err.offset,
                                       detail=err.message))
        return
    out.checked.append(Checked(path=os.fspath(path), subject=subject, algorithm="gguf-layout", digest="",
                               size=identity.size, ok=True))


def _check_md5(path: Path, subject: str, expected: str, expected_size: int | None, out: _Collector) -> None:
    _check_digest(path, subject, expected, out, algorithm="md5", expected_size=expected_size)


class _Md5:
    """md5 of everything it is fed, as a chunk consumer: GPT4All's lists give md5, nothing stronger."""

    def __init__(self) -> None:
        self._hash = hashlib.md5(usedforsecurity=False)

    def update(self, offset: int, data: memoryview) -> None:
        self._hash.update(data)

    def hexdigest(self) -> str:
        return self._hash.hexdigest()


def verify_tensor_manifest(model_path: str | os.PathLike[str], manifest_path: str | os.PathLike[str],
                           *, also: Sequence[str | os.PathLike[str]] = (), fail_fast: bool = False,
                           progress: Progress | None = None) -> VerifyReport:
    """Check a model (file or split set) against a tensor manifest, one read per file.

    The files are the manifest's, looked up among the model's (``model_path``, any shard of a set, and
    ``also``: more files of the model, an Ollama model's projector), else next to ``model_path``; a
    single-file manifest also accepts a renamed copy. Reports files missing, resized, with another
    sha256 or with a header that no longer parses; tensors missing, added or re-shaped; and for
    tensors whose bytes changed, each run of differing row groups with its rows and file span. Every
    file of the model the manifest does not name is a ``file-extra`` mismatch (a shard its split set's
    names say exists and that is absent, ``missing``); a manifest that names none of the model's files
    (nor, checking a renamed copy, any of its tensors) is NothingChecked.
    """
    manifest = read_tensor_manifest(manifest_path)
    out = _Collector(fail_fast, progress=progress)
    given = os.fspath(model_path)
    located = _locate_files(manifest, os.fspath(manifest_path), given, [os.fspath(p) for p in also], out)
    out.plan(path for _, path in located if _leaves_folder(path, given) is None)
    for file_digest, path in located:
        if out.full:
            break
        problem = _leaves_folder(path, given)
        if problem is not None:
            out.mismatches.append(Mismatch(kind="link", path=path, subject=file_digest.name,
                                           expected=file_digest.sha256, detail=problem))
        elif _absent(path):
            out.mismatches.append(Mismatch(kind="missing", path=path, subject=file_digest.name,
                                           expected=file_digest.sha256, detail="file of the manifest not found"))
        else:
            _check_model_file(manifest, file_digest, path, out)
    return _report(out, given, "manifest", empty="no file of the manifest was checked")


def verify_manifest(model: str | os.PathLike[str] | Model, manifest_path: str | os.PathLike[str], *,
                    also: Sequence[str | os.PathLike[str]] = (), fail_fast: bool = False,
                    progress: Progress | None = None) -> VerifyReport:
    """Check a model against a manifest in either format, told apart by its content: ggaudit's tensor
    manifest (JSON) or llama.cpp's ``llama-gguf-hash`` lines. ``also``: more files of the model (an Ollama
    model's projector), matched by file name (tensor manifest) or by tensor name (llama format). Either
    way, what of the model the manifest does not name is a mismatch, and a manifest naming nothing of it
    is NothingChecked."""
    if manifest_format(manifest_path) == LLAMA_HASH:
        return verify_llama_hash([model, *also], manifest_path, fail_fast=fail_fast, progress=progress)
    if isinstance(model, Model):
        return verify_tensor_manifest(model.source, manifest_path, also=[*(f.path for f in model.files), *also],
                                      fail_fast=fail_fast, progress=progress)
    return verify_tensor_manifest(model, manifest_path, also=also, fail_fast=fail_fast, progress=progress)


def verify_llama_hash(models: Sequence[str | os.PathLike[str] | Model], manifest_path: str | os.PathLike[str],
                      *, fail_fast: bool = False, progress: Progress | None = None) -> VerifyReport:
    """Check a model against llama.cpp's manifest format (``llama-gguf-hash``), one read per file.

    ``models``: the model's files (a path opens a whole split set) or opened Models. Lines are matched by
    tensor name, whatever path the manifest was made with (see :func:`plan_llama_check`); for each tensor
    and each model line the strongest type given is checked. Reports each tensor whose digest differs
    (its file span), a model line's digest of all tensor data that differs, tensors the manifest names
    that the model lacks and the reverse, a file of the model no line names (``file-extra``), and a model
    file absent or no longer GGUF. A manifest no line of which names a tensor or a file of the model is
    NothingChecked.
    """
    entries = read_llama_hash(manifest_path)
    out = _Collector(fail_fast, progress=progress)
    first = models[0] if models else ""
    source = first.source if isinstance(first, Model) else os.fspath(first)
    files = _open_llama_targets(models, out)
    if files is None:
        return _report(out, source, "llama-gguf-hash", empty="no file of the model opened")
    plan = plan_llama_check(entries, files, manifest_path)
    if not any(p.named for p in plan.files):
        raise NothingChecked(manifest_path, f"names nothing of {source}: no line names a tensor or a file of it; "
                             "nothing was checked")
    out.tally.plan(sum(tensor_data_span(p.file) for p in plan.files if p.named))
    out.mismatches.extend(
        Mismatch(kind="tensor-missing", path=source if home is None else home.path, subject=tensor, expected=e.hex,
                 tensor=tensor, detail=f"tensor in the manifest (line {e.line}), not in the model")
        for e, tensor, home in plan.missing)
    out.tensors = out.tensors_differing = len(plan.missing)
    out.mismatches.extend(
        Mismatch(kind="missing", path=source, subject=e.name, expected=e.hex,
                 detail=f"no file of the model has this model line's tensors or name (line {e.line})")
        for e in plan.unmatched)
    for file_plan in plan.files:
        if out.full:
            break
        _check_llama_file(file_plan, out)
    return _report(out, source, "llama-gguf-hash", empty="no line of the manifest was checked")


def _open_llama_targets(models: Sequence[str | os.PathLike[str] | Model], out: _Collector) -> list[GGUFFile] | None:
    """The files of every model given, each once; None (and why, as a mismatch) if one is absent or unreadable."""
    files: dict[str, GGUFFile] = {}
    for model in models:
        if not isinstance(model, Model):
            path = os.fspath(model)
            if _absent(path):
                out.mismatches.append(Mismatch(kind="missing", path=path, subject=os.path.basename(path),
                                               detail="model file not found"))
                return None
            try:
                model = open_model(path)
            except FormatError as err:
                out.mismatches.append(Mismatch(kind="header", path=err.path or path, subject=os.path.basename(path),
                                               offset=err.offset, detail=f"not a readable GGUF model, nothing "
                                               f"checked: {err.message}"))
                return None
        files.update((f.path, f) for f in model.files)
    return list(files.values())


def _structure_mismatches(f: GGUFFile, subject: str) -> list[Mismatch]:
    """Bytes of the file no tensor owns that should not be there (a payload after the weights, non-zero
    padding, gaps): digests of tensor data cannot see them, so they are checked here."""
    return [Mismatch(kind="structure", path=f.path, subject=subject, offset=s.offset, length=s.length,
                     expected=s.expected, actual=s.actual, detail=f"{s.kind}: bytes no tensor owns")
            for s in check_structure(f)]


def _check_llama_file(plan: FilePlan, out: _Collector) -> None:
    f = plan.file
    if not plan.named:
        out.mismatches.append(Mismatch(kind="file-extra", path=f.path, subject=os.path.basename(f.path), offset=0,
                                       length=f.size, detail="file of the model, no line of the manifest names it "
                                       "or its tensors: not checked"))
        return
    out.mismatches.extend(_structure_mismatches(f, f.path))
    hashes = hash_gguf_file(f, {name: (e.type,) for name, e in plan.tensors.items()},
                            () if plan.model is None else (plan.model.type,), progress=out.tally.part())
    out.bytes_hashed += hashes.bytes_hashed
    for t in f.tensors:
        want = plan.tensors.get(t.name)
        out.tensors += want is not None
        if want is None:
            if plan.extra:
                out.mismatches.append(Mismatch(kind="tensor-extra", path=f.path, subject=t.name, offset=t.offset,
                                               length=t.nbytes, tensor=t.name,
                                               detail="tensor in the file, not in the manifest"))
        elif (have := hashes.tensors[t.name][want.type]) != want.hex:
            out.mismatches.append(Mismatch(kind="tensor-data", path=f.path, subject=t.name, expected=want.hex,
                                           actual=have, offset=t.offset, length=t.nbytes, tensor=t.name,
                                           rows=(0, max(t.n_rows - 1, 0)),
                                           detail=f"{want.type} of the tensor differs (manifest line {want.line})"))
            out.tensors_differing += 1
    if plan.model is not None:
        want, have = plan.model, hashes.model[plan.model.type]
        out.checked.append(Checked(path=f.path, subject="all tensor data", algorithm=want.type, digest=have,
                                   size=sum(t.nbytes for t in f.tensors), ok=have == want.hex))
        if have != want.hex:
            start = min((t.offset for t in f.tensors), default=f.data_offset)
            end = max((t.end for t in f.tensors), default=start)
            out.mismatches.append(Mismatch(kind="model-data", path=f.path, subject=want.name, expected=want.hex,
                                           actual=have, offset=start, length=end - start,
                                           detail=f"{want.type} of all tensor data differs (manifest line "
                                                  f"{want.line})"))


def _leaves_folder(path: str, given: str) -> str | None:
    """Why a file the manifest names next to the model must not be opened (a link pointing out of the
    model's folder, a loop), or None."""
    if path == given:
        return None
    problem = confine(path, sibling_roots(given))
    if problem == OUTSIDE:
        return "resolves outside the model's folder (a link pointing out): not followed"
    return problem


def _absent(path: str) -> bool:
    """True only if ``path`` does not exist; a file that cannot be looked at (a folder without
    permission, say) is unreadable input, for opening it to report, not a missing file."""
    try:
        os.stat(path)
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return False


def _locate_files(manifest: TensorManifest, manifest_path: str, given: str, also: Sequence[str],
                  out: _Collector) -> list[tuple[FileDigest, str]]:
    """Where each file of the manifest is: the model's file of that name, else next to ``given``. The
    model's files the manifest does not name are mismatches, recorded here (before anything is read);
    NothingChecked when it names none of them."""
    files: dict[str, str] = {}
    for path in _model_files(given, also):
        files.setdefault(os.path.basename(path), path)
    names = [f.name for f in manifest.files]
    if len(names) == 1 and names[0] not in files and named_shards(given) is None:
        # A single file renamed (say, a copy of an Ollama blob) is still the same model, if its tensors are.
        if _no_tensor_in_common(manifest, given):
            raise NothingChecked(manifest_path, f"names no tensor of {given}, which would be checked in place "
                                 f"of {names[0]}; nothing was checked")
        out.warnings.append(f"manifest describes {names[0]}, checking {os.path.basename(given)} in its place")
        located, listed = [(manifest.files[0], given)], {os.path.basename(given)}
    elif not files.keys() & set(names):
        shown = ", ".join(names[:3]) + (", ..." if len(names) > 3 else "") if names else "none"
        raise NothingChecked(manifest_path, f"names no file of {given} (the manifest's files: {shown}); "
                             "nothing was checked")
    else:
        folder = os.path.dirname(given)
        located, listed = [(f, files.get(f.name, os.path.join(folder, f.name))) for f in manifest.files], set(names)
    out.mismatches.extend(_unlisted_file(path, given) for name, path in files.items() if name not in listed)
    return located


def _model_files(given: str, also: Sequence[str]) -> list[str]:
    """The files of the model checked against a manifest: each path given and, for a shard of a split set,
    every shard its name says the set has (found by name, as opening the set finds them), each once."""
    return list(dict.fromkeys(shard for path in (given, *also) for shard in named_shards(path) or [path]))


def _unlisted_file(path: str, given: str) -> Mismatch:
    """A file of the model that the manifest does not name: ``file-extra`` (never opened: nothing says what
    it should hold), or why it is not there to be one."""
    name = os.path.basename(path)
    problem = _leaves_folder(path, given)
    if problem is not None:
        return Mismatch(kind="link", path=path, subject=name, detail=problem)
    try:
        size: int | None = os.stat(path).st_size
    except FileNotFoundError:
        return Mismatch(kind="missing", path=path, subject=name, detail="shard of the model's split set not found "
                        "(and not in the manifest)")
    except OSError:
        size = None
    return Mismatch(kind="file-extra", path=path, subject=name, offset=None if size is None else 0, length=size,
                    detail="file of the model, not in the manifest: not checked")


def _no_tensor_in_common(manifest: TensorManifest, path: str) -> bool:
    """Whether the manifest's tensors and the file's (both some) share no name: the manifest is another
    model's. False when the header does not parse, for the check to report it."""
    try:
        have = {t.name for t in open_gguf(path).tensors}
    except (GGAuditError, OSError):
        return False
    wanted = {t.name for t in manifest.tensors}
    return bool(have) and bool(wanted) and not have & wanted


def _check_model_file(manifest: TensorManifest, expected: FileDigest, path: str, out: _Collector) -> None:
    wanted = [t for t in manifest.tensors if t.file == expected.name]
    try:
        opened = open_gguf(path)
        actual, tensors = digest_gguf_file(opened, manifest.group_bytes, progress=out.tally.part())
        out.mismatches.extend(_structure_mismatches(opened, expected.name))
    except FormatError as err:
        # A damaged header is a finding too: say so, and still compare the whole file's digest.
        out.mismatches.append(Mismatch(kind="header", path=path, subject=expected.name, offset=err.offset,
                                       detail=f"no longer parses as GGUF, tensors not checked: {err}"))
        identity = FileIdentity.now(path, "while it was being hashed")
        digest = _hash(path, Sha256(), identity, out.tally.part())
        actual, tensors = FileDigest(expected.name, identity.size, digest), ()
        wanted = []
    out.bytes_hashed += actual.size
    ok = actual.size == expected.size and actual.sha256 == expected.sha256
    out.checked.append(Checked(path=path, subject=expected.name, algorithm="sha256", digest=actual.sha256,
                               size=actual.size, ok=ok))
    if actual.size != expected.size:
        out.mismatches.append(_size_mismatch(path, expected.name, expected.size, actual.size))
    if actual.sha256 != expected.sha256:
        out.mismatches.append(_digest_mismatch("sha256", path, expected.name, expected.sha256, actual.sha256,
                                               actual.size))
    problems = compare_tensors(wanted, tensors, path)
    out.mismatches.extend(problems)
    out.tensors += len(wanted)
    out.tensors_differing += len({m.tensor for m in problems if m.kind != "tensor-extra"})


def compare_tensors(expected: Sequence[TensorDigest], actual: Sequence[TensorDigest],
                    path: str) -> list[Mismatch]:
    """Tensor-level differences between a manifest's tensors and freshly computed ones."""
    found = {t.name: t for t in actual}
    listed = {t.name for t in expected}
    problems = []
    for want in expected:
        have = found.get(want.name)
        if have is None:
            problems.append(Mismatch(kind="tensor-missing", path=path, subject=want.name, tensor=want.name,
                                     detail="tensor in the manifest, not in the file"))
        elif _geometry(want) != _geometry(have):
            problems.append(Mismatch(kind="tensor-layout", path=path, subject=want.name, expected=_geometry_text(want),
                                     actual=_geometry_text(have), offset=have.offset, length=have.nbytes,
                                     tensor=want.name, detail="type, shape or row layout differs"))
        else:
            # Both digests count: the row groups localise a change, the whole-tensor digest still
            # stands on its own (a manifest whose groups agree but whose tensor digest does not).
            runs = list(_differing_runs(want, have, path))
            if not runs and want.xxh3_128 != have.xxh3_128:
                runs.append(_whole_tensor_mismatch(want, have, path))
            problems.extend(runs)
    problems.extend(Mismatch(kind="tensor-extra", path=path, subject=t.name, offset=t.offset, length=t.nbytes,
                             tensor=t.name, detail="tensor in the file, not in the manifest")
                    for t in actual if t.name not in listed)
    return problems


def _geometry(t: TensorDigest) -> tuple[Any, ...]:
    return t.ggml_type, t.shape, t.nbytes, t.row_bytes, t.n_rows, t.rows_per_group


def _geometry_text(t: TensorDigest) -> str:
    return (f"{t.ggml_type} {list(t.shape)}, {t.n_rows} rows of {t.row_bytes} bytes ({t.nbytes} in all), "
            f"{t.rows_per_group} per row group")


def _whole_tensor_mismatch(want: TensorDigest, have: TensorDigest, path: str) -> Mismatch:
    return Mismatch(kind="tensor-data", path=path, subject=want.name, expected=want.xxh3_128, actual=have.xxh3_128,
                    offset=have.offset, length=have.nbytes, tensor=want.name, rows=(0, max(have.n_rows - 1, 0)),
                    detail="xxh3-128 of the whole tensor differs (no row group's does)")


def _differing_runs(want: TensorDigest, have: TensorDigest, path: str) -> Iterator[Mismatch]:
    """One Mismatch per run of consecutive differing row groups, with the first group's digests."""
    bad = [i for i, (a, b) in enumerate(zip(want.groups, have.groups, strict=False)) if a != b]
    runs: list[list[int]] = []
    for g in bad:
        if runs and runs[-1][-1] == g - 1:
            runs[-1].append(g)
        else:
            runs.append([g])
    for run in runs:
        first_row, _ = have.group_rows(run[0])
        _, last_row = have.group_rows(run[-1])
        start, _ = have.group_span(run[0])
        end = sum(have.group_span(run[-1]))
        yield Mismatch(kind="tensor-data", path=path, subject=want.name, expected=want.groups[run[0]],
                       actual=have.groups[run[0]], offset=start, length=end - start, tensor=want.name,
                       rows=(first_row, last_row),
                       detail=f"xxh3-128 of {len(run)} row group(s) differs")
