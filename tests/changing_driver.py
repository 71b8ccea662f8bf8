"""Run the ggaudit CLI while changing the audited file under it, at a chosen moment (test helper).

    python tests/changing_driver.py ACTION WHEN N TARGET MARKER -- ggaudit-args...

ACTION: ``truncate`` (cut the file to half its size), ``replace`` (rename a same-size file with
other bytes over it), ``rewrite`` (overwrite the second half in place, same size), ``rewrite-keep-mtime``
(the same, then its atime and mtime put back with ``os.utime``: only its ctime tells), or ``none``.
WHEN: ``read`` (after the N-th pread/preadv of TARGET in this process or a forked child), ``map``
(right after the N-th mmap of TARGET is created, before any byte of it is touched) or ``premap``
(just before the N-th mmap of TARGET is made: after any size check the caller did).
MARKER: a file created when the change happens, so the test knows it did.

Runs in its own process because the failure this provokes, if unhandled, is SIGBUS: it must kill
this process, never the test runner. Exit status is the CLI's.
"""

from __future__ import annotations

import mmap
import os
import sys
import threading
from typing import Any


def main(argv: list[str]) -> int:
    action, when, n, target, marker = argv[:5]
    assert argv[5] == "--"
    args = argv[6:]
    target = os.path.realpath(target)
    want = int(n)
    state = {"count": 0, "fired": False}
    lock = threading.Lock()
    fds: set[int] = set()
    real_open, real_pread, real_preadv, real_mmap = os.open, os.pread, os.preadv, mmap.mmap

    def change() -> None:
        # The marker first: the change can end this process (a worker the scan kills as soon as another
        # process sees the file change) before a line after it runs.
        os.close(real_open(marker, os.O_WRONLY | os.O_CREAT, 0o644))
        size = os.path.getsize(target)
        if action == "truncate":
            os.truncate(target, size // 2)
        elif action == "replace":
            tmp = target + ".new"
            fd = real_open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.write(fd, b"\x5a" * size)
            os.close(fd)
            os.replace(tmp, target)
        elif action in ("rewrite", "rewrite-keep-mtime"):
            before = os.stat(target)
            fd = real_open(target, os.O_WRONLY)
            os.pwrite(fd, b"\xa5" * (size - size // 2), size // 2)
            os.close(fd)
            if action == "rewrite-keep-mtime":
                os.utime(target, ns=(before.st_atime_ns, before.st_mtime_ns))

    def tick(kind: str, fd: int) -> None:
        if kind != when or fd not in fds:
            return
        with lock:
            state["count"] += 1
            if state["fired"] or state["count"] < want or action == "none":
                return
            state["fired"] = True
        change()

    def open_(path: Any, flags: int, *a: Any, **k: Any) -> int:
        fd = real_open(path, flags, *a, **k)
        if not isinstance(path, int) and os.path.realpath(os.fsdecode(path)) == target:
            fds.add(fd)
        else:
            fds.discard(fd)
        return fd

    def pread(fd: int, *a: Any) -> bytes:
        tick("read", fd)
        return real_pread(fd, *a)

    def preadv(fd: int, *a: Any) -> int:
        tick("read", fd)
        return real_preadv(fd, *a)

    class Map(real_mmap):  # type: ignore[misc, valid-type]
        def __new__(cls, fileno: int, *a: Any, **k: Any) -> Any:
            tick("premap", fileno)
            mapped = super().__new__(cls, fileno, *a, **k)
            tick("map", fileno)
            return mapped

    os.open, os.pread, os.preadv, mmap.mmap = open_, pread, preadv, Map  # type: ignore[assignment]
    from ggaudit.cli import main as cli

    try:
        cli.main(args=args, prog_name="ggaudit", standalone_mode=True)
    except SystemExit as done:
        return int(done.code or 0)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
