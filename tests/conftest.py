"""Fixtures shared by the tests (pytest finds them here; no import needed).

Tests write only inside pytest's temporary directory, and so do the tools they use: hypothesis (which
by default writes a `.hypothesis` folder into the current directory, the checkout) and tempfile.
"""

from __future__ import annotations

import errno
import mmap
import os
import re
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis.configuration import set_hypothesis_home_dir

from rows_support import supports_direct


@pytest.hookimpl(trylast=True)      # after pytest's own tmp_path plugin has set up its factory
def pytest_configure(config: pytest.Config) -> None:
    # Before collection, which already writes: hypothesis keeps files while test modules are imported, and
    # tests/platforms.py probes for symlinks in a temporary folder. The scripts' helpers the tests call
    # (fuzz seed corpora) make temporary folders of their own: tempfile puts them here too.
    factory = config._tmp_path_factory  # type: ignore[attr-defined]
    set_hypothesis_home_dir(factory.mktemp("hypothesis"))
    tempfile.tempdir = str(factory.mktemp("tempfile"))
    config.addinivalue_line("markers", "scale: a test at hub scale (seconds each): scripts/scale_lane.sh runs them")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The ``scale`` tests run in their lane (GGAUDIT_SCALE=1, scripts/scale_lane.sh, run by CI), so the default
    suite stays within its minutes on 2 cores; elsewhere each is skipped with that reason."""
    if os.environ.get("GGAUDIT_SCALE"):
        return
    skip = pytest.mark.skip(reason="a test at scale: scripts/scale_lane.sh runs it (GGAUDIT_SCALE=1)")
    for item in items:
        if item.get_closest_marker("scale") is not None:
            item.add_marker(skip)


def _alignment_enforced(folder: Path) -> bool:
    """Linux: whether O_DIRECT in *folder* refuses a misaligned offset, as a disk's filesystem does. A tmpfs
    refuses O_DIRECT before Linux 6.6 and accepts it without alignment rules since."""
    if not sys.platform.startswith("linux"):
        return True
    probe = folder / ".odirect-rules-probe"
    probe.write_bytes(b"\0" * 8192)
    fd = os.open(probe, os.O_RDONLY | os.O_DIRECT)
    try:
        os.preadv(fd, [mmap.mmap(-1, 4096)], 1)
    except OSError as err:
        return err.errno == errno.EINVAL
    else:
        return False
    finally:
        os.close(fd)
        probe.unlink()


# A folder per test, made by mkdtemp in a folder of their own: pytest's numbered folders (its tmp_path, and
# tmp_path_factory.mktemp) each first list every folder of the session's base folder, a cost that grows
# with every test run before (seconds over the suite).

@pytest.fixture(scope="session")
def _test_folders(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("tests")


@pytest.fixture
def tmp_path(request: pytest.FixtureRequest, _test_folders: Path) -> Path:
    """pytest's tmp_path (a new empty folder, the test's own, named after it), made without the listing."""
    return Path(tempfile.mkdtemp(prefix=re.sub(r"\W", "_", request.node.name)[:30], dir=_test_folders))


@pytest.fixture(autouse=True)
def _private_digest_cache(_test_folders: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test's digest cache (verify's default on the command line) is its own, never the user's."""
    monkeypatch.setenv("GGAUDIT_CACHE_DIR", tempfile.mkdtemp(prefix="digest-cache-", dir=_test_folders))


@pytest.fixture
def ddir(tmp_path: Path) -> Path:
    """tmp_path, where direct reads work there with their alignment rules. On a tmpfs they do not: run the
    suite with TMPDIR on a disk (README: Run the tests) rather than have a test write outside its temporary
    directory."""
    if not (supports_direct(tmp_path) and _alignment_enforced(tmp_path)):
        pytest.skip("the temporary folder takes no direct reads with alignment rules (a tmpfs?): run with "
                    "TMPDIR=/var/tmp to test them")
    return tmp_path
