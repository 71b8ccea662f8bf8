"""What every walker shares: the :class:`Collector` a check's findings accumulate in, and the check of
one file against a digest (and size) it should have, through the digest cache the caller passed in.

The cache is an argument, never ambient state: :func:`ggaudit.verify` opens it (:func:`open_cache
<ggaudit.verify.cache.open_cache>`) and hands it to the walker, which gives it to its Collector.
"""

from __future__ import annotations

import hashlib
import os
import stat
import time
from collections.abc import Iterable
from dataclasses import InitVar, dataclass, field
from pathlib import Path
from typing import Any

from ..errors import NothingChecked, ReadError
from ..format.layout import GGUFFile
from ..format.structure import check_structure
from ..io.fan_out import Progress, read_through
from ..io.hashing import Sha256
from ..io.identity import FileIdentity
from ..stores.expected import StoreEntry
from ..untrusted import shorten
from .cache import DigestCache
from .compare import Difference, Facts, compare_facts
from .digests import GitBlobSha1, Tally
from .report import CACHE, READ, Checked, Mismatch, VerifyReport, VerifyStats, not_read_again

__all__ = ["Collector", "Md5", "absent", "check_digest", "check_entry", "file_mismatch", "finish", "hash_unchanged",
           "problem_mismatch", "regular_file", "structure_mismatches"]


@dataclass
class Collector:
    """Accumulates a report; ``full`` turns true when --fail-fast should stop the walk."""

    fail_fast: bool
    #: The persistent digest cache of this run (None: none), and what it saved (trusted) or left
    #: unchecked (quick).
    cache: DigestCache | None = None
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


def finish(out: Collector, source: str, kind: str, *, empty: str, looked_at: int = 0) -> VerifyReport:
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


def regular_file(path: Path, subject: str, expected: str, out: Collector) -> FileIdentity | None:
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
        raise ReadError.for_os_error(path, f"cannot stat: {st.strerror}", st)
    if not stat.S_ISREG(st.st_mode):
        out.mismatches.append(Mismatch(kind="not-a-file", path=os.fspath(path), subject=subject, expected=expected,
                                       detail="not a regular file"))
        return None
    return FileIdentity.of(st)


def absent(path: str) -> bool:
    """True only if ``path`` does not exist; a file that cannot be looked at (a folder without
    permission, say) is unreadable input, for opening it to report, not a missing file."""
    try:
        os.stat(path)
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return False


def hash_unchanged(path: str | os.PathLike[str], hasher: Sha256 | GitBlobSha1 | Md5, identity: FileIdentity,
                   progress: Progress | None = None) -> str:
    """Digest of the file ``identity`` describes; ReadError if it is replaced or resized meanwhile,
    since a digest of bytes no longer there would be a wrong answer."""
    read_through(path, [hasher], end=identity.size, progress=progress)
    identity.check(path, "while it was being hashed")
    return hasher.hexdigest()


def structure_mismatches(f: GGUFFile, subject: str) -> list[Mismatch]:
    """Bytes of the file no tensor owns that should not be there (a payload after the weights, non-zero
    padding, gaps): digests of tensor data cannot see them, so the manifest walkers check them here."""
    return [Mismatch(kind="structure", path=f.path, subject=subject, offset=s.offset, length=s.length,
                     expected=s.expected, actual=s.actual, detail=f"{s.kind}: bytes no tensor owns")
            for s in check_structure(f)]


def file_mismatch(difference: Difference[str], path: str, algorithm: str, size: int, note: str = "") -> Mismatch:
    """A whole file's size or digest difference (:func:`compare_facts` of its Facts), as verify says it."""
    expected, actual = str(difference.expected), str(difference.actual)
    if difference.kind == "size":
        return Mismatch(kind="size", path=path, subject=difference.key, expected=expected, actual=actual,
                        offset=0, length=size, detail="size differs")
    return Mismatch(kind=algorithm, path=path, subject=difference.key, expected=expected, actual=actual, offset=0,
                    length=size, detail=f"{algorithm} differs{note}")


def check_digest(path: Path, subject: str, expected: str, out: Collector, *,
                 algorithm: str = "sha256", expected_size: int | None = None) -> None:
    """Check one file's size (when known) and digest, recording the outcome in ``out``. The size first:
    a file of another size is not read."""
    identity = regular_file(path, subject, expected, out)
    if identity is None:
        return
    size = identity.size
    resized = compare_facts(subject, Facts(size=expected_size), Facts(size=size))
    if resized:
        out.mismatches.extend(file_mismatch(d, os.fspath(path), algorithm, size) for d in resized)
        out.tally.skip(size)
        return
    # The same file (device and inode, or its path where the OS gives no inode) unchanged since.
    where = (identity.device, identity.inode) if identity.inode else os.fspath(path)
    key = (where, identity.size, identity.mtime_ns, identity.ctime_ns, algorithm)
    found = out.digests.get(key)
    if found is None:
        found = _cached_or_hashed(path, algorithm, identity, out)
        if found is None:
            return
        out.digests[key] = found
    actual, cached_at = found
    differences = compare_facts(subject, Facts(digest=expected), Facts(digest=actual))
    out.checked.append(Checked(path=os.fspath(path), subject=subject, algorithm=algorithm, digest=actual, size=size,
                               ok=not differences, source=READ if cached_at is None else CACHE,
                               cached_at=cached_at))
    note = "" if cached_at is None else f" ({not_read_again(cached_at)})"
    out.mismatches.extend(file_mismatch(d, os.fspath(path), algorithm, size, note) for d in differences)


def check_entry(entry: StoreEntry, out: Collector) -> None:
    """Check the file a store's entry reads against the digest (and size) it expects (:func:`check_digest`)."""
    assert entry.expected is not None        # the walkers pass only entries expecting something
    e = entry.expected
    check_digest(Path(entry.read), entry.subject, e.digest, out, algorithm=e.algorithm, expected_size=e.size)


def problem_mismatch(entry: StoreEntry) -> Mismatch:
    """What a store's entry says is wrong with its file, as the mismatch of its kind (with the digest it
    expects, if it gives one: a checksum file's line naming a link out)."""
    assert entry.problem is not None
    p = entry.problem
    return Mismatch(kind=p.kind, path=entry.path, subject=p.subject,
                    expected=None if entry.expected is None else entry.expected.digest, detail=p.detail)


def _cached_or_hashed(path: Path, algorithm: str, identity: FileIdentity,
                      out: Collector) -> tuple[str, str | None] | None:
    """The file's digest and, when it is the digest cache's, when that was computed: the cache's only when
    the caller trusts it (``trust_cache``, ``quick``) and it holds one for the file unchanged, else hashed
    (and given to the cache); None, counted unchecked, when ``quick`` finds none in the cache."""
    before = out.stats[os.fspath(path)]
    assert isinstance(before, os.stat_result)       # regular_file has stat'ed it
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
    actual = hash_unchanged(path, _hasher(algorithm, identity.size), identity, out.tally.part())
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


def _hasher(algorithm: str, size: int) -> Sha256 | GitBlobSha1 | Md5:
    return GitBlobSha1(size) if algorithm == "git-sha1" else Md5() if algorithm == "md5" else Sha256()


class Md5:
    """md5 of everything it is fed, as a chunk consumer: GPT4All's lists give md5, nothing stronger."""

    def __init__(self) -> None:
        self._hash = hashlib.md5(usedforsecurity=False)

    def update(self, offset: int, data: memoryview) -> None:
        self._hash.update(data)

    def hexdigest(self) -> str:
        return self._hash.hexdigest()
