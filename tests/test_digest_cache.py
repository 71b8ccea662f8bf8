"""The digest cache (ggaudit/verify/cache.py): the default verify reads every byte, however the cache
stands (damage below the filesystem keeps every stamp); a verify that trusts the cache (--trust-cache,
--quick) reads nothing of an unchanged store and says of each such file that it was not read again; a
file changed in any way the key can see is read again; a cache in trouble is a warning, never an error.

Every test's cache is its own (conftest sets GGAUDIT_CACHE_DIR); tests that look at the cache's file take
the folder from there.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import stat
import sys
import threading
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ggaudit.verify import cache as digest_cache
from ggaudit.verify import collect
from ggaudit.verify.cache import FILE_NAME, DigestCache, cache_folder
from ggaudit.verify.dispatch import verify
from ggaudit.errors import UsageError

from ollama_support import ollama_store
from support import run_cli
from platforms import needs_mode_bits
from test_json_schema import errors

MODEL = bytes(range(256)) * 4096            # 1 MiB
PROJECTOR = b"projector " * 1000


def settled() -> None:
    """Let the files just written age past the window in which the cache does not trust their stamps."""
    time.sleep(0.15)


@pytest.fixture(scope="module")
def aged_stores(request: pytest.FixtureRequest,
                tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path, Path]]:
    """A store of its own for every test here that takes one, all laid out first and settled together: one
    wait for the module instead of one a test."""
    wanted = sum(item.module is request.module and "store" in item.fixturenames for item in request.session.items)
    stores = []
    for _ in range(wanted):
        root = tmp_path_factory.mktemp("store") / "store"
        stores.append((root, *ollama_store(root, MODEL, PROJECTOR)))
    settled()
    return iter(stores)


@pytest.fixture
def store(aged_stores: Iterator[tuple[Path, Path, Path]]) -> tuple[Path, Path, Path]:
    """An Ollama store (model and projector blob), settled, no other test's; returns (root, model blob,
    projector blob)."""
    return next(aged_stores)


@pytest.fixture
def folder() -> Path:
    return Path(os.environ["GGAUDIT_CACHE_DIR"])


def no_reading(monkeypatch: pytest.MonkeyPatch) -> None:
    """From here on, a file read to hash it fails the test."""
    def refuse(path: Any, *args: Any, **kwargs: Any) -> int:
        raise AssertionError(f"read {path}")
    monkeypatch.setattr(collect, "read_through", refuse)


def rows(folder: Path) -> list[tuple[str, str, str]]:
    with sqlite3.connect(folder / FILE_NAME) as db:
        return sorted(db.execute("SELECT path, algorithm, digest FROM digests"))


def set_computed(folder: Path, seconds: float) -> None:
    """Date every entry of the cache ``seconds`` after the epoch, so a report's date is known."""
    with sqlite3.connect(folder / FILE_NAME) as db:
        db.execute("UPDATE digests SET computed = ?", (seconds,))


def test_a_second_verify_trusting_the_cache_of_an_unchanged_store_reads_nothing(
        store: tuple[Path, Path, Path], folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root, model, projector = store
    first = verify("ollama:tiny", store=root, cache=True)
    assert first.ok and (first.stats.files, first.stats.cached, first.stats.bytes_hashed) == (2, 0, len(MODEL)
                                                                                             + len(PROJECTOR))
    assert [(c.source, c.cached_at) for c in first.checked] == [("read", None)] * 2
    assert rows(folder) == sorted([(str(model.resolve()), "sha256", hashlib.sha256(MODEL).hexdigest()),
                                   (str(projector.resolve()), "sha256", hashlib.sha256(PROJECTOR).hexdigest())])
    set_computed(folder, 1_700_000_000.0)
    no_reading(monkeypatch)
    second = verify("ollama:tiny", store=root, cache=True, trust_cache=True)
    assert second.ok and (second.stats.files, second.stats.cached, second.stats.bytes_hashed) == (2, 2, 0)
    assert [c.digest for c in second.checked] == [c.digest for c in first.checked]
    assert [(c.source, c.cached_at) for c in second.checked] == [("cache", "2023-11-14T22:13:20Z")] * 2
    assert second.warnings == () and second.stats.seconds < 0.5


def test_the_default_verify_reads_every_byte_with_the_cache_filled(store: tuple[Path, Path, Path], folder: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    root, model, projector = store
    verify("ollama:tiny", store=root, cache=True)
    assert len(rows(folder)) == 2
    read: list[str] = []
    real_read = collect.read_through

    def counting(path: Any, *args: Any, **kwargs: Any) -> Any:
        read.append(os.fspath(path))
        return real_read(path, *args, **kwargs)
    monkeypatch.setattr(collect, "read_through", counting)
    again = verify("ollama:tiny", store=root, cache=True)
    assert read == [str(model), str(projector)]
    assert again.ok and (again.stats.cached, again.stats.bytes_hashed) == (0, len(MODEL) + len(PROJECTOR))
    assert [c.source for c in again.checked] == ["read", "read"] and again.warnings == ()


def damage_below_the_filesystem(folder: Path, path: Path) -> bytes:
    """Flip a byte of ``path`` and leave the cache's entry for it matching the file's stamps, as media
    damage, a controller bug or a write lost in a crash would (none moves a stamp; a write from here moves
    ctime, so the entry is brought to the new ctime). Returns the bytes now in the file."""
    before = os.stat(path)
    damaged = bytearray(path.read_bytes())
    damaged[1000] ^= 0xFF
    with open(path, "r+b") as f:
        f.seek(1000)
        f.write(damaged[1000:1001])
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    with sqlite3.connect(folder / FILE_NAME) as db:
        db.execute("UPDATE digests SET ctime_ns = ? WHERE path = ?", (os.stat(path).st_ctime_ns, str(path.resolve())))
    settled()       # so the read that follows may store its digest
    return bytes(damaged)


def test_damage_below_the_filesystem_is_found_by_the_default_verify(store: tuple[Path, Path, Path],
                                                                    folder: Path) -> None:
    root, model, projector = store
    verify("ollama:tiny", store=root, cache=True)
    damaged = damage_below_the_filesystem(folder, model)
    set_computed(folder, 1_700_000_000.0)
    when = "2023-11-14T22:13:20Z"
    # Trusting the cache cannot see it: it says so of every file, as the price of not reading.
    trusted = verify("ollama:tiny", store=root, cache=True, trust_cache=True)
    assert trusted.ok and [(c.path, c.source, c.cached_at) for c in trusted.checked] == [
        (str(model), "cache", when), (str(projector), "cache", when)]
    report = verify("ollama:tiny", store=root, cache=True)
    assert [(m.kind, m.path, m.offset, m.length, m.expected, m.actual, m.detail) for m in report.mismatches] == [
        ("sha256", str(model), 0, len(MODEL), hashlib.sha256(MODEL).hexdigest(), hashlib.sha256(damaged).hexdigest(),
         "sha256 differs")]
    assert [(c.path, c.ok, c.source) for c in report.checked] == [(str(model), False, "read"),
                                                                   (str(projector), True, "read")]
    assert (report.stats.cached, report.stats.bytes_hashed) == (0, len(MODEL) + len(PROJECTOR))
    assert report.warnings == (
        f"{model}: its sha256 read now differs from the one the digest cache kept on {when} for the same device, "
        "inode, size, mtime and ctime: its bytes changed with no write the filesystem saw (media damage, a lost "
        "write), or the cache was altered",)
    # The read refreshed the cache: trusting it now gives the digest read, and a mismatch says where from.
    set_computed(folder, 1_700_000_000.0)
    again = verify("ollama:tiny", store=root, cache=True, trust_cache=True)
    assert [(m.kind, m.actual, m.detail) for m in again.mismatches] == [
        ("sha256", hashlib.sha256(damaged).hexdigest(), f"sha256 differs (digest from the cache of {when}, not read "
                                                         "again)")]
    assert again.stats.bytes_hashed == 0 and again.warnings == ()


def test_a_cache_entry_altered_to_another_digest_is_not_believed_by_default(tmp_path: Path, folder: Path) -> None:
    """The same thing seen from the cache's side: an entry for the file's exact stamps holding a digest
    the bytes do not have (an altered row) changes nothing unless the caller trusts the cache."""
    blob = tmp_path / f"sha256-{hashlib.sha256(b'payload').hexdigest()}"
    blob.write_bytes(b"payload")
    settled()
    verify(blob, cache=True)
    with sqlite3.connect(folder / FILE_NAME) as db:
        db.execute("UPDATE digests SET digest = ?, computed = ?", ("0" * 64, 1_700_000_000.0))
    report = verify(blob, cache=True)
    assert report.ok and [(c.digest, c.source) for c in report.checked] == [(hashlib.sha256(b"payload").hexdigest(),
                                                                           "read")]
    assert len(report.warnings) == 1 and report.warnings[0].startswith(f"{blob}: its sha256 read now differs")
    assert rows(folder) == [(str(blob.resolve()), "sha256", hashlib.sha256(b"payload").hexdigest())]


@pytest.mark.parametrize("digest, computed", [("NOT-HEX", 1_700_000_000.0), ("ab" * 32, "yesterday"),
                                              ("ab" * 32, 1e300)])
def test_an_entry_that_is_not_a_digest_and_a_date_is_no_entry(tmp_path: Path, folder: Path, digest: str,
                                                               computed: object) -> None:
    blob = tmp_path / f"sha256-{hashlib.sha256(b'payload').hexdigest()}"
    blob.write_bytes(b"payload")
    settled()
    verify(blob, cache=True)
    with sqlite3.connect(folder / FILE_NAME) as db:
        db.execute("UPDATE digests SET digest = ?, computed = ?", (digest, computed))
    report = verify(blob, cache=True, trust_cache=True)
    assert report.ok and (report.stats.cached, report.stats.bytes_hashed) == (0, 7)


def test_a_same_size_rewrite_with_its_mtime_set_back_is_read_again(store: tuple[Path, Path, Path]) -> None:
    root, model, _ = store
    verify("ollama:tiny", store=root, cache=True)
    before = os.stat(model)
    with open(model, "r+b") as f:
        f.seek(1000)
        f.write(bytes([MODEL[1000] ^ 0xFF]))
    os.utime(model, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = os.stat(model)
    assert (after.st_size, after.st_mtime_ns) == (before.st_size, before.st_mtime_ns)
    if sys.platform != "win32":     # Windows' ctime is the creation time: the limitation cache.py states
        assert after.st_ctime_ns != before.st_ctime_ns
        report = verify("ollama:tiny", store=root, cache=True, trust_cache=True)
        assert (report.stats.cached, report.stats.bytes_hashed) == (1, len(MODEL))
        assert [(m.kind, m.path) for m in report.mismatches] == [("sha256", str(model))]


def test_a_file_replaced_by_another_of_the_same_size_and_stamps_is_read_again(store: tuple[Path, Path, Path]) -> None:
    root, model, _ = store
    verify("ollama:tiny", store=root, cache=True)
    before = os.stat(model)
    replacement = model.with_name("replacement")
    replacement.write_bytes(MODEL[:-1] + b"\0")
    os.utime(replacement, ns=(before.st_atime_ns, before.st_mtime_ns))
    os.replace(replacement, model)
    report = verify("ollama:tiny", store=root, cache=True, trust_cache=True)
    assert (report.stats.cached, report.stats.bytes_hashed) == (1, len(MODEL))
    assert [m.kind for m in report.mismatches] == ["sha256"]


def test_a_file_with_stamps_too_fresh_to_trust_is_not_stored(tmp_path: Path, folder: Path) -> None:
    blob = tmp_path / f"sha256-{hashlib.sha256(b'fresh').hexdigest()}"
    blob.write_bytes(b"fresh")
    future = time.time_ns() + 60 * 10**9      # a write now could leave stamps like these unchanged
    os.utime(blob, ns=(future, future))
    for _ in range(2):
        report = verify(blob, cache=True, trust_cache=True)
        assert report.ok and (report.stats.cached, report.stats.bytes_hashed) == (0, 5)
    assert rows(folder) == []


def test_a_digest_is_kept_per_algorithm(tmp_path: Path, folder: Path) -> None:
    (tmp_path / "f.bin").write_bytes(b"payload")
    sums = tmp_path / "SHA256SUMS"
    sums.write_text(f"{hashlib.sha256(b'payload').hexdigest()}  f.bin\n")
    settled()
    assert verify(sums=sums, cache=True, trust_cache=True).stats.cached == 0
    assert verify(sums=sums, cache=True, trust_cache=True).stats.cached == 1
    assert [a for _, a, _ in rows(folder)] == ["sha256"]


def test_the_library_leaves_the_cache_alone_unless_asked(store: tuple[Path, Path, Path], folder: Path) -> None:
    root, _, _ = store
    for _ in range(2):
        assert verify("ollama:tiny", store=root).stats.cached == 0
    assert not (folder / FILE_NAME).exists()
    with pytest.raises(UsageError, match="trust_cache: takes its digests from the cache: not with the cache off"):
        verify("ollama:tiny", store=root, trust_cache=True)
    with pytest.raises(UsageError, match="trust_cache: must be True or False, not str"):
        verify("ollama:tiny", store=root, cache=True, trust_cache="yes")  # type: ignore[arg-type]


def test_a_cache_folder_of_the_callers_own(store: tuple[Path, Path, Path], tmp_path: Path) -> None:
    root, _, _ = store
    verify("ollama:tiny", store=root, cache=tmp_path / "mine")
    assert verify("ollama:tiny", store=root, cache=tmp_path / "mine", trust_cache=True).stats.cached == 2
    assert len(rows(tmp_path / "mine")) == 2


@needs_mode_bits
def test_the_cache_is_made_private_whatever_the_umask(store: tuple[Path, Path, Path], tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    where = tmp_path / "new" / "cache"        # neither folder exists yet
    monkeypatch.setenv("GGAUDIT_CACHE_DIR", str(where))
    umask = os.umask(0)
    try:
        report = verify("ollama:tiny", store=store[0], cache=True)
    finally:
        os.umask(umask)
    assert report.ok and report.warnings == ()
    assert [stat.S_IMODE(os.stat(p).st_mode) for p in (where.parent, where, where / FILE_NAME)] == [0o700, 0o700,
                                                                                                     0o600]


def test_a_corrupt_cache_is_a_warning_and_is_started_afresh(store: tuple[Path, Path, Path], folder: Path) -> None:
    root, _, _ = store
    folder.mkdir(parents=True, exist_ok=True)
    (folder / FILE_NAME).write_bytes(b"this is not a database, it was damaged" * 100)
    report = verify("ollama:tiny", store=root, cache=True)
    assert report.ok and report.stats.bytes_hashed == len(MODEL) + len(PROJECTOR)
    assert report.warnings == (f"digest cache {folder / FILE_NAME} was not a readable database (file is not a "
                               "database): started afresh",)
    again = verify("ollama:tiny", store=root, cache=True, trust_cache=True)
    assert again.warnings == () and again.stats.cached == 2


def test_a_foreign_database_is_left_alone(store: tuple[Path, Path, Path], folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    with sqlite3.connect(folder / FILE_NAME) as db:
        db.execute("CREATE TABLE theirs (x)")
        db.execute("PRAGMA user_version = 7")
    report = verify("ollama:tiny", store=store[0], cache=True)
    assert report.ok and report.warnings == (f"digest cache {folder / FILE_NAME} is not this version's cache "
                                             "(application_id 0, user_version 7): hashing without it",)
    with sqlite3.connect(folder / FILE_NAME) as db:
        assert db.execute("SELECT name FROM sqlite_master").fetchall() == [("theirs",)]


def test_an_unwritable_cache_folder_is_a_warning(store: tuple[Path, Path, Path], tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "a-file").write_bytes(b"")
    where = tmp_path / "a-file" / "cache"       # a folder that cannot be made, whoever runs the test
    try:
        os.mkdir(where, 0o700)
    except OSError as err:
        reason = err.strerror
    monkeypatch.setenv("GGAUDIT_CACHE_DIR", str(where))
    report = verify("ollama:tiny", store=store[0], cache=True)
    assert report.ok and report.stats.bytes_hashed == len(MODEL) + len(PROJECTOR)
    assert report.warnings == (f"digest cache {where / FILE_NAME} could not be opened ({reason}): "
                               "hashing without it",)


def test_a_home_folder_that_cannot_be_told_is_a_warning(store: tuple[Path, Path, Path],
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """HOME unset and no passwd entry for the uid (a container's arbitrary user): Path.home() raises
    RuntimeError; verify still runs, without the cache, and says so (never exit 3)."""
    def no_home() -> Path:
        raise RuntimeError("Could not determine home directory.")

    for variable in ("GGAUDIT_CACHE_DIR", "XDG_CACHE_HOME", "LOCALAPPDATA", "HOME"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setattr(Path, "home", staticmethod(no_home))
    said = "digest cache: cannot tell the home folder (HOME is not set; set GGAUDIT_CACHE_DIR): hashing without it"
    report = verify("ollama:tiny", store=store[0], cache=True)
    assert report.ok and report.stats.bytes_hashed == len(MODEL) + len(PROJECTOR) and report.stats.cached == 0
    assert report.warnings == (said,)
    quick = verify("ollama:tiny", store=store[0], cache=True, quick=True)
    assert quick.stats.bytes_hashed == 0 and quick.stats.unchecked == 2 and said in quick.warnings
    result = run_cli(["verify", "ollama:tiny", "--store", store[0]])
    assert (result.exit_code, result.stderr) == (0, f"ggaudit: warning: {said}\n"), (result.stderr, result.exception)


def test_a_cache_locked_too_long_by_another_run_is_a_warning(store: tuple[Path, Path, Path], folder: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    verify("ollama:tiny", store=store[0], cache=True)
    monkeypatch.setattr(digest_cache, "LOCK_TIMEOUT_SECONDS", 0.05)
    holder = sqlite3.connect(folder / FILE_NAME, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        report = verify("ollama:tiny", store=store[0], cache=True, trust_cache=True)
    finally:
        holder.close()
    assert report.ok and report.stats.cached == 0
    assert report.warnings == (f"digest cache {folder / FILE_NAME} could not be opened (database is locked): "
                               "hashing without it",)


def test_runs_at_the_same_time_share_the_cache(tmp_path: Path) -> None:
    roots = []
    for i in range(4):
        ollama_store(tmp_path / f"s{i}", MODEL + bytes([i]), PROJECTOR + bytes([i]))
        roots.append(tmp_path / f"s{i}")
    settled()
    reports: list[Any] = [None] * 8

    def one(i: int) -> None:
        reports[i] = verify("ollama:tiny", store=roots[i % 4], cache=True)
    threads = [threading.Thread(target=one, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(r.ok and r.warnings == () for r in reports)
    assert sum(verify("ollama:tiny", store=root, cache=True, trust_cache=True).stats.cached for root in roots) == 8


def test_entries_past_the_bound_go_the_missing_files_first(tmp_path: Path, folder: Path) -> None:
    names = ["a", "b", "c"]
    for name in names:
        (tmp_path / name).write_bytes(name.encode())
    sums = tmp_path / "SHA256SUMS"
    sums.write_text("".join(f"{hashlib.sha256(n.encode()).hexdigest()}  {n}\n" for n in names))
    settled()
    verify(sums=sums, cache=True)
    assert len(rows(folder)) == 3
    (tmp_path / "b").unlink()
    DigestCache(max_entries=2).lookup(tmp_path / "a", "sha256", os.stat(tmp_path / "a"))
    assert [Path(p).name for p, _, _ in rows(folder)] == ["a", "c"]
    DigestCache(max_entries=1).lookup(tmp_path / "a", "sha256", os.stat(tmp_path / "a"))
    assert len(rows(folder)) == 1


def test_quick_on_a_store_never_seen_hashes_nothing_and_says_so(store: tuple[Path, Path, Path],
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    root, model, projector = store
    no_reading(monkeypatch)
    report = verify("ollama:tiny", store=root, cache=True, quick=True)
    assert report.ok and report.checked == () and report.mismatches == ()
    assert (report.stats.files, report.stats.cached, report.stats.unchecked, report.stats.bytes_hashed) == (0, 0, 2, 0)
    assert report.warnings == (f"not hashed (quick): {model}: no cached digest",
                               f"not hashed (quick): {projector}: no cached digest")


def test_quick_serves_what_a_full_run_cached_and_still_checks_sizes(store: tuple[Path, Path, Path],
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    root, model, _ = store
    verify("ollama:tiny", store=root, cache=True)
    no_reading(monkeypatch)
    report = verify("ollama:tiny", store=root, cache=True, quick=True)
    assert report.ok and (report.stats.cached, report.stats.unchecked) == (2, 0)
    with open(model, "r+b") as f:
        f.truncate(len(MODEL) - 1)
    damaged = verify("ollama:tiny", store=root, cache=True, quick=True)
    assert [(m.kind, m.expected, m.actual) for m in damaged.mismatches] == [("size", str(len(MODEL)),
                                                                            str(len(MODEL) - 1))]


def test_quick_needs_the_cache_and_takes_no_manifest(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="quick: takes its digests from the cache"):
        verify(tmp_path / "x", quick=True)
    with pytest.raises(UsageError, match="quick: checks whole files' cached digests"):
        verify(tmp_path / "x", manifest=tmp_path / "m", cache=True, quick=True)
    with pytest.raises(UsageError, match="cache: must be True, False or a folder, not int"):
        verify(tmp_path / "x", cache=1)  # type: ignore[arg-type]


def test_the_cache_folder_per_platform(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("GGAUDIT_CACHE_DIR")
    monkeypatch.setattr(Path, "home", lambda: tmp_path / "home")
    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_folder() == tmp_path / "xdg" / "ggaudit"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative")        # the XDG spec: ignore a relative path
    assert cache_folder() == tmp_path / "home" / ".cache" / "ggaudit"
    monkeypatch.setattr(sys, "platform", "darwin")
    assert cache_folder() == tmp_path / "home" / "Library" / "Caches" / "ggaudit"
    monkeypatch.setattr(sys, "platform", "win32")
    monkeypatch.setenv("LOCALAPPDATA", str(tmp_path / "local"))
    assert cache_folder() == tmp_path / "local" / "ggaudit" / "Cache"
    monkeypatch.setenv("GGAUDIT_CACHE_DIR", str(tmp_path / "given"))
    assert cache_folder() == tmp_path / "given"


# --- the command line ------------------------------------------------------------------------------

def summary(result: Any) -> str:
    return str(result.stdout.splitlines()[-1])


def test_cli_reads_every_byte_by_default_and_trusts_the_cache_only_when_asked(store: tuple[Path, Path, Path],
                                                                               folder: Path) -> None:
    root, model, projector = store
    size = len(MODEL) + len(PROJECTOR)
    for _ in range(2):      # the first run fills the cache, the second still reads every byte
        result = run_cli(["verify", "ollama:tiny", "--store", root])
        assert result.exit_code == 0 and summary(result) == f"summary: 2 files checked, 0 from the cache, {size} " \
                                                            "bytes hashed, 0 mismatches"
        assert "not read again" not in result.stdout
    assert len(rows(folder)) == 2
    set_computed(folder, 1_700_000_000.0)
    trusted = run_cli(["verify", "ollama:tiny", "--store", root, "--trust-cache"])
    assert trusted.exit_code == 0 and trusted.stderr == ""
    assert trusted.stdout.splitlines()[1:] == [
        f"ok sha256 {hashlib.sha256(MODEL).hexdigest()}: file {model}, {len(MODEL)} bytes "
        "(application/vnd.ollama.image.model); digest from the cache of 2023-11-14T22:13:20Z, not read again",
        f"ok sha256 {hashlib.sha256(PROJECTOR).hexdigest()}: file {projector}, {len(PROJECTOR)} bytes "
        "(application/vnd.ollama.image.projector); digest from the cache of 2023-11-14T22:13:20Z, not read again",
        "summary: 2 files checked, 2 from the cache (not read again), 0 bytes hashed, 0 mismatches"]
    quiet = run_cli(["verify", "ollama:tiny", "--store", root, "--trust-cache", "-q"])
    assert quiet.stdout == "verify ollama registry.ollama.ai/library/tiny:latest: clean, 2 files checked, 2 from " \
                           "the cache (not read again)\n"


def test_cli_damage_below_the_filesystem_is_exit_1_by_default(store: tuple[Path, Path, Path], folder: Path) -> None:
    root, model, _ = store
    run_cli(["verify", "ollama:tiny", "--store", root])
    damage_below_the_filesystem(folder, model)
    trusted = run_cli(["verify", "ollama:tiny", "--store", root, "--trust-cache"])
    assert trusted.exit_code == 0 and summary(trusted).startswith("summary: 2 files checked, 2 from the cache (not "
                                                                  "read again), 0 bytes hashed")
    result = run_cli(["verify", "ollama:tiny", "--store", root])
    assert result.exit_code == 1
    assert f"MISMATCH sha256: file {model}, offset 0, length {len(MODEL)} (application/vnd.ollama.image.model): " \
           "sha256 differs" in result.stdout.splitlines()
    assert summary(result) == f"summary: 2 files checked, 0 from the cache, {len(MODEL) + len(PROJECTOR)} bytes " \
                              "hashed, 1 mismatch"


def test_cli_every_format_says_which_digests_the_cache_gave(store: tuple[Path, Path, Path], folder: Path) -> None:
    root, model, projector = store
    run_cli(["verify", "ollama:tiny", "--store", root])
    set_computed(folder, 1_700_000_000.0)
    said = "digest from the cache of 2023-11-14T22:13:20Z, not read again"
    out = {fmt: run_cli(["verify", "ollama:tiny", "--store", root, "--trust-cache", "--format", fmt]).stdout
           for fmt in ("sarif", "junit", "html")}
    artifacts = {a["location"]["uri"]: a for a in json.loads(out["sarif"])["runs"][0]["artifacts"]}
    for blob in (model, projector):
        found = artifacts[blob.as_uri()]
        assert (found["properties"], found["description"]) == (
            {"digestSource": "cache", "digestCachedAt": "2023-11-14T22:13:20Z"}, {"text": said})
    cases = ET.fromstring(out["junit"]).iter("testcase")
    assert {(c.get("classname"), c.findtext("system-out")) for c in cases} == {(str(model), said + "\n"),
                                                                               (str(projector), said + "\n")}
    assert out["html"].count(f"<td>{said}</td>") == 2 and "<td>read now</td>" not in out["html"]
    read = {fmt: run_cli(["verify", "ollama:tiny", "--store", root, "--format", fmt]).stdout
            for fmt in ("sarif", "junit", "html")}
    artifacts = {a["location"]["uri"]: a for a in json.loads(read["sarif"])["runs"][0]["artifacts"]}
    assert [artifacts[b.as_uri()] for b in (model, projector)] == [
        {"location": {"uri": b.as_uri()}, "length": b.stat().st_size} for b in (model, projector)]
    assert "not read again" not in read["junit"] + read["sarif"]
    assert read["html"].count("<td>read now</td>") == 2 and said not in read["html"]


def test_cli_no_cache_hashes_everything(store: tuple[Path, Path, Path], folder: Path) -> None:
    size = len(MODEL) + len(PROJECTOR)
    for _ in range(2):
        result = run_cli(["verify", "ollama:tiny", "--store", store[0], "--no-cache"])
        assert summary(result) == f"summary: 2 files checked, 0 from the cache, {size} bytes hashed, 0 mismatches"
    assert not (folder / FILE_NAME).exists()


def test_cli_quick_on_a_store_never_seen(store: tuple[Path, Path, Path]) -> None:
    root, model, projector = store
    result = run_cli(["verify", "ollama:tiny", "--store", root, "--quick"])
    assert result.exit_code == 0
    assert summary(result) == "summary: 0 files checked, 0 from the cache, 0 bytes hashed, 2 not hashed (quick), " \
                              "0 mismatches"
    # Warnings are prose: a path in one is shown once-escaped, as paths are (single backslashes on Windows).
    assert result.stderr.splitlines() == [f"ggaudit: warning: not hashed (quick): {p}: no cached digest"
                                          for p in (model, projector)]


def test_cli_quick_or_trust_cache_without_a_cache_is_a_usage_error(store: tuple[Path, Path, Path]) -> None:
    result = run_cli(["verify", "ollama:tiny", "--store", store[0], "--quick", "--no-cache"])
    assert result.exit_code == 2
    assert result.stderr == "ggaudit: error: --quick takes its digests from the cache: not with --no-cache\n"
    result = run_cli(["verify", "ollama:tiny", "--store", store[0], "--trust-cache", "--no-cache"])
    assert result.exit_code == 2
    assert result.stderr == "ggaudit: error: --trust-cache takes digests from the cache: not with --no-cache\n"
    result = run_cli(["verify", "ollama:tiny", "--store", store[0], "--trust-cache", "--dask", "local"])
    assert result.exit_code == 2
    assert result.stderr == "ggaudit: error: --dask workers use no digest cache: not with --trust-cache\n"


def test_cli_every_model_of_a_store_is_served_from_the_cache(store: tuple[Path, Path, Path]) -> None:
    run_cli(["verify", "ollama:*", "--store", store[0]])
    result = run_cli(["verify", "ollama:*", "--store", store[0], "--json", "--trust-cache"])
    doc = json.loads(result.stdout)
    assert result.exit_code == 0 and errors(doc) == []
    assert [m["stats"]["cached"] for m in doc["models"]] == [2, 0]     # the model, then the store's own report


def test_cli_json_counts_validate(store: tuple[Path, Path, Path], folder: Path) -> None:
    run_cli(["verify", "ollama:tiny", "--store", store[0]])
    read = json.loads(run_cli(["verify", "ollama:tiny", "--store", store[0], "--json"]).stdout)
    assert errors(read) == []
    assert [(c["source"], c["cached_at"]) for c in read["models"][0]["checked"]] == [("read", None)] * 2
    set_computed(folder, 1_700_000_000.5)
    doc = json.loads(run_cli(["verify", "ollama:tiny", "--store", store[0], "--json", "--trust-cache"]).stdout)
    assert errors(doc) == []
    stats = doc["models"][0]["stats"]
    assert (stats["files"], stats["cached"], stats["unchecked"], stats["bytes_hashed"]) == (2, 2, 0, 0)
    assert [(c["source"], c["cached_at"]) for c in doc["models"][0]["checked"]] == \
        [("cache", "2023-11-14T22:13:20Z")] * 2


def test_a_walker_uses_the_digest_cache_it_is_given_and_none_it_is_not(store: tuple[Path, Path, Path], folder: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The cache is an argument of the walker, passed down to its collector: no ambient cache a caller could
    forget to set or leave set for the next check."""
    from ggaudit.verify.walk.ollama import verify_ollama

    root, model, _ = store
    verify("ollama:tiny", store=root, cache=True)
    set_computed(folder, 1_700_000_000.0)
    without = verify_ollama("tiny", root)           # no cache given: every byte read, none from the cache
    assert (without.stats.cached, without.stats.bytes_hashed) == (0, len(MODEL) + len(PROJECTOR))
    no_reading(monkeypatch)
    given = DigestCache(folder, trust=True)
    try:
        trusted = verify_ollama("tiny", root, digest_cache=given)
    finally:
        given.close()
    assert (trusted.stats.cached, trusted.stats.bytes_hashed) == (2, 0)
    assert (trusted.checked[0].path, trusted.checked[0].source, trusted.checked[0].cached_at) == (
        str(model), "cache", "2023-11-14T22:13:20Z")


def test_no_context_variable_is_left_in_verify() -> None:
    """No module of ggaudit/verify imports contextvars: the digest cache comes in as an argument."""
    import ast

    from ggaudit.verify import dispatch     # by name: ggaudit.verify is the function

    found = []
    for source in Path(dispatch.__file__).parent.rglob("*.py"):
        for node in ast.walk(ast.parse(source.read_text(encoding="utf-8"))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module or ""] + [a.name for a in node.names] if isinstance(node, ast.ImportFrom) else
                     [node.id] if isinstance(node, ast.Name) else [node.attr] if isinstance(node, ast.Attribute)
                     else [])
            found += [f"{source.name}:{node.lineno}" for n in names if n in ("contextvars", "ContextVar")]
    assert found == []
