"""This process and the ones it starts: the cores it may use, dying with its parent, holding Ctrl-C back
while a worker starts."""

from __future__ import annotations

import contextlib
import ctypes
import os
import sys


def available_cores() -> int:
    """CPUs this process may run on: its affinity where the OS says (Linux; a container's cpuset), else
    the machine's count."""
    affinity = getattr(os, "sched_getaffinity", None)
    if affinity is not None:
        with contextlib.suppress(OSError):
            return max(1, len(affinity(0)))
    return os.cpu_count() or 1


_PR_SET_PDEATHSIG = 1


def die_with_parent(parent_pid: int) -> None:
    """Have the kernel SIGKILL this process when its parent (``parent_pid``) dies: Linux's
    ``prctl(PR_SET_PDEATHSIG)``. Elsewhere, or if the call fails, nothing: callers also watch the
    parent themselves (``multiprocessing.parent_process().sentinel``), which works everywhere."""
    if not sys.platform.startswith("linux"):
        return
    import signal
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(ctypes.c_int(_PR_SET_PDEATHSIG), ctypes.c_ulong(signal.SIGKILL), ctypes.c_ulong(0),
                   ctypes.c_ulong(0), ctypes.c_ulong(0))
    except (OSError, AttributeError):
        return
    if os.getppid() != parent_pid:      # the parent died before the request took hold
        os._exit(1)


class SigintBlocked:
    """``with SigintBlocked():`` holds back SIGINT in this thread for the block (POSIX
    ``pthread_sigmask``; elsewhere nothing).

    A process started inside the block inherits the mask, through exec too, so Ctrl-C cannot reach it
    before it has chosen its own handler (it then unblocks SIGINT itself). A Ctrl-C during the block
    waits, and is delivered as usual when the block ends."""

    def __init__(self) -> None:
        self._old: set[int] | None = None

    def __enter__(self) -> None:
        import signal
        if hasattr(signal, "pthread_sigmask"):
            self._old = set(signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT}))

    def __exit__(self, *exc: object) -> None:
        import signal
        if self._old is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, self._old)


def unblock_sigint() -> None:
    """Undo an inherited :class:`SigintBlocked` in this thread (POSIX; elsewhere nothing)."""
    import signal
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
