"""A persistent cache of whole-file digests: a second verify of an unchanged store reads no file's bytes.

An entry is one file's digest under one algorithm, keyed by the file's resolved path and algorithm, and
it stands only while the file's (device, inode, size, mtime_ns, ctime_ns) are what they were when it was
hashed. A write changes ctime on POSIX (and setting mtime back changes it too), so a file rewritten in
place with the same size and the same mtime is not served stale. What the key cannot see: on Windows
ctime is the creation time, so a same-size rewrite whose mtime is then set back is invisible there; and a
file written within the filesystem's timestamp granularity of when it was hashed could keep both stamps,
so such a "racy" file is not stored (``_racy``), as git does for its index.

What no stamp can see: bytes changed below the filesystem (media damage, a controller or firmware bug, a
write lost in a crash) leave every stamp as it was. So a verify reads every byte unless its caller asks
for the cache's digests (``trust``: ``--trust-cache``; ``quick``: ``--quick``, which hashes nothing), and
a digest taken from here is reported as such, with the date it was computed (:class:`Cached`). Hashing
still fills the cache, for a later run that asks.

The cache is a sqlite database in the user's cache folder (:func:`cache_folder`), never next to the files
it describes. It must be private, since a digest in it stands in for reading a file: on POSIX the folder
and the database must belong to the user and be writable by no one else, and every folder above them
must belong to root or the user and be writable by no one else unless it has the sticky bit (``/tmp``),
or another user could replace them (:func:`_not_private`); otherwise it is not used, with a warning that
names it and why, as ssh refuses a loose key file. What it makes it makes private: folders 0700, the
database 0600. Windows has no such mode bits (its ACLs decide) and is not checked. It is an optimisation
and nothing more: a cache that is corrupt, locked, foreign, unwritable or not private becomes a warning
in the report and the files are hashed.
"""

from __future__ import annotations

import math
import os
import re
import sqlite3
import stat
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from ..errors import UsageError
from ..io.system import WINDOWS

#: The database's name inside the cache folder.
FILE_NAME = "digests.sqlite3"
#: Entries kept; past this, entries for files that no longer exist go, then the oldest.
MAX_ENTRIES = 200_000
#: How long a run waits for another run's write before giving up on the cache (a warning).
LOCK_TIMEOUT_SECONDS = 2.0
#: Digests are written at most this often, in one short transaction (never held while hashing).
FLUSH_SECONDS = 1.0
#: sqlite's application_id: marks the database as ggaudit's ("ggAC"), so a foreign one is left alone.
APPLICATION_ID = 0x67674143
SCHEMA_VERSION = 1

_SCHEMA = """CREATE TABLE IF NOT EXISTS digests (
    path TEXT NOT NULL, algorithm TEXT NOT NULL,
    device TEXT NOT NULL, inode TEXT NOT NULL, size INTEGER NOT NULL, mtime_ns INTEGER NOT NULL,
    ctime_ns INTEGER NOT NULL, digest TEXT NOT NULL, computed REAL NOT NULL,
    PRIMARY KEY (path, algorithm))"""

#: What a caller may pass as ``cache``: on (the user's cache folder), off, or a folder of its own.
CacheChoice = bool | str | os.PathLike[str]

_HEX = re.compile(r"[0-9a-f]+")


def cache_folder() -> Path:
    """Where the cache lives: ``$GGAUDIT_CACHE_DIR``, else the platform's per-user cache folder
    (``$XDG_CACHE_HOME/ggaudit`` or ``~/.cache/ggaudit``; ``~/Library/Caches/ggaudit``;
    ``%LOCALAPPDATA%\\ggaudit\\Cache``)."""
    explicit = os.environ.get("GGAUDIT_CACHE_DIR")
    if explicit:
        return Path(explicit)
    if sys.platform == "win32":
        local = os.environ.get("LOCALAPPDATA")
        return (Path(local) if local else Path.home() / "AppData" / "Local") / "ggaudit" / "Cache"
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Caches" / "ggaudit"
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg and os.path.isabs(xdg) else Path.home() / ".cache") / "ggaudit"


def _stamp(st: os.stat_result) -> tuple[str, str, int, int, int]:
    # Device and inode as text: Windows' file ids reach 128 bits, past sqlite's integers.
    return str(st.st_dev), str(st.st_ino), st.st_size, st.st_mtime_ns, st.st_ctime_ns


@dataclass(frozen=True)
class Cached:
    """A digest the cache holds for a file unchanged since, and when it was computed (UTC, ISO 8601)."""

    digest: str
    computed: str


def _utc(seconds: object) -> str | None:
    """``seconds`` since the epoch as ``2025-06-01T12:34:56Z``; None for what is not such a time."""
    if not isinstance(seconds, (int, float)) or not math.isfinite(seconds):
        return None
    try:
        return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))
    except (OverflowError, OSError, ValueError):
        return None


def _is_hex(digest: object) -> bool:
    return isinstance(digest, str) and _HEX.fullmatch(digest) is not None


def _racy(st: os.stat_result, started_ns: int) -> bool:
    """Whether a write after hashing began could have left both stamps as they are: the file changed
    within the timestamp granularity (2 s where stamps are whole seconds, as FAT's; else a clock tick,
    taken generously) of when its hashing started, or its stamps lie in the future."""
    whole_seconds = st.st_mtime_ns % 1_000_000_000 == 0 and st.st_ctime_ns % 1_000_000_000 == 0
    margin = 2_000_000_000 if whole_seconds else 100_000_000
    return started_ns - max(st.st_mtime_ns, st.st_ctime_ns) < margin


class DigestCache:
    """One run's use of the cache: lookups, digests to store, and the warnings its troubles gave.

    The database opens on first use, in the thread that uses it. Files are hashed and their digests
    stored; ``trust``: a file unchanged since it was hashed is not read, its digest is taken from here;
    ``quick`` (trust, and more): the run hashes nothing and takes digests from here only.
    """

    def __init__(self, folder: str | os.PathLike[str] | None = None, *, trust: bool = False, quick: bool = False,
                 max_entries: int = MAX_ENTRIES) -> None:
        self.trust = trust or quick
        self.quick = quick
        self.max_entries = max_entries
        self._db: sqlite3.Connection | None = None
        self._broken = False
        self._pending: list[tuple[object, ...]] = []
        self._flushed = time.monotonic()
        self._warnings: list[str] = []
        self.folder = Path(folder) if folder is not None else self._default_folder()

    def _default_folder(self) -> Path:
        """:func:`cache_folder`, or where it cannot be told (HOME unset and no passwd entry for the uid, so
        ``Path.home()`` raises RuntimeError) no cache for this run, with a warning: a cache in trouble is
        never an error. The folder is then ``Path()`` and never used."""
        try:
            return cache_folder()
        except RuntimeError:
            self._warnings.append("digest cache: cannot tell the home folder (HOME is not set; set "
                                  "GGAUDIT_CACHE_DIR): hashing without it")
            self._broken = True
            return Path()

    @property
    def path(self) -> Path:
        return self.folder / FILE_NAME

    def lookup(self, path: str | os.PathLike[str], algorithm: str, st: os.stat_result) -> Cached | None:
        """The digest stored for ``path`` if the file is unchanged since it was hashed, else None."""
        db = self._open()
        if db is None:
            return None
        try:
            row = db.execute("SELECT device, inode, size, mtime_ns, ctime_ns, digest, computed FROM digests "
                             "WHERE path = ? AND algorithm = ?", (_key_path(path), algorithm)).fetchone()
        except sqlite3.Error as err:
            self._give_up("could not be read", err)
            return None
        # An entry altered into something that is not a digest or a time is no entry: the file is read.
        computed = None if row is None else _utc(row[6])
        if row is None or tuple(row[:5]) != _stamp(st) or computed is None or not _is_hex(row[5]):
            return None
        return Cached(row[5], computed)

    def store(self, path: str | os.PathLike[str], algorithm: str, before: os.stat_result, digest: str,
              started_ns: int) -> None:
        """Remember ``digest``, hashed from ``started_ns`` (wall clock) on, of the file ``before``
        describes, unless the file changed meanwhile or is too fresh to trust its stamps."""
        if self._broken:
            return
        try:
            after = os.stat(path)
        except OSError:
            return
        if _stamp(after) != _stamp(before) or _racy(before, started_ns):
            return
        self._pending.append((_key_path(path), algorithm, *_stamp(before), digest, time.time()))
        if time.monotonic() - self._flushed >= FLUSH_SECONDS:
            self.flush()

    def flush(self) -> None:
        """Write the digests stored so far, in one transaction."""
        self._flushed = time.monotonic()
        pending, self._pending = self._pending, []
        db = self._open() if pending else None
        if db is None:
            return
        try:
            with _transaction(db):
                db.executemany("INSERT OR REPLACE INTO digests VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", pending)
        except sqlite3.Error as err:
            self._give_up("could not be written", err)

    def take_warnings(self) -> list[str]:
        """The warnings so far (each said once), emptied."""
        taken, self._warnings = self._warnings, []
        return taken

    def close(self) -> None:
        self.flush()
        if self._db is not None:
            self._db.close()
            self._db = None

    def _give_up(self, what: str, err: BaseException) -> None:
        """Stop using the cache for this run, saying why once."""
        self._warnings.append(f"digest cache {os.fspath(self.path)} {what} ({_reason(err)}): "
                              "hashing without it")
        self._broken = True
        self._pending = []
        if self._db is not None:
            self._db.close()
            self._db = None

    def _open(self) -> sqlite3.Connection | None:
        if self._db is not None or self._broken:
            return self._db
        try:
            self._db = self._connect()
        except (OSError, sqlite3.Error) as err:
            self._give_up("could not be opened", err)
            return None
        if self._db is not None:
            self._prune(self._db)
        return self._db

    def _connect(self) -> sqlite3.Connection | None:
        """The database, made if need be; a file that is not a database (a crash mid-write, a disk error)
        is replaced by an empty one, since all it held can be hashed again. None (a warning) if the folder
        or the database is not private to the user."""
        folder = Path(os.path.realpath(self.folder))
        problem = _not_private(folder.parents, _ancestor_problem)
        if problem is None:
            _make_folders(folder)
            problem = _not_private([folder, folder / FILE_NAME], _own_problem)
        if problem is not None:
            self._warnings.append(f"digest cache {os.fspath(self.path)} not used: {problem}, so another user "
                                  "could alter its digests: hashing without it")
            self._broken = True
            return None
        # Created here, before sqlite does, so it is the user's alone (sqlite's journal copies its mode).
        os.close(os.open(self.path, os.O_RDWR | os.O_CREAT | getattr(os, "O_BINARY", 0), 0o600))
        try:
            return self._setup(_connect(self.path))
        except sqlite3.DatabaseError as err:
            if isinstance(err, sqlite3.OperationalError):    # locked, read-only, disk full: not corrupt
                raise
            self._warnings.append(f"digest cache {os.fspath(self.path)} was not a readable database "
                                  f"({_reason(err)}): started afresh")
            os.unlink(self.path)
            os.close(os.open(self.path, os.O_RDWR | os.O_CREAT | getattr(os, "O_BINARY", 0), 0o600))
            return self._setup(_connect(self.path))

    def _setup(self, db: sqlite3.Connection) -> sqlite3.Connection | None:
        """``db`` once it holds this version's table (made in a transaction: one run makes it, the others
        wait and find it made), or None with a warning if it is another program's or version's."""
        try:
            if _identity(db) == (0, 0):
                with _transaction(db):
                    if _identity(db) == (0, 0):
                        db.execute(_SCHEMA)
                        db.execute(f"PRAGMA application_id = {APPLICATION_ID}")
                        db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            found = _identity(db)
        except BaseException:
            db.close()
            raise
        if found != (APPLICATION_ID, SCHEMA_VERSION):
            db.close()
            self._give_up("is not this version's cache", ValueError("application_id {}, user_version {}"
                                                                    .format(*found)))
            return None
        return db

    def _prune(self, db: sqlite3.Connection) -> None:
        """Past ``max_entries``: drop entries for files that no longer exist, then the oldest."""
        try:
            count = db.execute("SELECT count(*) FROM digests").fetchone()[0]
            if count <= self.max_entries:
                return
            gone = [(p,) for (p,) in db.execute("SELECT DISTINCT path FROM digests") if not os.path.exists(p)]
            with _transaction(db):
                db.executemany("DELETE FROM digests WHERE path = ?", gone)
                db.execute("DELETE FROM digests WHERE rowid IN (SELECT rowid FROM digests ORDER BY computed "
                           "LIMIT max(0, (SELECT count(*) FROM digests) - ?))", (self.max_entries,))
        except sqlite3.Error as err:
            self._give_up("could not be pruned", err)


def _make_folders(folder: Path) -> None:
    """``folder`` and each missing folder above it, made 0700 (the XDG spec's mode for a cache folder it
    must make; ``Path.mkdir(parents=True)`` would make the parents with the umask's mode)."""
    missing = []
    while not os.path.lexists(folder) and folder.parent != folder:
        missing.append(folder)
        folder = folder.parent
    for made in reversed(missing):
        try:
            os.mkdir(made, 0o700)
        except FileExistsError:             # another run made it meanwhile
            if not made.is_dir():
                raise


def _not_private(paths: Iterable[Path], problem: Callable[[Path, os.stat_result], str | None]) -> str | None:
    """The first of ``problem``'s answers for the existing ``paths`` (top-most first), or None. Always
    None on Windows: mode bits and uids do not say who may write there (its ACLs do)."""
    if WINDOWS:
        return None
    for path in sorted(paths, key=lambda p: len(p.parts)):
        try:
            st = os.stat(path)
        except FileNotFoundError:
            continue
        found = problem(path, st)
        if found is not None:
            return found
    return None


def _writers(st: os.stat_result) -> str | None:
    """Who besides the owner may write where ``st`` describes, in words, or None."""
    who = [name for bit, name in ((stat.S_IWGRP, "its group"), (stat.S_IWOTH, "others")) if st.st_mode & bit]
    return " and ".join(who) or None


def _own_problem(path: Path, st: os.stat_result) -> str | None:
    """Why the cache folder or database at ``path`` is not private: not the user's, or writable by others."""
    me = os.geteuid()
    if st.st_uid != me:
        return f"{os.fspath(path)} is owned by uid {st.st_uid}, not by this user (uid {me})"
    who = _writers(st)
    if who is not None:
        return f"{os.fspath(path)} is writable by {who} (mode {stat.S_IMODE(st.st_mode):04o})"
    return None


def _ancestor_problem(path: Path, st: os.stat_result) -> str | None:
    """Why a folder above the cache lets another user replace what is below it: owned by someone who is
    neither root nor the user, or writable by others without the sticky bit (which keeps them to their
    own entries, as in ``/tmp``)."""
    me = os.geteuid()
    if st.st_uid not in (0, me):
        return f"{os.fspath(path)}, a folder above it, is owned by uid {st.st_uid}, neither root nor this user " \
               f"(uid {me})"
    who = _writers(st)
    if who is not None and not st.st_mode & stat.S_ISVTX:
        return f"{os.fspath(path)}, a folder above it, is writable by {who} without the sticky bit " \
               f"(mode {stat.S_IMODE(st.st_mode):04o})"
    return None


def _connect(path: Path) -> sqlite3.Connection:
    # Autocommit: transactions are explicit and short (_transaction), never open while a file is hashed.
    return sqlite3.connect(path, timeout=LOCK_TIMEOUT_SECONDS, isolation_level=None)


@contextmanager
def _transaction(db: sqlite3.Connection) -> Iterator[None]:
    db.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")


def _identity(db: sqlite3.Connection) -> tuple[int, int]:
    return (db.execute("PRAGMA application_id").fetchone()[0], db.execute("PRAGMA user_version").fetchone()[0])


def _key_path(path: str | os.PathLike[str]) -> str:
    return os.path.realpath(path)


def _reason(err: BaseException) -> str:
    return (err.strerror if isinstance(err, OSError) and err.strerror else str(err)) or type(err).__name__


def check_cache_use(cache: object, *, trust: object, quick: object) -> None:
    """UsageError unless ``cache`` is True, False or a folder and ``trust`` and ``quick`` are True or False,
    neither of them with the cache off."""
    if not isinstance(cache, (bool, str, os.PathLike)):
        raise UsageError(None, f"must be True, False or a folder, not {type(cache).__name__}", field="cache")
    for name, value in (("trust_cache", trust), ("quick", quick)):
        if not isinstance(value, bool):
            raise UsageError(None, f"must be True or False, not {type(value).__name__}", field=name)
        if value and cache is False:
            raise UsageError(None, "takes its digests from the cache: not with the cache off", field=name)


@contextmanager
def open_cache(cache: CacheChoice, *, trust: bool = False, quick: bool = False) -> Iterator[DigestCache | None]:
    """The digest cache of one run, closed when it ends, for the caller to pass to the checks (``cache``:
    True for the user's cache folder, a folder of its own, or False for none, given as None): every file
    is read and its digest stored; with ``trust``, a file unchanged since it was hashed is not read again,
    its digest taken from the cache; with ``quick``, hash nothing and take digests from it only."""
    check_cache_use(cache, trust=trust, quick=quick)
    session = None if cache is False else DigestCache(None if cache is True else cache, trust=trust, quick=quick)
    try:
        yield session
    finally:
        if session is not None:
            session.close()
