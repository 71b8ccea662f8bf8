"""What the platform running the suite can do, as skip marks with the reason: one place, so a test that
cannot hold on Windows says why in the same words everywhere (the Windows lane runs the whole suite)."""

from __future__ import annotations

import multiprocessing
import os
import shutil
import socket
import sys
import tempfile

import pytest

WINDOWS = sys.platform == "win32"
#: Root on POSIX: file modes do not stop it, so permission tests drop capabilities with setpriv.
IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0
SETPRIV = shutil.which("setpriv")

needs_fifo = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="FIFOs are POSIX-only")
needs_unix_socket = pytest.mark.skipif(not hasattr(socket, "AF_UNIX") or WINDOWS,
                                       reason="Unix-domain socket files are POSIX-only")
needs_fork = pytest.mark.skipif("fork" not in multiprocessing.get_all_start_methods(),
                                reason="needs the fork start method (POSIX)")
needs_mode_bits = pytest.mark.skipif(WINDOWS or (IS_ROOT and SETPRIV is None),
                                     reason="needs POSIX file modes that hold (Windows has ACLs; root "
                                            "needs setpriv to drop its override)")
needs_linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux-only interface")
needs_posix_signals = pytest.mark.skipif(WINDOWS or not os.path.isdir("/proc/self/task"),
                                         reason="sends POSIX signals (SIGTERM, SIGHUP, SIGINT to a process "
                                                "group) and finds child processes through /proc")


def _can_symlink() -> bool:
    """Whether this process can make a symlink that then exists. Windows needs Developer Mode or an
    elevated token; Wine 8.0 reports success and creates nothing."""
    with tempfile.TemporaryDirectory() as folder:
        link = os.path.join(folder, "link")
        try:
            os.symlink(os.path.join(folder, "target"), link)
        except (OSError, NotImplementedError):
            return False
        return os.path.islink(link)


needs_symlinks = pytest.mark.skipif(not _can_symlink(), reason="this platform cannot create symlinks here")
#: A file mapped into memory can be truncated under the mapping (POSIX; touching the lost pages is SIGBUS).
#: Windows keeps a mapped file's size (tests/test_platform.py shows it), so there is nothing to survive.
mapped_files_can_shrink = pytest.mark.skipif(WINDOWS, reason="Windows does not let a mapped file shrink")
