"""The digest cache is used only when it is private to the user (ggaudit/verify/cache.py): a digest in it
stands in for reading a file, so one another user could write would let them make a damaged file pass.

A cache folder or database another user owns, or that its group or others can write, or below a folder
another user owns or others can write without the sticky bit, is not used: one warning names it and why,
and the files are hashed, as ssh refuses a loose key file. POSIX only: on Windows, mode bits and uids do
not say who may write (its ACLs do) and the cache does not check them. The tests that change owners run
as root (chown), and one runs the command as a second uid with setpriv.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from ggaudit.verify.cache import FILE_NAME
from ggaudit.verify.dispatch import verify

from ollama_support import ollama_store
from platforms import IS_ROOT, SETPRIV, WINDOWS
from test_digest_cache import MODEL, PROJECTOR, damage_below_the_filesystem, rows, settled

posix_modes = pytest.mark.skipif(WINDOWS, reason="mode bits and uids: on Windows ACLs decide who may write, and "
                                                 "the cache does not check them there")
as_root = pytest.mark.skipif(WINDOWS or not IS_ROOT, reason="gives files to another uid (chown): needs root")
as_second_uid = pytest.mark.skipif(WINDOWS or not IS_ROOT or SETPRIV is None,
                                   reason="runs ggaudit as a second uid: needs root and setpriv")

#: Users that exist only as numbers: another user, and the one the command runs as in the setpriv tests.
OTHER, SECOND = 54321, 12345
SIZE = len(MODEL) + len(PROJECTOR)

pytestmark = posix_modes


@pytest.fixture(scope="module")
def aged_roots(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A store of its own for every test here that takes one, all laid out first and settled together: one
    wait for the module instead of one a test."""
    wanted = sum(item.module is request.module and "root" in item.fixturenames for item in request.session.items)
    roots = [tmp_path_factory.mktemp("store") / "store" for _ in range(wanted)]
    for store in roots:
        ollama_store(store, MODEL, PROJECTOR)
    settled()
    return iter(roots)


@pytest.fixture
def root(aged_roots: Iterator[Path]) -> Path:
    """An Ollama store (model and projector), settled, no other test's."""
    return next(aged_roots)


def refused(database: Path, problem: str) -> str:
    return f"digest cache {database} not used: {problem}, so another user could alter its digests: hashing without it"


def assert_not_used(root: Path, folder: Path, problem: str) -> None:
    """A verify trusting the cache (filled before) takes nothing from it, hashes every file, and says why once."""
    report = verify("ollama:tiny", store=root, cache=folder, trust_cache=True)
    assert report.ok and (report.stats.cached, report.stats.bytes_hashed) == (0, SIZE)
    assert [c.source for c in report.checked] == ["read", "read"]
    assert report.warnings == (refused(folder / FILE_NAME, problem),)


@pytest.mark.parametrize("what, bits, who", [
    ("folder", stat.S_IWGRP, "its group"), ("folder", stat.S_IWOTH, "others"),
    ("folder", stat.S_IWGRP | stat.S_IWOTH, "its group and others"),
    ("database", stat.S_IWGRP, "its group"), ("database", stat.S_IWOTH, "others")])
def test_a_cache_others_can_write_is_not_used(root: Path, tmp_path: Path, what: str, bits: int, who: str) -> None:
    folder = tmp_path / "cache"
    verify("ollama:tiny", store=root, cache=folder)
    loose = folder if what == "folder" else folder / FILE_NAME
    mode = stat.S_IMODE(os.stat(loose).st_mode) | bits
    os.chmod(loose, mode)
    before = rows(folder)
    assert_not_used(root, folder, f"{os.path.realpath(loose)} is writable by {who} (mode {mode:04o})")
    assert rows(folder) == before
    os.chmod(loose, mode & ~bits)       # made private again, it is used again
    assert verify("ollama:tiny", store=root, cache=folder, trust_cache=True).stats.cached == 2


@as_root
@pytest.mark.parametrize("what", ["folder", "database"])
def test_a_cache_another_user_owns_is_not_used(root: Path, tmp_path: Path, what: str) -> None:
    folder = tmp_path / "cache"
    verify("ollama:tiny", store=root, cache=folder)
    theirs = folder if what == "folder" else folder / FILE_NAME
    os.chown(theirs, OTHER, OTHER)
    assert_not_used(root, folder, f"{os.path.realpath(theirs)} is owned by uid {OTHER}, not by this user (uid 0)")


@pytest.mark.parametrize("mode", [0o777, 0o770, 0o702])
def test_a_cache_below_a_folder_others_can_write_is_not_used_nor_made(root: Path, tmp_path: Path, mode: int) -> None:
    """Others who can write the folder above can rename the cache folder away and put their own there."""
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, mode)
    folder = shared / "cache"
    report = verify("ollama:tiny", store=root, cache=folder)
    who = {0o777: "its group and others", 0o770: "its group", 0o702: "others"}[mode]
    assert report.ok and report.stats.bytes_hashed == SIZE
    assert report.warnings == (refused(folder / FILE_NAME, f"{os.path.realpath(shared)}, a folder above it, is "
                                                           f"writable by {who} without the sticky bit (mode "
                                                           f"{mode:04o})"),)
    assert not folder.exists()


def test_a_cache_below_a_sticky_folder_like_tmp_is_used(root: Path, tmp_path: Path) -> None:
    """The sticky bit keeps others to their own entries: the user's cache folder in /tmp is safe."""
    shared = tmp_path / "tmp"
    shared.mkdir()
    os.chmod(shared, 0o1777)
    folder = shared / "cache"
    assert verify("ollama:tiny", store=root, cache=folder).warnings == ()
    assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700
    assert verify("ollama:tiny", store=root, cache=folder, trust_cache=True).stats.cached == 2


@as_root
@pytest.mark.parametrize("mode", [0o755, 0o1777])
def test_a_cache_below_a_folder_another_user_owns_is_not_used(root: Path, tmp_path: Path, mode: int) -> None:
    """Its owner can replace what is below it, sticky bit or not (only root's and the user's own are safe)."""
    theirs = tmp_path / "theirs"
    folder = theirs / "cache"
    verify("ollama:tiny", store=root, cache=folder)
    os.chmod(theirs, mode)
    os.chown(theirs, OTHER, OTHER)
    assert_not_used(root, folder, f"{os.path.realpath(theirs)}, a folder above it, is owned by uid {OTHER}, neither "
                                  "root nor this user (uid 0)")


# --- as a second user, for real -------------------------------------------------------------------

def run_as_second_uid(args: list[object], cache: Path) -> subprocess.CompletedProcess[str]:
    """``python -m ggaudit ARGS`` as uid SECOND, with no groups, reading any file (CAP_DAC_READ_SEARCH, so
    it can reach the test's files below pytest's root-only folder) but writing only where its uid may."""
    caps = "+dac_read_search"
    cmd = [SETPRIV or "setpriv", f"--reuid={SECOND}", f"--regid={SECOND}", "--clear-groups", f"--inh-caps={caps}",
           f"--ambient-caps={caps}", sys.executable, "-m", "ggaudit", *map(str, args)]
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parent.parent), GGAUDIT_CACHE_DIR=str(cache),
               PYTHONDONTWRITEBYTECODE="1")
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)


@as_second_uid
def test_a_second_user_uses_a_cache_folder_of_its_own(root: Path, tmp_path: Path) -> None:
    mine = tmp_path / "mine"
    mine.mkdir(mode=0o700)
    os.chown(mine, SECOND, SECOND)
    first = run_as_second_uid(["verify", "ollama:tiny", "--store", root], mine)
    assert (first.returncode, first.stderr) == (0, "")
    assert os.stat(mine / FILE_NAME).st_uid == SECOND
    assert stat.S_IMODE(os.stat(mine / FILE_NAME).st_mode) == 0o600
    second = run_as_second_uid(["verify", "ollama:tiny", "--store", root, "--trust-cache"], mine)
    assert (second.returncode, second.stderr) == (0, "")
    assert second.stdout.splitlines()[-1] == "summary: 2 files checked, 2 from the cache (not read again), 0 bytes " \
                                             "hashed, 0 mismatches"


@as_second_uid
def test_a_cache_planted_by_another_user_does_not_hide_damage(root: Path, tmp_path: Path) -> None:
    """Another user made the cache folder the command is pointed at, and left in it the model's good digest
    for the stamps of a damaged copy. Trusting that cache would call the damaged model clean."""
    theirs = tmp_path / "theirs"
    verify("ollama:tiny", store=root, cache=theirs)
    model = next(p for p in (root / "blobs").iterdir() if p.stat().st_size == len(MODEL))
    damage_below_the_filesystem(theirs, model)
    os.chmod(theirs, 0o755)
    os.chmod(theirs / FILE_NAME, 0o666)
    for path in (theirs, theirs / FILE_NAME):
        os.chown(path, OTHER, OTHER)
    result = run_as_second_uid(["verify", "ollama:tiny", "--store", root, "--trust-cache"], theirs)
    assert result.returncode == 1, (result.stdout, result.stderr)
    assert result.stderr == "ggaudit: warning: " + refused(theirs / FILE_NAME, f"{os.path.realpath(theirs)} is owned "
                                                           f"by uid {OTHER}, not by this user (uid {SECOND})") + "\n"
    assert f"MISMATCH sha256: file {model}, offset 0, length {len(MODEL)} (application/vnd.ollama.image.model): " \
           "sha256 differs" in result.stdout.splitlines()
    assert result.stdout.splitlines()[-1] == f"summary: 2 files checked, 0 from the cache, {SIZE} bytes hashed, " \
                                             "1 mismatch"
