"""Check files against the digests they are supposed to have; findings come back as frozen data.

Sources of expected digests (see ``manifests``): an Ollama model's manifest, a Hugging Face cache
snapshot, a sha256 checksum file, a blob's own name, and ggaudit's tensor manifest, which narrows a
damaged file down to the tensor and the rows that changed.
"""

from __future__ import annotations

import logging
import os
import re
import stat
import time
from dataclasses import dataclass, field
from pathlib import Path
from collections.abc import Iterator, Sequence
from typing import Any

from .._version import __version__
from .digests import GitBlobSha1, Sha256, read_through
from ..errors import FormatError, ManifestError, ReadError, UsageError
from ..format.layout import open_gguf
from ..io import FileIdentity
from .stores.hf_cache import read_hf_snapshot
from .stores.ollama import ollama_blob_path, ollama_partial_files, read_ollama_manifest
from .stores.sums import read_sums
from .manifests.tensor import FileDigest, TensorDigest, TensorManifest, digest_gguf_file, read_tensor_manifest
from ..untrusted import OUTSIDE, confine, sibling_roots

log = logging.getLogger(__name__)

#: The ``schema`` of :meth:`VerifyReport.to_json`.
SCHEMA = "ggaudit/verify-report/1"


@dataclass(frozen=True, kw_only=True)
class Mismatch:
    """One thing that is not as expected. Where, then what was expected and what was found.

    ``kind`` is one of: missing, not-a-file, size, sha256, git-sha1, link, header, tensor-data,
    tensor-missing, tensor-extra, tensor-layout. ``expected``/``actual`` hold hex digests (or sizes,
    types, shapes as text). For tensor-data, ``offset``/``length`` give the absolute span of the
    differing row groups and ``rows`` the first and last row (inclusive).
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


@dataclass(frozen=True, kw_only=True)
class Checked:
    """A file whose digest was computed; ``ok`` says whether it matched."""

    path: str
    subject: str
    algorithm: str
    digest: str
    size: int
    ok: bool

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "subject": self.subject, "algorithm": self.algorithm, "digest": self.digest,
                "size": self.size, "ok": self.ok}


@dataclass(frozen=True, kw_only=True)
class VerifyStats:
    files: int
    bytes_hashed: int
    seconds: float

    def to_json(self) -> dict[str, Any]:
        return {"files": self.files, "bytes_hashed": self.bytes_hashed, "seconds": round(self.seconds, 6)}


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

    def to_json(self) -> dict[str, Any]:
        return {"schema": SCHEMA, "tool_version": __version__, "ok": self.ok, "source": self.source,
                "kind": self.kind, "stopped_early": self.stopped_early,
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
    #: Digests already computed, per file and algorithm: a file named by many lines (or layers) is read once.
    digests: dict[tuple[Any, ...], str] = field(default_factory=dict)
    #: stat (or its error) per path: 200k layers naming one blob stat it once (a stat costs ~1 ms in Wine).
    stats: dict[str, os.stat_result | OSError] = field(default_factory=dict)

    @property
    def full(self) -> bool:
        return self.fail_fast and bool(self.mismatches)

    def report(self, source: str, kind: str) -> VerifyReport:
        stats = VerifyStats(files=len(self.checked), bytes_hashed=self.bytes_hashed,
                            seconds=time.perf_counter() - self.started)
        return VerifyReport(source=source, kind=kind, checked=tuple(self.checked), mismatches=tuple(self.mismatches),
                            warnings=tuple(self.warnings), stats=stats, stopped_early=self.full)


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


def _hash(path: str | os.PathLike[str], hasher: Sha256 | GitBlobSha1, identity: FileIdentity) -> str:
    """Digest of the file ``identity`` describes; ReadError if it is replaced or resized meanwhile,
    since a digest of bytes no longer there would be a wrong answer."""
    read_through(path, [hasher], end=identity.size)
    identity.check(path, "while it was being hashed")
    return hasher.hexdigest()


def _size_mismatch(path: str, subject: str, expected: int, actual: int) -> Mismatch:
    return Mismatch(kind="size", path=path, subject=subject, expected=str(expected), actual=str(actual),
                    offset=0, length=actual, detail="size differs")


def _digest_mismatch(algorithm: str, path: str, subject: str, expected: str, actual: str,
                     size: int) -> Mismatch:
    return Mismatch(kind=algorithm, path=path, subject=subject, expected=expected, actual=actual, offset=0,
                    length=size, detail=f"{algorithm} differs")


def _check_digest(path: Path, subject: str, expected: str, out: _Collector, *,
                  algorithm: str = "sha256", expected_size: int | None = None) -> None:
    """Check one file's size (when known) and digest, recording the outcome in ``out``."""
    identity = _identity(path, subject, expected, out)
    if identity is None:
        return
    size = identity.size
    if expected_size is not None and size != expected_size:
        out.mismatches.append(_size_mismatch(os.fspath(path), subject, expected_size, size))
        return
    # The same file (device and inode, or its path where the OS gives no inode) unchanged since.
    where = (identity.device, identity.inode) if identity.inode else os.fspath(path)
    key = (where, identity.size, identity.mtime_ns, algorithm)
    actual = out.digests.get(key)
    if actual is None:
        actual = out.digests[key] = _hash(path, GitBlobSha1(size) if algorithm == "git-sha1" else Sha256(),
                                          identity)
        out.bytes_hashed += size
    out.checked.append(Checked(path=os.fspath(path), subject=subject, algorithm=algorithm, digest=actual, size=size,
                               ok=actual == expected))
    if actual != expected:
        out.mismatches.append(_digest_mismatch(algorithm, os.fspath(path), subject, expected, actual, size))


_BLOB_NAME = re.compile(r"(?:sha256[-:])?([0-9a-fA-F]{64})")


def verify_ollama(name: str, store: str | os.PathLike[str] | None = None, *,
                  fail_fast: bool = False) -> VerifyReport:
    """Check every layer and the config of an Ollama model: present, right size, right sha256."""
    manifest = read_ollama_manifest(name, store)
    out = _Collector(fail_fast)
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
                                           subject=layer.media_type or layer.field, detail=path.message))
            continue
        _check_digest(path, layer.media_type or layer.field, layer.digest, out,
                      expected_size=layer.size)
    ours = {layer.digest for layer in manifest.blobs}
    for partial in ollama_partial_files(manifest.store):
        digest = _BLOB_NAME.match(partial.name)     # sha256-<hex>-partial: the name starts as a blob's
        whose = " (a blob of this model)" if digest and digest[1].lower() in ours else ""
        out.warnings.append(f"stray partial download: {os.fspath(partial)}{whose}")
    return out.report(str(manifest.name), "ollama")


def verify_hf(spec: str, cache: str | os.PathLike[str] | None = None, *,
              fail_fast: bool = False) -> VerifyReport:
    """Check every file of a cached Hugging Face snapshot against its blob's name, offline."""
    snapshot = read_hf_snapshot(spec, cache)
    out = _Collector(fail_fast)
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
    return out.report(f"{snapshot.spec.repo_id}@{snapshot.commit}", "hf")


def verify_sums(sums: str | os.PathLike[str], *, fail_fast: bool = False) -> VerifyReport:
    """Check every file a sha256 checksum file names (GNU, BSD --tag or OpenSSL format)."""
    out = _Collector(fail_fast)
    for entry in read_sums(sums):
        if out.full:
            break
        if entry.problem is not None:    # a link out of the folder or a loop: one entry, never opened
            out.mismatches.append(Mismatch(kind="link", path=os.fspath(entry.path), subject=entry.name,
                                           expected=entry.sha256, detail=f"line {entry.line}: {entry.problem}"))
        else:
            _check_digest(entry.path, entry.name, entry.sha256, out)
    return out.report(os.fspath(sums), "sums")


def blob_name_digest(path: str | os.PathLike[str]) -> str | None:
    """The sha256 a file's own name promises (``sha256-<hex>``, ``sha256:<hex>``, ``<hex>``), if any."""
    match = _BLOB_NAME.fullmatch(os.path.basename(os.fspath(path)))
    return match[1].lower() if match else None


def verify_blob(path: str | os.PathLike[str]) -> VerifyReport:
    """Check a content-addressed blob (Ollama or Hugging Face) against the digest in its name."""
    expected = blob_name_digest(path)
    if expected is None:
        raise UsageError(path, "the file name holds no sha256; give --manifest, --sums, ollama:NAME "
                         "or hf:ORG/NAME to say what to check it against")
    out = _Collector(False)
    _check_digest(Path(path), "blob name", expected, out)
    return out.report(os.fspath(path), "blob")


def verify_tensor_manifest(model_path: str | os.PathLike[str], manifest_path: str | os.PathLike[str],
                           *, fail_fast: bool = False) -> VerifyReport:
    """Check a model (file or split set) against a tensor manifest, one read per file.

    The files are the manifest's, looked up next to ``model_path`` (any shard of a set will do; a
    single-file manifest also accepts a renamed copy). Reports files missing, resized, with another
    sha256 or with a header that no longer parses; tensors missing, added or re-shaped; and for
    tensors whose bytes changed, each run of differing row groups with its rows and file span.
    """
    manifest = read_tensor_manifest(manifest_path)
    out = _Collector(fail_fast)
    for file_digest, path in _locate_files(manifest, os.fspath(model_path), out):
        if out.full:
            break
        problem = _leaves_folder(path, os.fspath(model_path))
        if problem is not None:
            out.mismatches.append(Mismatch(kind="link", path=path, subject=file_digest.name,
                                           expected=file_digest.sha256, detail=problem))
        elif _absent(path):
            out.mismatches.append(Mismatch(kind="missing", path=path, subject=file_digest.name,
                                           expected=file_digest.sha256, detail="file of the manifest not found"))
        else:
            _check_model_file(manifest, file_digest, path, out)
    return out.report(os.fspath(model_path), "manifest")


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


def _locate_files(manifest: TensorManifest, model_path: str, out: _Collector) -> list[tuple[FileDigest, str]]:
    folder, given = os.path.split(model_path)
    names = [f.name for f in manifest.files]
    if given not in names and len(names) == 1:
        # A single file renamed (say, a copy of an Ollama blob) is still the same model.
        out.warnings.append(f"manifest describes {names[0]}, checking {given} in its place")
        return [(manifest.files[0], model_path)]
    if given not in names:
        raise UsageError(model_path, f"not one of the manifest's files ({', '.join(names[:3])}"
                         f"{', ...' if len(names) > 3 else ''})")
    return [(f, os.path.join(folder, f.name)) for f in manifest.files]


def _check_model_file(manifest: TensorManifest, expected: FileDigest, path: str, out: _Collector) -> None:
    wanted = [t for t in manifest.tensors if t.file == expected.name]
    try:
        actual, tensors = digest_gguf_file(open_gguf(path), manifest.group_bytes)
    except FormatError as err:
        # A damaged header is a finding too: say so, and still compare the whole file's digest.
        out.mismatches.append(Mismatch(kind="header", path=path, subject=expected.name, offset=err.offset,
                                       detail=f"no longer parses as GGUF, tensors not checked: {err}"))
        identity = FileIdentity.now(path, "while it was being hashed")
        actual, tensors = FileDigest(expected.name, identity.size, _hash(path, Sha256(), identity)), ()
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
    out.mismatches.extend(compare_tensors(wanted, tensors, path))


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
    return f"{t.ggml_type} {list(t.shape)}, {t.n_rows} rows of {t.row_bytes} bytes"


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
